//! `AGUI_GATEWAY_*` environment overrides, for every setting.
//!
//! A variable names a setting by its path joined by `_`, upper-cased: `database.url` is
//! `AGUI_GATEWAY_DATABASE_URL`, and an entry of a list is reached by its index
//! (`tenants[0].cors_origins` is `AGUI_GATEWAY_TENANTS_0_CORS_ORIGINS`; the index one past the
//! last adds an entry). A scalar's value is parsed as the setting's own type; a list or a table
//! is written as JSON or as a TOML value (`["https://app.example"]`,
//! `[{name = "acme"}]`), a table merging key by key over the one it replaces, as a file's
//! tables do.
//!
//! Variables are applied shortest name first, so a whole list set by one variable is in place
//! before the variables that change its entries, whatever order the environment lists them in.
//! A table the settings describe but the configuration does not hold yet is reached all the
//! same, at any depth (`AGUI_GATEWAY_TENANTS_0_QUOTAS_MAX_CONCURRENT_TURNS`).
//!
//! The process environment is read as bytes ([`ours`]): a variable that is not UTF-8 is
//! nobody's business here unless it is one of ours, which is then refused by name.

use std::cmp::Reverse;
use std::ffi::OsString;

use super::known_keys;
use super::settings::{ConfigError, ENV_PREFIX};

/// One step from the root of the settings to the one a variable names.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The `AGUI_GATEWAY_*` variables of `variables` (the process's, `std::env::vars_os()`), as
/// text; any other variable is left alone whatever it holds. One of ours that is not UTF-8 is
/// refused, named (its name as far as it reads).
pub fn ours(variables: impl IntoIterator<Item = (OsString, OsString)>) -> Result<Vec<(String, String)>, ConfigError> {
    let mut ours = Vec::new();
    for (name, value) in variables {
        if !name.to_string_lossy().starts_with(ENV_PREFIX) {
            continue;
        }
        let name = name.into_string().map_err(|name| ConfigError::Env {
            name: name.to_string_lossy().into_owned(),
            message: "the variable's name is not valid UTF-8".into(),
        })?;
        let value = value
            .into_string()
            .map_err(|_| ConfigError::Env { name: name.clone(), message: "the value is not valid UTF-8".into() })?;
        ours.push((name, value));
    }
    Ok(ours)
}

/// Applies every `AGUI_GATEWAY_*` variable of `variables` to the merged settings `tree`.
pub(super) fn apply_all(
    tree: &mut toml::Table,
    variables: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let mut ours: Vec<(String, String)> =
        variables.into_iter().filter(|(name, _)| name.starts_with(ENV_PREFIX)).collect();
    ours.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    for (name, raw) in &ours {
        let env_error = |message: String| ConfigError::Env { name: name.clone(), message };
        let key = &name[ENV_PREFIX.len()..];
        let steps = resolve(tree, &[], key).ok_or_else(|| env_error("no such setting".into()))?;
        let mut root = toml::Value::Table(std::mem::take(tree));
        let placed = place(&mut root, &steps, raw);
        if let toml::Value::Table(table) = root {
            *tree = table;
        }
        placed.map_err(env_error)?;
    }
    Ok(())
}

/// The steps to the setting `key` names under `table` (reached by the keys `names`), or `None`
/// when it names none. A key the settings know but `table` does not hold yet is named too; the
/// longest key that fits is tried first (`max_body_bytes` before a `max` that does not exist).
fn resolve(table: &toml::Table, names: &[String], key: &str) -> Option<Vec<Step>> {
    let path: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut candidates: Vec<String> = table.keys().cloned().collect();
    for known in known_keys::keys_at(&path, table) {
        if !candidates.iter().any(|candidate| candidate == known) {
            candidates.push(known.to_string());
        }
    }
    candidates.sort_by_key(|candidate| Reverse(candidate.len()));
    for candidate in candidates {
        let upper = candidate.to_ascii_uppercase();
        if key == upper {
            return Some(vec![Step::Key(candidate)]);
        }
        let Some(rest) = key.strip_prefix(upper.as_str()).and_then(|rest| rest.strip_prefix('_')) else { continue };
        let mut inner_names = names.to_vec();
        inner_names.push(candidate.clone());
        let inner = match table.get(&candidate) {
            Some(toml::Value::Table(inner)) => resolve(inner, &inner_names, rest),
            Some(toml::Value::Array(items)) => resolve_in_list(items, &inner_names, rest),
            // A key the settings know, not held yet: a list of tables when an index follows,
            // else a table (a scalar setting has no keys under it, so nothing resolves).
            None if rest.starts_with(|c: char| c.is_ascii_digit()) => resolve_in_list(&[], &inner_names, rest),
            None => resolve(&toml::Table::new(), &inner_names, rest),
            Some(_) => None,
        };
        if let Some(mut steps) = inner {
            steps.insert(0, Step::Key(candidate));
            return Some(steps);
        }
    }
    None
}

