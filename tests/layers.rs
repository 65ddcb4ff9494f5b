//! The modules stay layered: a module imports only modules below it, so no import runs in a
//! circle. Every `crate::…` path in a file under `src/<module>` (or in `src/<module>.rs`) must
//! name that module itself or one it may import, as listed in [`LAYERS`].
//!
//! Inside a layer the files stay layered too: the paths a file names (`super::…`, `self::…`,
//! `crate::<its layer>::…`, and a `use` of its own child module) are resolved to the files
//! they lead to, and those edges must not run in a circle (two files that call each other are
//! one idea split in two, or want a third file below both). A folder's `mod.rs` is a file like
//! any other: what it imports or re-exports from inside its folder is an edge too, so a
//! re-export cannot hide an import that runs back up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the library, the modules it stands on (it may import them and all
/// they may import, see [`allowed_imports`]), and the modules it may import besides (those
/// alone). The layering is `protocol`, `ids` → `config` → `store` → `bus` → `caller` → `auth` →
/// `engine` → `agents` → `http` → `server`. `metrics`, `redact`, `clock` and `retry` sit at the
/// bottom, and `tls` (the outbound TLS configuration) and `telemetry` (which exports traces
/// through it) just above `config`: anyone above them may use them. `admin` (the operator
/// commands) sits beside `http`. `main.rs` is its own crate and uses the library from outside.
///
/// Two edges the order would allow are kept out on purpose: `store` takes its settings as
/// arguments and never reads `config` (so it uses `telemetry` without standing on it), and
/// `engine` sees who is calling through `caller` alone, never through `auth` (how a caller was
/// authenticated is not the engine's business).
const LAYERS: &[(&str, &[&str], &[&str])] = &[
    ("metrics", &[], &[]),
    ("redact", &[], &[]),
    ("clock", &[], &[]),
    ("retry", &[], &[]),
    ("protocol", &[], &[]),
    ("ids", &[], &[]),
    ("config", &[], &["protocol", "ids", "redact", "metrics"]),
    ("tls", &["config"], &[]),
    ("telemetry", &["tls"], &[]),
    ("store", &[], &["protocol", "ids", "redact", "metrics", "telemetry"]),
    ("bus", &["store", "telemetry"], &[]),
    ("caller", &["store", "telemetry"], &["clock"]),
    ("auth", &["caller"], &[]),
    ("engine", &["caller", "bus"], &["retry"]),
    ("agents", &["engine", "auth"], &[]),
    ("http", &["agents"], &[]),
    ("admin", &["agents"], &[]),
    ("server", &["http", "admin"], &[]),
];

/// The modules `module` may import, resolved from [`LAYERS`]; `None` for a module not listed.
fn allowed_imports(module: &str) -> Option<BTreeSet<&'static str>> {
    let (_, stands_on, besides) = LAYERS.iter().find(|(name, _, _)| *name == module)?;
    let mut allowed: BTreeSet<&'static str> = besides.iter().copied().collect();
    for below in *stands_on {
        allowed.insert(below);
        allowed.extend(allowed_imports(below).unwrap_or_else(|| panic!("{module} stands on {below}, not in LAYERS")));
    }
    Some(allowed)
}

