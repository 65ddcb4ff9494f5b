//! The modules stay layered: a module imports only modules below it, so no import runs in a
//! circle. Every `crate::…` path in a file under `src/<module>` (or in `src/<module>.rs`) must
//! name that module itself or one it may import, as listed in [`ALLOWED`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of the library and the modules it may import: the ones below it in
/// the layering `protocol`, `ids` → `config` → `store` → `caller` → `auth` → `engine` →
/// `agents` → `http` → `server`. `metrics`, `redact`, `clock` and `retry` sit at the bottom, and `tls` (the outbound
/// TLS configuration) and `telemetry` (which exports traces through it) just above `config`: anyone above them may use them. `admin` (the operator commands) sits beside
/// `http`. `main.rs` is its own crate and uses the library from outside.
///
/// Two edges the order would allow are kept out on purpose: `store` takes its settings as
/// arguments and never reads `config`, and `engine` sees who is calling through `caller` alone,
/// never through `auth` (how a caller was authenticated is not the engine's business).
const ALLOWED: &[(&str, &[&str])] = &[
    ("metrics", &[]),
    ("redact", &[]),
    ("clock", &[]),
    ("retry", &[]),
    ("protocol", &[]),
    ("ids", &[]),
    ("config", &["protocol", "ids", "redact", "metrics"]),
    ("telemetry", &["config", "tls", "protocol", "ids", "redact", "metrics"]),
    ("tls", &["config", "protocol", "ids", "redact", "metrics"]),
    ("store", &["protocol", "ids", "redact", "metrics", "telemetry"]),
    ("caller", &["store", "config", "protocol", "ids", "redact", "metrics", "telemetry", "tls", "clock"]),
    ("auth", &["caller", "store", "config", "protocol", "ids", "redact", "metrics", "telemetry", "tls", "clock"]),
    (
        "engine",
        &["caller", "store", "config", "protocol", "ids", "redact", "metrics", "telemetry", "tls", "clock", "retry"],
    ),
    (
        "agents",
        &[
            "engine",
            "auth",
            "caller",
            "store",
            "config",
            "protocol",
            "ids",
            "redact",
            "metrics",
            "telemetry",
            "tls",
            "clock",
            "retry",
        ],
    ),
    (
        "http",
        &[
            "agents",
            "engine",
            "auth",
            "caller",
            "store",
            "config",
            "protocol",
            "ids",
            "redact",
            "metrics",
            "telemetry",
            "clock",
            "tls",
            "retry",
        ],
    ),
    (
        "admin",
        &[
            "agents",
            "engine",
            "auth",
            "caller",
            "store",
            "config",
            "protocol",
            "ids",
            "redact",
            "metrics",
            "telemetry",
            "clock",
            "tls",
            "retry",
        ],
    ),
    (
        "server",
        &[
            "http",
            "admin",
            "agents",
            "engine",
            "auth",
            "caller",
            "store",
            "config",
            "protocol",
            "ids",
            "redact",
            "metrics",
            "telemetry",
            "clock",
            "tls",
            "retry",
        ],
    ),
];

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a line names through `crate::` (or `$crate::` in a macro), including
/// each one of a grouped `crate::{a, b::c}` import.
fn crate_modules(line: &str) -> Vec<String> {
    fn ident(text: &str) -> String {
        text.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    }
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        match after.strip_prefix('{') {
            Some(group) => {
                // Top-level names of the group: those after `{` or a `,` at depth 0.
                let mut depth = 0;
                let mut start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if c.is_whitespace() => {}
                        _ if start => {
                            found.push(ident(&group[i..]));
                            start = false;
                        }
                        _ => {}
                    }
                }
            }
            None => found.push(ident(after)),
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    let mut violations = BTreeSet::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative.components().next().expect("a path").as_os_str().to_string_lossy().to_string();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if module == "main" || module == "lib" {
            continue;
        }
        let Some((_, allowed)) = ALLOWED.iter().find(|(name, _)| *name == module) else {
            unplaced.insert(module);
            continue;
        };
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for imported in crate_modules(line) {
                if imported != module && !allowed.contains(&imported.as_str()) {
                    violations.insert(format!(
                        "src/{}:{}: {module} imports {imported}",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(unplaced.is_empty(), "modules missing from the layering in tests/layers.rs: {unplaced:?}");
    assert!(
        violations.is_empty(),
        "imports against the layering:\n{}",
        violations.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn crate_paths_are_read_from_plain_and_grouped_imports() {
    assert_eq!(crate_modules("use crate::engine::turn::TurnContext;"), ["engine"]);
    assert_eq!(crate_modules("use crate::{config::Config, store::{self, Store}};"), ["config", "store"]);
    assert_eq!(crate_modules("let x = crate::ids::new_turn_id(); crate::protocol::now_ms()"), ["ids", "protocol"]);
    assert_eq!(crate_modules("impl $crate::store::Store for $store {"), ["store"]);
    assert!(crate_modules("use agui_gateway::config; // notcrate::x").is_empty());
}