/// `key` under a list: an index (at most the list's length: that one is a new entry), alone or
/// followed by `_` and a setting of that entry.
fn resolve_in_list(items: &[toml::Value], names: &[String], key: &str) -> Option<Vec<Step>> {
    let digits = key.bytes().take_while(u8::is_ascii_digit).count();
    let index: usize = key[..digits].parse().ok()?;
    if index > items.len() {
        return None;
    }
    let rest = &key[digits..];
    if rest.is_empty() {
        return Some(vec![Step::Index(index)]);
    }
    let rest = rest.strip_prefix('_')?;
    let empty = toml::Table::new();
    let entry = match items.get(index) {
        Some(toml::Value::Table(entry)) => entry,
        Some(_) => return None,
        None => &empty,
    };
    let mut steps = resolve(entry, names, rest)?;
    steps.insert(0, Step::Index(index));
    Some(steps)
}

/// Sets the setting at `steps` under `root` to `raw`, read as that setting's value.
fn place(root: &mut toml::Value, steps: &[Step], raw: &str) -> Result<(), String> {
    let Some((last, leading)) = steps.split_last() else { return Err("no such setting".into()) };
    let mut current = root;
    for (at, step) in leading.iter().enumerate() {
        current = match (step, current) {
            (Step::Key(key), toml::Value::Table(table)) => {
                // A table or list on the way that is not held yet begins empty.
                let empty = match steps.get(at + 1) {
                    Some(Step::Index(_)) => toml::Value::Array(Vec::new()),
                    _ => toml::Value::Table(toml::Table::new()),
                };
                table.entry(key.clone()).or_insert(empty)
            }
            (Step::Index(index), toml::Value::Array(items)) => {
                if *index == items.len() {
                    items.push(toml::Value::Table(toml::Table::new()));
                }
                items.get_mut(*index).ok_or("no such setting")?
            }
            _ => return Err("no such setting".into()),
        };
    }
    match (last, current) {
        (Step::Key(key), toml::Value::Table(table)) => {
            let value = value_for(table.get(key), raw)?;
            match (table.get_mut(key), value) {
                (Some(toml::Value::Table(existing)), toml::Value::Table(over)) => merge_tables(existing, over),
                (_, value) => {
                    table.insert(key.clone(), value);
                }
            }
        }
        (Step::Index(index), toml::Value::Array(items)) => {
            let value = value_for(items.get(*index), raw)?;
            match (items.get_mut(*index), value) {
                (Some(toml::Value::Table(existing)), toml::Value::Table(over)) => merge_tables(existing, over),
                (Some(slot), value) => *slot = value,
                (None, value) => items.push(value),
            }
        }
        _ => return Err("no such setting".into()),
    }
    Ok(())
}