#[test]
fn the_layering_keeps_out_the_two_edges_it_names() {
    let allowed = |module| allowed_imports(module).expect("a layer");
    assert!(allowed("store").contains("telemetry") && !allowed("store").contains("config"));
    assert!(allowed("engine").contains("caller") && !allowed("engine").contains("auth"));
    assert!(allowed("agents").contains("auth") && allowed("agents").contains("config"));
    assert!(!allowed("caller").contains("bus") && !allowed("http").contains("admin"));
    let everything_but_server: BTreeSet<&str> =
        LAYERS.iter().map(|(name, _, _)| *name).filter(|name| *name != "server").collect();
    assert_eq!(allowed("server"), everything_but_server);
}

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
        let Some(allowed) = allowed_imports(&module) else {
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
                if imported != module && !allowed.contains(imported.as_str()) {
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

/// A file's module path under `src/`: `engine/request/plan.rs` is `engine::request::plan`, a
/// folder's `mod.rs` is the folder itself.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> =
        relative.components().map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The paths of a use tree that begins at `text` (just after a `::`), each as its segments:
/// `a::{b, c::{d, self}}` is `a::b`, `a::c::d` and `a::c::self`. Returns how much it read.
fn use_tree(text: &str) -> (Vec<Vec<String>>, usize) {
    let ident_len =
        |rest: &str| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '*').count();
    let skip_space = |at: usize| at + text[at..].chars().take_while(|c| c.is_whitespace()).count();
    let mut segments = Vec::new();
    let mut at = 0;
    loop {
        at = skip_space(at);
        if text[at..].starts_with('{') {
            at += 1;
            let mut paths = Vec::new();
            loop {
                at = skip_space(at);
                match text[at..].chars().next() {
                    None => return (paths, at),
                    Some('}') => return (paths, at + 1),
                    Some(',') => at += 1,
                    Some(other) => {
                        let (inner, used) = use_tree(&text[at..]);
                        if used == 0 {
                            at += other.len_utf8();
                            continue;
                        }
                        paths.extend(inner.into_iter().map(|tail| [segments.clone(), tail].concat()));
                        at += used;
                    }
                }
            }
        }
        let len = ident_len(&text[at..]);
        if len == 0 {
            return (if segments.is_empty() { Vec::new() } else { vec![segments] }, at);
        }
        segments.push(text[at..at + len].to_string());
        at += len;
        if text[at..].starts_with("::") {
            at += 2;
        } else {
            return (vec![segments], at);
        }
    }
}

/// The module paths a file's code names through `crate::`, `super::` and `self::`, made
/// absolute from the file's own module path. Comment lines are skipped, and an inline test
/// module at the end (whose `super` is the file itself) is not read.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let opens_module = |next: &&str| next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{');
        if trimmed == "#[cfg(test)]" && lines.peek().is_some_and(opens_module) {
            break;
        }
        if !trimmed.starts_with("//") {
            code.push_str(line);
            code.push('\n');
        }
    }
    let mut found = Vec::new();
    // A module declared in this file (`mod child;`) is named by its bare name too, in a `use`
    // or in code (`child::f()`, 2018 paths).
    let children: Vec<&str> = code
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line =
                ["pub mod ", "pub(crate) mod ", "pub(super) mod ", "mod "].iter().find_map(|p| line.strip_prefix(p))?;
            line.strip_suffix(';')
        })
        .collect();
    for child in &children {
        let named = format!("{child}::");
        let mut from = 0;
        while let Some(at) = code[from..].find(&named) {
            let start = from + at;
            from = start + named.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let (paths, _) = use_tree(&code[start..]);
            found.extend(paths.into_iter().map(|path| [module.to_vec(), path].concat()));
        }
    }
    // `use child::…` names a module declared in this file; what is not one (an outside
    // crate's name) resolves to no file of the layer and is dropped by the caller.
    for line in code.lines() {
        let trimmed = line.trim_start();
        let after_use = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|prefix| trimmed.strip_prefix(prefix));
        let Some(rest) = after_use else { continue };
        if ["crate::", "super::", "self::", "::", "std::", "core::", "alloc::"].iter().any(|p| rest.starts_with(p)) {
            continue;
        }
        let (paths, _) = use_tree(rest);
        found.extend(paths.into_iter().map(|path| [module.to_vec(), path].concat()));
    }
    for (keyword, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
        ("self::", module.to_vec()),
    ] {
        let mut from = 0;
        while let Some(at) = code[from..].find(keyword) {
            let start = from + at;
            from = start + keyword.len();
            let before = code[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // `pub(in crate::a::b)` says who may see an item; it imports nothing.
            if code[..start].ends_with("(in ") {
                continue;
            }
            let (paths, _) = use_tree(&code[from..]);
            for path in paths {
                let mut resolved = base.clone();
                for segment in path {
                    match segment.as_str() {
                        "super" => {
                            resolved.pop();
                        }
                        "self" => {}
                        _ => resolved.push(segment),
                    }
                }
                found.push(resolved);
            }
        }
    }
    found
}

/// The first circle in `edges` (each file's module path and the files it names), as the files
/// it runs through, first one repeated at the end.
fn find_circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    fn visit(
        node: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        done: &mut BTreeSet<Vec<String>>,
        trail: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        if let Some(at) = trail.iter().position(|n| n == node) {
            return Some([&trail[at..], std::slice::from_ref(node)].concat());
        }
        if done.contains(node) {
            return None;
        }
        trail.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, done, trail) {
                return Some(circle);
            }
        }
        trail.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

/// The edges between the files of each layer: file → the files its paths lead to (the longest
/// module path of a file that a named path begins with). A `mod.rs` counts like any file: its
/// `mod x;` lines are no paths, but what it imports or re-exports is an edge.
fn layer_edges(src: &Path) -> BTreeMap<String, BTreeMap<Vec<String>, BTreeSet<Vec<String>>>> {
    let mut files = Vec::new();
    source_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|file| {
            let relative = file.strip_prefix(src).expect("under src");
            (
                module_path(relative),
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display())),
            )
        })
        .collect();
    let mut layers: BTreeMap<String, BTreeMap<Vec<String>, BTreeSet<Vec<String>>>> = BTreeMap::new();
    for (module, text) in &modules {
        let Some(layer) = module.first() else { continue };
        let edges = layers.entry(layer.clone()).or_default().entry(module.clone()).or_default();
        for path in named_paths(text, module) {
            if path.first() != Some(layer) {
                continue;
            }
            let Some(target) =
                (1..=path.len()).rev().map(|len| &path[..len]).find(|prefix| modules.contains_key(*prefix))
            else {
                continue;
            };
            if target != module.as_slice() {
                edges.insert(target.to_vec());
            }
        }
    }
    layers
}

