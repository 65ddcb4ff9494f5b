//! The documentation cannot drift from the code: every scalar setting of the default
//! configuration (`config/gateway.toml`, which is embedded in the binary) is listed in
//! `docs/config.md` with its environment name and its default value; every `AGUI_GATEWAY_*` name
//! the reference mentions names a real setting (a scalar, a list or an entry of one); and every example configuration (under `examples/`,
//! and the TOML blocks of the reference) loads exactly as `agui-gateway serve --config` would
//! load it. The README's interrupt example is run as written against the binary started with
//! no config, so its commands and output cannot drift either.

use std::path::{Path, PathBuf};

use agui_gateway::config::{Config, DEFAULT_CONFIG_TOML, ENV_PREFIX};

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_file(relative)).unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

/// One scalar setting of the default configuration.
#[derive(Debug)]
struct Setting {
    /// Dotted path, e.g. `limits.max_body_bytes`.
    path: String,
    /// `AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES`.
    env: String,
    /// The default as TOML writes it, e.g. `4194304` or `"127.0.0.1:8080"`.
    default: String,
    /// The default as an environment variable would carry it (strings without quotes).
    raw: String,
}

/// Walks the parsed default file; arrays (`[[tenants]]`, `[[agents]]`) are lists, not
/// settings, and have no environment override.
fn scalar_settings() -> Vec<Setting> {
    fn walk(table: &toml::Table, prefix: &[&str], out: &mut Vec<Setting>) {
        for (key, value) in table {
            let mut path = prefix.to_vec();
            path.push(key);
            match value {
                toml::Value::Table(inner) => walk(inner, &path, out),
                toml::Value::Array(_) => {}
                scalar => out.push(Setting {
                    path: path.join("."),
                    env: format!("{ENV_PREFIX}{}", path.join("_").to_ascii_uppercase()),
                    default: scalar.to_string(),
                    raw: match scalar {
                        toml::Value::String(text) => text.clone(),
                        other => other.to_string(),
                    },
                }),
            }
        }
    }
    let table: toml::Table = DEFAULT_CONFIG_TOML.parse().expect("config/gateway.toml is valid TOML");
    let mut settings = Vec::new();
    walk(&table, &[], &mut settings);
    settings
}

/// The `AGUI_GATEWAY_*` names a text mentions (the bare prefix excluded).
fn env_names_in(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(ENV_PREFIX) {
        let tail = &rest[start..];
        let end =
            tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        if name.len() > ENV_PREFIX.len() {
            names.push(name.to_string());
        }
        rest = &tail[end.max(1)..];
    }
    names
}

#[test]
fn the_default_config_has_settings_to_document() {
    let settings = scalar_settings();
    assert!(
        settings.iter().any(|s| s.path == "listen") && settings.iter().any(|s| s.path == "database.url"),
        "the walk found {settings:?}"
    );
}

#[test]
fn every_setting_is_documented_with_its_env_name_and_default() {
    let reference = read("docs/config.md");
    let mut missing = Vec::new();
    for setting in scalar_settings() {
        let env = format!("`{}`", setting.env);
        let path = format!("`{}`", setting.path);
        let default = format!("`{}`", setting.default);
        // The reference table gives each setting one row: | path | env name | default | meaning |
        let row = reference.lines().find_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (line.trim_start().starts_with('|') && cells.len() >= 5 && cells[2] == env).then_some(cells)
        });
        match row {
            None => missing.push(format!("{}: no table row names {env} in its second column", setting.path)),
            Some(cells) => {
                if cells[1] != path {
                    missing.push(format!("{}: its row names {} instead of {path}", setting.path, cells[1]));
                }
                if cells[3] != default {
                    missing
                        .push(format!("{}: its row gives the default {} instead of {default}", setting.path, cells[3]));
                }
            }
        }
    }
    assert!(missing.is_empty(), "docs/config.md is out of date with config/gateway.toml:\n  {}", missing.join("\n  "));
}

#[test]
fn every_documented_env_name_is_a_real_setting() {
    let settings = scalar_settings();
    for doc in ["docs/config.md", "docs/api.md"] {
        let text = read(doc);
        for name in env_names_in(&text) {
            // A list, a table or an entry of a list (`AGUI_GATEWAY_TENANTS_0_CORS_ORIGINS`) is
            // no row of the scalar table: the loader itself says whether it names a setting.
            let named = settings.iter().any(|s| s.env == name)
                || match Config::load(None, [(name.clone(), "[]".to_string())]) {
                    Ok(_) => true,
                    Err(error) => !error.to_string().contains("no such setting"),
                };
            assert!(named, "{doc} mentions {name}, which is no setting of config/gateway.toml");
        }
    }
}

#[test]
fn every_documented_env_name_overrides_its_setting() {
    for setting in scalar_settings() {
        let loaded = Config::load(None, [(setting.env.clone(), setting.raw.clone())]);
        assert!(loaded.is_ok(), "{} = {:?} is refused: {:?}", setting.env, setting.raw, loaded.err());
    }
}