/// `raw` as a value for a setting that holds `existing` (`None`: nothing yet): a scalar of the
/// same type, or a list or table written as JSON or TOML. A setting not held yet takes a list,
/// a table, a number or a boolean when `raw` reads as one, else the text itself.
fn value_for(existing: Option<&toml::Value>, raw: &str) -> Result<toml::Value, String> {
    Ok(match existing {
        Some(toml::Value::Integer(_)) => {
            toml::Value::Integer(raw.parse().map_err(|_| format!("'{raw}' is not an integer"))?)
        }
        Some(toml::Value::Float(_)) => toml::Value::Float(raw.parse().map_err(|_| format!("'{raw}' is not a number"))?),
        Some(toml::Value::Boolean(_)) => {
            toml::Value::Boolean(raw.parse().map_err(|_| format!("'{raw}' is not true/false"))?)
        }
        Some(toml::Value::String(_) | toml::Value::Datetime(_)) => toml::Value::String(raw.to_string()),
        Some(toml::Value::Array(_)) => structured(raw).filter(toml::Value::is_array).ok_or_else(|| {
            format!("'{raw}' is not a list: write it as JSON or TOML, e.g. [\"one\", \"two\"] or [{{name = \"one\"}}]")
        })?,
        Some(toml::Value::Table(_)) => structured(raw).filter(toml::Value::is_table).ok_or_else(|| {
            format!("'{raw}' is not a table: write it as JSON or TOML, e.g. {{\"key\": 1}} or {{key = 1}}")
        })?,
        None => structured(raw).unwrap_or_else(|| toml::Value::String(raw.to_string())),
    })
}

/// `raw` read as a JSON value, else as a TOML value; `None` when it is neither.
fn structured(raw: &str) -> Option<toml::Value> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(raw) {
        if let Ok(value) = toml::Value::try_from(json) {
            return Some(value);
        }
    }
    let mut document: toml::Table = format!("value = {raw}").parse().ok()?;
    document.remove("value")
}

