//! Which store a scenario runs on is decided by one policy, and this check holds the API suite
//! (`tests/api/`) to it.
//!
//! The policy: a scenario runs on **both stores** (PostgreSQL and SQLite: `on_both_stores!`, a
//! test per store calling one body, or a loop over both) whenever what it asserts passes
//! through the store — rows written and read back (conversation, interrupts, turns, leases,
//! audit, usage, grants), the order or atomicity of writes, a takeover, an erase. It runs on
//! **one store** only when the store merely holds the turn while the assertion is about
//! something the store does not take part in (the transport, a header, authentication, a
//! configuration check, an agent's or a model's wire format), or when the scenario is about one
//! store's own behaviour (PostgreSQL over TLS, SQLite's file). Such a test says why in one line
//! beginning `// One store:` in its body or right above it.
//!
//! The check: every function under `tests/api/` whose body names exactly one of
//! `Backend::Sqlite` and `Backend::Postgres` carries that line. None is needed by a function
//! that names both (a loop over the stores), takes the store as an argument, or is one of a
//! pair of entry points (a body of a few lines calling a function of its file, or the
//! `on_both_stores!` macro's `$name`, with one store, where the file also calls it with the
//! other).

use std::path::{Path, PathBuf};

/// The marker a one-store test carries, followed by its reason.
const MARKER: &str = "// One store:";

/// A function under `tests/api/` that starts one store and does not say why.
#[derive(Debug, PartialEq)]
struct Unjustified {
    file: String,
    function: String,
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("read {}: {error}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            found.push(path);
        }
    }
}

/// The name of the function a line declares, if it declares one.
fn declared_function(line: &str) -> Option<&str> {
    let mut words = line.trim_start().split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "pub" | "pub(crate)" | "pub(super)" | "async" | "unsafe" => continue,
            "fn" => {
                let name = words.next()?;
                return name.split(['(', '<']).next().filter(|name| !name.is_empty());
            }
            _ => return None,
        }
    }
    None
}

/// The functions of one file that name one store only and carry no reason, found in
/// rustfmt-formatted source: a function's body ends at the first later line that is its
/// declaration's indentation followed by `}`.
fn unjustified_in(file: &str, source: &str) -> Vec<Unjustified> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = declared_function(line) else { continue };
        if line.trim_end().ends_with(';') {
            continue; // a declaration without a body
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let closing = format!("{indent}}}");
        let end = lines[start + 1..]
            .iter()
            .position(|later| *later == closing)
            .map_or(lines.len(), |offset| start + 1 + offset);
        let body = &lines[start..end];
        if line.contains(": Backend") {
            continue; // it takes the store as an argument
        }
        let names_sqlite = body.iter().any(|line| line.contains("Backend::Sqlite"));
        let names_postgres = body.iter().any(|line| line.contains("Backend::Postgres"));
        if names_sqlite == names_postgres {
            continue;
        }
        let (one, other) = if names_sqlite {
            ("Backend::Sqlite", "Backend::Postgres")
        } else {
            ("Backend::Postgres", "Backend::Sqlite")
        };
        if is_one_of_a_pair(source, body, one, other) {
            continue;
        }
        // The reason may also stand in the comments and attributes right above the function.
        let above = lines[..start].iter().rev().take_while(|line| {
            let line = line.trim_start();
            line.starts_with("//") || line.starts_with("#[")
        });
        let justified = body.iter().chain(above).any(|line| line.trim_start().starts_with(MARKER));
        if !justified {
            found.push(Unjustified { file: file.to_owned(), function: name.to_owned() });
        }
    }
    found
}

/// The function a line calls with `store`: the name right before the last `(` ahead of it.
fn callee_of<'a>(line: &'a str, store: &str) -> Option<&'a str> {
    let before = &line[..line.find(store)?];
    let open = before.rfind('(')?;
    let name_start =
        before[..open].rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$')).map_or(0, |at| at + 1);
    Some(&before[name_start..open]).filter(|name| !name.is_empty())
}

/// A short entry point whose store is its twin's other: every function it calls with `one` is
/// defined in the file (or is the macro's `$name`), and the file also calls it with `other`.
fn is_one_of_a_pair(source: &str, body: &[&str], one: &str, other: &str) -> bool {
    if body.len() > 5 {
        return false;
    }
    let callees: Vec<&str> = body.iter().filter_map(|line| callee_of(line, one)).collect();
    !callees.is_empty()
        && callees.iter().all(|callee| {
            let defined = callee.starts_with('$') || source.contains(&format!("fn {callee}("));
            let twin = source.lines().any(|line| callee_of(line, other) == Some(callee));
            defined && twin
        })
}

#[test]
fn every_one_store_scenario_says_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("tests/api"), &mut files);
    files.sort();
    assert!(files.len() > 40, "the API suite was found ({} files)", files.len());
    let mut unjustified = Vec::new();
    for path in &files {
        let source = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
        let file = path.strip_prefix(root).unwrap_or(path).display().to_string();
        unjustified.extend(unjustified_in(&file, &source));
    }
    let listed: Vec<String> = unjustified.iter().map(|site| format!("{}: {}", site.file, site.function)).collect();
    assert!(
        listed.is_empty(),
        "{} scenarios run on one store without a `{MARKER}` reason (move them onto both stores, \
         or say why one is enough):\n{}",
        listed.len(),
        listed.join("\n")
    );
}

/// The check itself fails on a planted one-store test, passes once it says why, and leaves a
/// two-store loop and a test that takes its store as an argument alone.
#[test]
fn a_planted_one_store_test_is_found() {
    let planted = "#[tokio::test]\nasync fn planted() {\n    let db = TestDatabase::new(Backend::Sqlite).await;\n}\n";
    assert_eq!(
        unjustified_in("planted.rs", planted),
        vec![Unjustified { file: "planted.rs".into(), function: "planted".into() }]
    );
    let reasoned = "#[tokio::test]\n// One store: the header is read before the store.\nasync fn planted() {\n    let db = TestDatabase::new(Backend::Sqlite).await;\n}\n";
    assert!(unjustified_in("planted.rs", reasoned).is_empty());
    let inside = "#[tokio::test]\nasync fn planted() {\n    // One store: a configuration check.\n    let db = TestDatabase::new(Backend::Sqlite).await;\n}\n";
    assert!(unjustified_in("planted.rs", inside).is_empty());
    let both = "async fn planted() {\n    for backend in [Backend::Sqlite, Backend::Postgres] {\n    }\n}\n";
    assert!(unjustified_in("planted.rs", both).is_empty());
    let argument = "async fn planted(backend: Backend) {\n    let db = TestDatabase::new(backend).await;\n}\n";
    assert!(unjustified_in("planted.rs", argument).is_empty());
    let twins = "async fn body(backend: Backend) {\n}\n#[tokio::test]\nasync fn sqlite() {\n    body(Backend::Sqlite).await\n}\n#[tokio::test]\nasync fn postgres() {\n    body(Backend::Postgres).await\n}\n";
    assert!(unjustified_in("planted.rs", twins).is_empty());
    let lone = "async fn body(backend: Backend) {\n}\n#[tokio::test]\nasync fn sqlite() {\n    body(Backend::Sqlite).await\n}\n";
    assert_eq!(unjustified_in("planted.rs", lone).len(), 1, "an entry point without its twin");
    let nested = "mod inner {\n    #[tokio::test]\n    async fn planted() {\n        let db = TestDatabase::new(Backend::Postgres).await;\n    }\n}\n";
    assert_eq!(unjustified_in("planted.rs", nested).len(), 1);
}