#[test]
fn the_postgres_example_loads() {
    let path = repo_file("examples/postgres.toml");
    let config = Config::load(Some(&path), std::iter::empty())
        .unwrap_or_else(|error| panic!("examples/postgres.toml does not load: {error}"));
    assert!(config.database.url.starts_with("postgres://"), "{}", config.database.url);
    assert_eq!(config.agents.len(), 2, "{config:?}");
}

#[test]
fn every_example_config_loads() {
    let mut seen = 0;
    let folders = ["examples", "config"].map(|folder| std::fs::read_dir(repo_file(folder)).expect("folder exists"));
    for entry in folders.into_iter().flatten() {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(error) = Config::load(Some(&path), std::iter::empty()) {
                panic!("{} does not load: {error}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen > 3, "the example configurations under examples/ and config/ were not found");
}

#[test]
fn every_toml_example_in_the_reference_loads() {
    let reference = read("docs/config.md");
    let blocks: Vec<&str> =
        reference.split("```toml\n").skip(1).map(|rest| rest.split("```").next().unwrap_or("")).collect();
    assert!(!blocks.is_empty(), "docs/config.md has no ```toml example");
    for block in blocks {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut file, block.as_bytes()).expect("write");
        if let Err(error) = Config::load(Some(file.path()), std::iter::empty()) {
            panic!("an example of docs/config.md does not load: {error}\n{block}");
        }
    }
}

/// The gateway binary with no config at all, as the README starts it, on a fresh SQLite file;
/// stopped on drop.
struct DefaultGateway {
    child: std::process::Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl DefaultGateway {
    fn start() -> DefaultGateway {
        use std::io::{BufRead, BufReader};
        let dir = tempfile::tempdir().expect("a temporary folder");
        let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .args(["serve", "--listen", "127.0.0.1:0", "--database", &database])
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the gateway starts");
        let stderr = child.stderr.take().expect("stderr");
        let (ready, address) = std::sync::mpsc::channel();
        // Drained to the end, so the gateway never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut ready = Some(ready);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("agui-gateway listening") {
                    let found = line.split_whitespace().find_map(|w| w.strip_prefix("address=")).map(str::to_string);
                    if let (Some(ready), Some(found)) = (ready.take(), found) {
                        let _ = ready.send(found);
                    }
                }
            }
        });
        let address = address.recv_timeout(std::time::Duration::from_secs(30)).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the gateway did not start without a config")
        });
        DefaultGateway { child, address, _dir: dir }
    }
}

impl Drop for DefaultGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// docs/api.md's `GET /v1/agents` says what the binary reports: its table names every key of
/// an agent's capabilities, and its example's members are the demo agent's, value for value
/// (`"…"` stands for what the example leaves out).
#[test]
fn the_capabilities_api_md_shows_are_what_the_binary_reports() {
    let api = read("docs/api.md");
    let section = api.split("## `GET /v1/agents`").nth(1).expect("the section").split("\n## ").next().unwrap_or("");
    let example = section.split("```json\n").nth(1).and_then(|b| b.split("\n```").next()).expect("the example");
    let example: serde_json::Value = serde_json::from_str(example).expect("the example is JSON");
    let gateway = DefaultGateway::start();
    let output = std::process::Command::new("curl")
        .args(["-sS", &format!("http://{}/v1/agents", gateway.address)])
        .output()
        .expect("curl runs (it must be installed)");
    let reported: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let demo = reported["agents"].as_array().expect("agents").iter().find(|a| a["name"] == "demo").expect("demo");
    fn same(shown: &serde_json::Value, real: &serde_json::Value, path: &str) {
        match shown {
            serde_json::Value::Object(members) => {
                for (key, value) in members.iter().filter(|(key, _)| key.as_str() != "…") {
                    same(value, &real[key.as_str()], &format!("{path}.{key}"));
                }
            }
            serde_json::Value::String(text) if text.ends_with('…') => {
                let real = real.as_str().unwrap_or_else(|| panic!("{path}: the binary reports {real}"));
                assert!(real.starts_with(text.trim_end_matches('…')), "{path}: shown {text}, reported {real}");
            }
            _ => assert_eq!(shown, real, "{path}: docs/api.md shows {shown}, the binary reports {real}"),
        }
    }
    same(&example["agents"][0], demo, "agents[0]");
    let rows: Vec<&str> = section.lines().filter_map(|line| line.strip_prefix("| `")?.split('`').next()).collect();
    for (key, value) in demo["capabilities"].as_object().expect("capabilities") {
        let named = rows.iter().any(|row| row == key || row.starts_with(&format!("{key}.")));
        assert!(named, "capabilities.{key} ({value}) is in no row of docs/api.md's table: {rows:?}");
        if let serde_json::Value::Object(members) = value {
            for member in members.keys() {
                let said =
                    section.contains(&format!("`{member}`")) || rows.contains(&format!("{key}.{member}").as_str());
                assert!(said, "capabilities.{key}.{member} is not named in docs/api.md's table");
            }
        }
    }
}

/// One `$ command` of a README console block (continuation lines joined) and the output shown
/// under it.
#[derive(Debug)]
struct ShownCommand {
    command: String,
    output: Vec<String>,
}

