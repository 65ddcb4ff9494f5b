//! The documentation cannot drift from the code: every scalar setting of the default
//! configuration (`config/gateway.toml`, which is embedded in the binary) is listed in
//! `docs/config.md` with its environment name and its default value; every `AGUI_GATEWAY_*` name
//! the reference mentions is a real setting; and every example configuration (under `examples/`,
//! and the TOML blocks of the reference) loads exactly as `agui-gateway serve --config` would
//! load it.

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
            assert!(
                settings.iter().any(|s| s.env == name),
                "{doc} mentions {name}, which is no setting of config/gateway.toml"
            );
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