/// Tables merge key by key; any other value (arrays included) replaces the default.
pub(super) fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base_table)), toml::Value::Table(over_table)) => {
                merge_tables(base_table, over_table)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(variables: &[(&str, &str)]) -> Result<Config, String> {
        Config::load(None, variables.iter().map(|(name, value)| (name.to_string(), value.to_string())))
            .map_err(|error| error.to_string())
    }

    #[test]
    fn a_list_of_tables_is_set_whole_in_json_or_toml() {
        let json = load(&[(
            "AGUI_GATEWAY_TENANTS",
            r#"[{"name": "acme", "cors_origins": ["https://app.acme.example"]}, {"name": "globex"}]"#,
        )])
        .expect("loads");
        let names: Vec<&str> = json.tenants.iter().map(|tenant| tenant.name.as_str()).collect();
        assert_eq!(names, ["acme", "globex"], "the list replaces the default tenants");
        assert_eq!(json.tenants[0].cors_origins, ["https://app.acme.example"]);
        let toml = load(&[("AGUI_GATEWAY_TENANTS", r#"[{name = "acme", cors_origins = ["https://a.example"]}]"#)])
            .expect("loads");
        assert_eq!(toml.tenants[0].cors_origins, ["https://a.example"]);
    }

    #[test]
    fn an_entry_of_a_list_is_reached_by_its_index_and_the_next_index_adds_one() {
        let config = load(&[
            ("AGUI_GATEWAY_TENANTS_0_CORS_ORIGINS", r#"["https://app.example"]"#),
            ("AGUI_GATEWAY_TENANTS_1_NAME", "acme"),
            ("AGUI_GATEWAY_AGENTS_0_CHUNK_CHARS", "3"),
        ])
        .expect("loads");
        assert_eq!(config.tenants[0].name, "default");
        assert_eq!(config.tenants[0].cors_origins, ["https://app.example"], "a key the default entry lacks");
        assert_eq!(config.tenants[1].name, "acme");
        let crate::config::AgentKindConfig::Script(demo) = &config.agents[0].kind else { panic!("the demo agent") };
        assert_eq!(demo.chunk_chars, 3);
        let error = load(&[("AGUI_GATEWAY_TENANTS_5_NAME", "far")]).expect_err("no fifth tenant");
        assert!(error.contains("AGUI_GATEWAY_TENANTS_5_NAME") && error.contains("no such setting"), "{error}");
    }

    #[test]
    fn a_table_not_held_yet_is_reached_by_its_keys_at_any_depth() {
        let config = load(&[
            ("AGUI_GATEWAY_TENANTS_0_QUOTAS_MAX_CONCURRENT_TURNS", "2"),
            ("AGUI_GATEWAY_TENANTS_1_NAME", "acme"),
            ("AGUI_GATEWAY_TENANTS_1_QUOTAS_TURNS_PER_MINUTE", "30"),
            ("AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS_0_NAME", "idp"),
            ("AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS_0_ISSUER", "https://idp.example"),
            ("AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS_0_AUDIENCE", r#"["gw"]"#),
            ("AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS_0_JWKS_URL", "https://idp.example/jwks"),
            ("AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS_0_TENANTS_0", "acme"),
        ])
        .expect("loads");
        assert_eq!(config.tenants[0].quotas.max_concurrent_turns, Some(2));
        assert_eq!(
            config.tenants[0].quotas.token_period_secs, 86_400,
            "the quota's other settings keep their defaults"
        );
        assert_eq!(config.tenants[1].name, "acme");
        assert_eq!(config.tenants[1].quotas.turns_per_minute, Some(30));
        assert_eq!(config.auth.identity_providers[0].issuer, "https://idp.example");
        let error = load(&[("AGUI_GATEWAY_TENANTS_0_QUOTAS_MAX_TURNS", "2")]).expect_err("no such setting");
        assert!(
            error.contains("AGUI_GATEWAY_TENANTS_0_QUOTAS_MAX_TURNS") && error.contains("no such setting"),
            "{error}"
        );
    }

    #[test]
    fn only_our_variables_are_read_and_one_that_is_not_utf8_is_named() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(vec![0xff, 0xfe]);
        let read = super::ours([
            (OsString::from("FOO"), bad()),
            (OsString::from_vec(b"BAR\xff".to_vec()), OsString::from("x")),
            (OsString::from("AGUI_GATEWAY_LISTEN"), OsString::from("127.0.0.1:9")),
        ])
        .expect("others are ignored");
        assert_eq!(read, [("AGUI_GATEWAY_LISTEN".to_string(), "127.0.0.1:9".to_string())]);
        let error = super::ours([(OsString::from("AGUI_GATEWAY_DATABASE_URL"), bad())]).expect_err("refused");
        let error = error.to_string();
        assert!(error.contains("AGUI_GATEWAY_DATABASE_URL") && error.contains("UTF-8"), "{error}");
    }

    #[test]
    fn a_whole_list_goes_in_before_the_variables_that_change_its_entries() {
        // The environment's order is not the order applied: shortest name first.
        let config = load(&[
            ("AGUI_GATEWAY_TENANTS_0_CORS_ORIGINS", r#"["https://b.example"]"#),
            ("AGUI_GATEWAY_TENANTS", r#"[{"name": "b"}]"#),
        ])
        .expect("loads");
        assert_eq!(config.tenants.len(), 1);
        assert_eq!(config.tenants[0].name, "b");
        assert_eq!(config.tenants[0].cors_origins, ["https://b.example"]);
    }

    #[test]
    fn a_table_merges_and_a_setting_absent_from_the_defaults_is_found() {
        let config = load(&[
            ("AGUI_GATEWAY_LIMITS", r#"{"max_body_bytes": 2048}"#),
            (
                "AGUI_GATEWAY_AUTH_IDENTITY_PROVIDERS",
                r#"[{name = "idp", issuer = "https://idp.example", audience = ["gw"], jwks_url = "https://idp.example/jwks"}]"#,
            ),
        ])
        .expect("loads");
        assert_eq!(config.limits.max_body_bytes, 2048);
        assert_eq!(config.limits.max_event_bytes, 1024 * 1024, "the other limits stay");
        assert_eq!(config.auth.identity_providers.len(), 1);
        assert_eq!(config.auth.identity_providers[0].issuer, "https://idp.example");
    }

    #[test]
    fn a_list_or_table_that_does_not_read_as_one_is_refused_naming_the_variable() {
        for (name, value) in [
            ("AGUI_GATEWAY_TENANTS", "acme"),
            ("AGUI_GATEWAY_TENANTS", r#"{"name": "acme"}"#),
            ("AGUI_GATEWAY_LIMITS", "[1, 2]"),
            ("AGUI_GATEWAY_AGENTS", "[{name = "),
        ] {
            let error = load(&[(name, value)]).expect_err("refused");
            assert!(error.contains(name), "{name}={value}: {error}");
        }
        // A list that reads but holds what no setting takes is refused by the key check.
        let error = load(&[("AGUI_GATEWAY_TENANTS", r#"[{"name": "a", "cors_origin": []}]"#)]).expect_err("refused");
        assert!(error.contains("tenants[0].cors_origin"), "{error}");
    }
}