/// The groups of files that still reach each other, each through a `mod.rs` that both defines
/// what its folder's files use and imports from them (the façade and the shared types in one
/// file). Counting what a `mod.rs` imports made them visible; each is to be taken apart by
/// moving the shared types into a file of their own below both, and this list only shrinks:
/// the test fails on a new group, on a group that grew, and on a group that is gone but still
/// listed. None is left: the engine's was taken apart (its shape in `engine/shape.rs`,
/// `errors.rs`, `plans.rs` and `limits.rs`, below the rooms).
const KNOWN_TANGLES: &[&str] = &[];

/// The groups of two or more files of one layer that reach each other (the strongly connected
/// parts of the layer's edges), each as its files' module paths, sorted, joined by `, `.
fn tangles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let reach = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = edges.keys().map(|node| (node, reach(node))).collect();
    let mut placed = BTreeSet::new();
    let mut groups = Vec::new();
    for (node, from_node) in &reached {
        if placed.contains(*node) || !from_node.contains(*node) {
            continue;
        }
        let group: BTreeSet<&Vec<String>> =
            from_node.iter().filter(|other| reached.get(other).is_some_and(|back| back.contains(*node))).collect();
        placed.extend(group.iter().map(|member| (*member).clone()));
        groups.push(group.iter().map(|member| member.join("::")).collect::<Vec<_>>().join(", "));
    }
    groups
}

#[test]
fn the_files_of_a_layer_import_each_other_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found: BTreeSet<String> = layer_edges(&src).values().flat_map(tangles).collect();
    let known: BTreeSet<String> =
        KNOWN_TANGLES.iter().map(|group| group.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(new.is_empty(), "files of a layer importing each other in a circle:\n{new:#?}");
    assert!(gone.is_empty(), "listed in KNOWN_TANGLES but no longer tangled; take them off the list:\n{gone:#?}");
}

#[test]
fn paths_resolve_from_the_file_that_names_them() {
    let plan = ["engine", "request", "plan"].map(String::from);
    let named = named_paths(
        "use super::follow::{refuse, viewer_of};\nuse super::super::{board, Engine};\n// use super::decide;\n\
         use crate::engine::log::{self, LogWriter};\nlet x = self::inner::f();\n\
         pub(in crate::engine::request) struct Seen;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        &plan,
    );
    let expected: Vec<Vec<String>> = [
        "engine::log::self",
        "engine::log::LogWriter",
        "engine::request::follow::refuse",
        "engine::request::follow::viewer_of",
        "engine::board",
        "engine::Engine",
        "engine::request::plan::inner::f",
    ]
    .iter()
    .map(|path| path.split("::").filter(|s| *s != "self").map(String::from).collect())
    .collect();
    assert_eq!(named, expected);
    assert_eq!(module_path(Path::new("engine/request/mod.rs")), ["engine", "request"]);
    assert_eq!(module_path(Path::new("engine/request/plan.rs")), ["engine", "request", "plan"]);
}

#[test]
fn a_circle_between_two_files_is_found() {
    let module = |path: &str| path.split("::").map(String::from).collect::<Vec<_>>();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    edges.entry(module("engine::request::plan")).or_default().insert(module("engine::request::decide"));
    edges.entry(module("engine::request::decide")).or_default().insert(module("engine::request::follow"));
    assert_eq!(find_circle(&edges), None);
    edges.entry(module("engine::request::decide")).or_default().insert(module("engine::request::plan"));
    let circle = find_circle(&edges).expect("a circle");
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 3);
}

/// A planted tree in which a re-export in `engine/mod.rs` hides an import that runs back up:
/// `log/events.rs` names `crate::engine::interrupts`, which is `request/interrupts.rs`, and that
/// file names `log/events.rs`. Counting what a `mod.rs` imports finds the circle.
#[test]
fn a_circle_through_a_re_export_in_a_mod_rs_is_found() {
    let root = std::env::temp_dir().join(format!("layers-planted-{}", std::process::id()));
    let files = [
        ("engine/mod.rs", "pub mod log;\npub mod request;\npub use request::interrupts;\n"),
        ("engine/log/mod.rs", "pub mod events;\n"),
        ("engine/log/events.rs", "use crate::engine::interrupts::Waiting;\npub struct Event;\n"),
        ("engine/request/mod.rs", "pub mod interrupts;\n"),
        ("engine/request/interrupts.rs", "use crate::engine::log::events::Event;\npub struct Waiting;\n"),
    ];
    for (path, text) in files {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("planted folder");
        std::fs::write(&file, text).expect("planted file");
    }
    let layers = layer_edges(&root);
    std::fs::remove_dir_all(&root).expect("planted tree removed");
    let circle = find_circle(&layers["engine"]).expect("the circle through the re-export");
    let names: Vec<String> = circle.iter().map(|module| module.join("::")).collect();
    assert!(names.contains(&"engine".to_string()), "{names:?}");
    assert!(names.contains(&"engine::log::events".to_string()), "{names:?}");
    assert!(names.contains(&"engine::request::interrupts".to_string()), "{names:?}");
}