/// The console block that follows `marker` in the README.
fn console_after(readme: &str, marker: &str) -> Vec<ShownCommand> {
    let from = readme.find(marker).unwrap_or_else(|| panic!("the README has no '{marker}'"));
    let block = readme[from..].split("```console\n").nth(1).expect("a console block").split("\n```").next();
    let mut commands: Vec<ShownCommand> = Vec::new();
    let mut continued = false;
    for line in block.unwrap_or_default().lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            commands.push(ShownCommand { command: command.to_string(), output: Vec::new() });
            continued = command.ends_with('\\');
        } else if let Some(last) = commands.last_mut() {
            if continued {
                last.command.push('\n');
                last.command.push_str(line);
                continued = line.ends_with('\\');
            } else if line.starts_with("data: ") {
                last.output.push(line.to_string());
            }
        }
    }
    commands
}

/// Words of `length` characters from `alphabet` after `prefix`, in order of appearance.
fn ids_in(text: &str, prefix: &str, length: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let candidate = &rest[at + prefix.len()..];
        let word: String = candidate.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        if word.len() == length {
            let id = format!("{prefix}{word}");
            if !found.contains(&id) {
                found.push(id);
            }
        }
        rest = &rest[at + prefix.len()..];
    }
    found
}

/// An event line with what differs from run to run (ids, times) made the same.
fn normalized(line: &str) -> String {
    let mut line = line.to_string();
    for id in ids_in(&line, "int_", 32) {
        line = line.replace(&id, "int_…");
    }
    for turn in ids_in(&line, "\"t", 24).into_iter().chain(ids_in(&line, "\"gateway/turn\":\"t", 24)) {
        let bare = turn.trim_start_matches('"').trim_start_matches("gateway/turn\":\"");
        line = line.replace(bare, "t…");
    }
    let mut value: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("data: ")).unwrap_or_else(|e| panic!("{line}: {e}"));
    value["timestamp"] = serde_json::Value::Null;
    if let Some(interrupts) = value.pointer_mut("/outcome/interrupts").and_then(|i| i.as_array_mut()) {
        for interrupt in interrupts {
            interrupt["expiresAt"] = serde_json::Value::Null;
        }
    }
    value.to_string()
}

/// The README's "A person decides" commands, run as written against the binary started with
/// no config (only the address and each interrupt's id put in): each run ends as the README
/// shows, and every event the README shows is what the gateway sends, in that order.
#[test]
fn the_readmes_interrupt_example_runs_against_the_default_config() {
    let readme = read("README.md");
    let shown = console_after(&readme, "**A person decides.**");
    assert_eq!(shown.len(), 3, "a run and two resumes: {shown:?}");
    let gateway = DefaultGateway::start();
    let base = format!("http://{}", gateway.address);
    let curl = |command: &str| -> String {
        let output =
            std::process::Command::new("sh").arg("-c").arg(command).output().expect("curl runs (it must be installed)");
        assert!(output.status.success(), "{command}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let agents = curl(&format!("curl -sS {base}/v1/agents"));
    let agents: serde_json::Value = serde_json::from_str(&agents).expect("JSON");
    let names: Vec<&str> =
        agents["agents"].as_array().expect("agents").iter().filter_map(|a| a["name"].as_str()).collect();
    assert!(names.contains(&"demo") && names.contains(&"approvals"), "{names:?}");

    // The README's interrupt ids, and the ones this gateway gives, in the order they appear.
    let mut readme_ids: Vec<String> = Vec::new();
    let mut real_ids: Vec<String> = Vec::new();
    let mut endings = Vec::new();
    for step in &shown {
        let mut command = step.command.replace("http://127.0.0.1:8080", &base);
        for (theirs, ours) in readme_ids.iter().zip(&real_ids) {
            command = command.replace(theirs, ours);
        }
        let got = curl(&command);
        let events: Vec<String> = got.lines().filter(|l| l.starts_with("data: ")).map(normalized).collect();
        let mut remaining = events.iter();
        for line in &step.output {
            let want = normalized(line);
            assert!(
                remaining.any(|e| *e == want),
                "the README shows {want}\nwhich the gateway did not send in order: {events:#?}"
            );
        }
        assert_eq!(step.output.last().map(|l| normalized(l)), events.last().cloned(), "the run ends as shown");
        readme_ids.extend(
            step.output
                .iter()
                .flat_map(|l| ids_in(l, "int_", 32))
                .filter(|id| !readme_ids.contains(id))
                .collect::<Vec<_>>(),
        );
        real_ids.extend(ids_in(&got, "int_", 32).into_iter().filter(|id| !real_ids.contains(id)).collect::<Vec<_>>());
        let last: serde_json::Value = serde_json::from_str(events.last().expect("an event")).expect("JSON");
        endings.push((
            last["type"].as_str().unwrap_or("").to_string(),
            last["outcome"]["type"].as_str().unwrap_or("").to_string(),
        ));
    }
    let ended = |t: &str, o: &str| (t.to_string(), o.to_string());
    assert_eq!(
        endings,
        [ended("RUN_FINISHED", "interrupt"), ended("RUN_FINISHED", "interrupt"), ended("RUN_FINISHED", "success")]
    );
}
