//! Refuses every key of the configuration that no setting reads, naming its full path
//! (`agents[2].steps[1].aproval`) and the nearest valid key.
//!
//! The check runs on the merged TOML tree before the typed load, because serde cannot refuse
//! unknown keys everywhere itself: not through `flatten` (an agent's kind-specific settings, a
//! tool's approval policy) nor in an untagged enum (a script step), and a typo there would
//! silently switch a setting off: `aproval = "always"` would leave a tool call unapproved.
//!
//! The keys of a plain settings struct are read off its derived `Deserialize` ([`fields_of`]),
//! so a field added to one is known here at once. Only the tables serde flattens or tries
//! untagged are listed by hand below; the tests check those lists against the structs.

use serde::de::{DeserializeOwned, Visitor};

use super::agents::{AguiAgentConfig, CallSpec, OpenaiAgentConfig, ScriptAgentConfig, ToolPolicy};
use super::auth::{AppTokensConfig, AuthConfig, IdentityProviderConfig};
use super::limits::{EventLogConfig, Limits, RetentionConfig, TurnsConfig};
use super::settings::{BusConfig, Config, ConfigError, DatabaseConfig, LogConfig};
use super::tenants::{QuotaConfig, TenantConfig};
use super::tls::TlsConfig;

/// The keys every agent takes whatever its kind ([`AgentConfig`](super::settings::AgentConfig) without
/// its flattened kind).
const AGENT_KEYS: &[&str] =
    &["name", "title", "description", "frontend_tools", "tenants", "card", "editable_state", "kind"];

/// Agent kinds, the values of `kind`.
const AGENT_KINDS: &[&str] = &["script", "openai", "agui"];

/// The keys of an `openai` agent's HTTP tool besides its approval policy (flattened).
const HTTP_TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "url",
    "method",
    "parameters",
    "timeout_secs",
    "max_response_bytes",
    "secret_headers",
    "secret_args",
];

/// The keys of an `openai` agent's MCP server besides its approval policy (flattened).
const MCP_SERVER_KEYS: &[&str] =
    &["name", "url", "headers", "secret_headers", "secret_args", "tools", "timeout_secs", "tools_ttl_secs"];

/// Each kind of script step: the key naming it, the other keys it takes, and whether it takes
/// a tool call's approval policy too (flattened into it).
const STEP_KINDS: &[(&str, &[&str], bool)] = &[
    ("say", &[], false),
    ("tool", &["args", "result"], true),
    ("tools", &[], true),
    ("ask", &["choices", "deciders", "ttl_secs"], false),
    ("escalate", &["deciders", "ttl_secs"], false),
    ("note", &["kind", "tags", "labels", "replaces"], false),
    ("step", &[], false),
    ("client_tool", &["args"], false),
    ("delegate", &["input"], false),
    ("activity", &["content", "patch"], false),
    ("wait_ms", &[], false),
    ("fail", &[], false),
    ("tick", &["every_ms"], false),
    ("burst", &["bytes"], false),
];

/// Checks every table of the merged configuration `root`. A value of the wrong type where a
/// table is expected is left to the typed load, which names it.
pub(super) fn check(root: &toml::Table) -> Result<(), ConfigError> {
    settings_shape().check(root, "")?;
    for (path, agent) in tables_at(root, "", "agents") {
        check_agent(agent, &path)?;
    }
    Ok(())
}

/// A table's keys, and the shapes of the tables (or arrays of tables) under some of them.
struct Shape {
    keys: Vec<&'static str>,
    nested: Vec<(&'static str, Shape)>,
}

impl Shape {
    fn of<T: DeserializeOwned>() -> Shape {
        Shape::with_keys(fields_of::<T>().to_vec())
    }

    fn with_keys(keys: Vec<&'static str>) -> Shape {
        Shape { keys, nested: Vec::new() }
    }

    fn nest(mut self, key: &'static str, shape: Shape) -> Shape {
        self.nested.push((key, shape));
        self
    }

    fn check(&self, table: &toml::Table, path: &str) -> Result<(), ConfigError> {
        expect_keys(table, path, &self.keys)?;
        for (key, shape) in &self.nested {
            for (inner_path, inner) in tables_at(table, path, key) {
                shape.check(inner, &inner_path)?;
            }
        }
        Ok(())
    }
}

/// Every table but the agents (whose keys depend on their kind).
fn settings_shape() -> Shape {
    Shape::of::<Config>()
        .nest("log", Shape::of::<LogConfig>())
        .nest("database", Shape::of::<DatabaseConfig>())
        .nest("bus", Shape::of::<BusConfig>())
        .nest("tls", Shape::of::<TlsConfig>())
        .nest("limits", Shape::of::<Limits>())
        .nest("event_log", Shape::of::<EventLogConfig>())
        .nest("turns", Shape::of::<TurnsConfig>())
        .nest("retention", Shape::of::<RetentionConfig>())
        .nest(
            "auth",
            Shape::of::<AuthConfig>()
                .nest("app_tokens", Shape::of::<AppTokensConfig>())
                .nest("identity_providers", Shape::of::<IdentityProviderConfig>()),
        )
        .nest("tenants", Shape::of::<TenantConfig>().nest("quotas", Shape::of::<QuotaConfig>()))
}

/// The keys a table of the settings takes, the table named by the keys leading to it from the
/// root (`["auth", "identity_providers"]`; an array's tables by the array's key) and, for an
/// agent, by its `kind`. Empty for a table this does not describe (a step, a tool: their keys
/// depend on what they hold).
pub(super) fn keys_at(names: &[&str], table: &toml::Table) -> Vec<&'static str> {
    if names == ["agents"] {
        return match table.get("kind") {
            Some(toml::Value::String(kind)) => agent_keys(kind).unwrap_or_default(),
            _ => AGENT_KEYS.to_vec(),
        };
    }
    // (Built anew for each lookup: the environment is read once, at start.)
    let root = settings_shape();
    let mut shape = &root;
    for name in names {
        match shape.nested.iter().find(|(key, _)| key == name) {
            Some((_, inner)) => shape = inner,
            None => return Vec::new(),
        }
    }
    shape.keys.clone()
}

/// The keys an agent of `kind` takes, or `None` for no kind of agent.
fn agent_keys(kind: &str) -> Option<Vec<&'static str>> {
    let mut keys = AGENT_KEYS.to_vec();
    match kind {
        "script" => keys.extend(fields_of::<ScriptAgentConfig>()),
        "openai" => keys.extend(fields_of::<OpenaiAgentConfig>()),
        "agui" => keys.extend(fields_of::<AguiAgentConfig>()),
        _ => return None,
    }
    Some(keys)
}

fn check_agent(agent: &toml::Table, path: &str) -> Result<(), ConfigError> {
    let kind = match agent.get("kind") {
        Some(toml::Value::String(kind)) => kind.as_str(),
        // No kind, or not a string: the typed load says so.
        _ => return Ok(()),
    };
    let Some(keys) = agent_keys(kind) else {
        let hint = match nearest(kind, AGENT_KINDS) {
            Some(near) => format!("did you mean '{near}'?"),
            None => format!("the kinds are {}", AGENT_KINDS.join(", ")),
        };
        return Err(ConfigError::Invalid(format!("{path}.kind: '{kind}' is no agent kind; {hint}")));
    };
    expect_keys(agent, path, &keys)?;
    if kind == "script" {
        for (step_path, step) in tables_at(agent, path, "steps") {
            check_step(step, &step_path)?;
        }
    }
    if kind == "openai" {
        let tool =
            Shape::with_keys(HTTP_TOOL_KEYS.iter().copied().chain(fields_of::<ToolPolicy>().iter().copied()).collect());
        for (tool_path, table) in tables_at(agent, path, "tools") {
            tool.check(table, &tool_path)?;
        }
        let server = Shape::with_keys(
            MCP_SERVER_KEYS.iter().copied().chain(fields_of::<ToolPolicy>().iter().copied()).collect(),
        );
        for (server_path, table) in tables_at(agent, path, "mcp_servers") {
            server.check(table, &server_path)?;
        }
    }
    Ok(())
}

/// A step is named by exactly one of the step keys; it takes that kind's keys only.
fn check_step(step: &toml::Table, path: &str) -> Result<(), ConfigError> {
    let names: Vec<&str> = STEP_KINDS.iter().map(|(name, ..)| *name).filter(|name| step.contains_key(*name)).collect();
    let (name, others, policy) = match names.as_slice() {
        [name] => STEP_KINDS
            .iter()
            .find(|(kind, ..)| kind == name)
            .copied()
            .ok_or_else(|| ConfigError::Invalid(format!("{path}: step kind '{name}' is not described")))?,
        [] => {
            let step_names: Vec<&str> = STEP_KINDS.iter().map(|(name, ..)| *name).collect();
            return Err(match step.keys().next() {
                Some(key) => unknown_key(path, key, &step_names),
                None => ConfigError::Invalid(format!(
                    "{path}: an empty step; a step is named by one of {}",
                    step_names.join(", ")
                )),
            });
        }
        several => {
            return Err(ConfigError::Invalid(format!(
                "{path}: one step names several kinds of step ({}); give each its own step",
                several.join(", ")
            )))
        }
    };
    let mut keys = vec![name];
    keys.extend(others);
    if policy {
        keys.extend(fields_of::<ToolPolicy>());
    }
    expect_keys(step, path, &keys)?;
    if name == "tools" {
        let call = Shape::of::<CallSpec>();
        for (call_path, table) in tables_at(step, path, "tools") {
            call.check(table, &call_path)?;
        }
    }
    Ok(())
}

fn expect_keys(table: &toml::Table, path: &str, known: &[&str]) -> Result<(), ConfigError> {
    match table.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(unknown_key(path, key, known)),
        None => Ok(()),
    }
}

fn unknown_key(path: &str, key: &str, known: &[&str]) -> ConfigError {
    let hint = match nearest(key, known) {
        Some(near) => format!("did you mean '{near}'?"),
        None => format!("this table takes {}", known.join(", ")),
    };
    ConfigError::UnknownKey { path: join(path, key), hint }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The tables under `table[key]`, each with its path: the one table, or each table of an array.
fn tables_at<'a>(table: &'a toml::Table, path: &str, key: &str) -> Vec<(String, &'a toml::Table)> {
    let path = join(path, key);
    match table.get(key) {
        Some(toml::Value::Table(inner)) => vec![(path, inner)],
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(index, item)| item.as_table().map(|inner| (format!("{path}[{index}]"), inner)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The known key closest to `word`, when it is close enough to be what was meant (a third of
/// its letters wrong at most, and at least one allowed).
fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    known
        .iter()
        .map(|candidate| (edit_distance(&word, &candidate.to_ascii_lowercase()), *candidate))
        .filter(|(distance, candidate)| *distance <= (word.len().max(candidate.len()) / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Letters inserted, deleted, replaced, or swapped with their neighbour, to turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut table = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in table.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in table[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let replace = table[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = replace.min(table[i - 1][j] + 1).min(table[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[i - 2][j - 2] + 1);
            }
            table[i][j] = best;
        }
    }
    table[a.len()][b.len()]
}

/// The keys serde reads for the struct `T`: its derived `Deserialize` hands them to
/// `deserialize_struct`, where [`FieldProbe`] keeps them and stops. (A struct with `flatten`
/// asks for a map instead and yields none; those are listed by hand above.)
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _stopped = T::deserialize(FieldProbe(&mut fields));
    fields
}

struct FieldProbe<'a>(&'a mut &'static [&'static str]);

/// How [`FieldProbe`] ends every deserialization.
#[derive(Debug)]
struct ProbeDone;

impl std::fmt::Display for ProbeDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names read")
    }
}

impl std::error::Error for ProbeDone {}

impl serde::de::Error for ProbeDone {
    fn custom<T: std::fmt::Display>(_message: T) -> ProbeDone {
        ProbeDone
    }
}

impl<'de> serde::Deserializer<'de> for FieldProbe<'_> {
    type Error = ProbeDone;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, ProbeDone> {
        Err(ProbeDone)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ProbeDone> {
        *self.0 = fields;
        Err(ProbeDone)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(value: &impl serde::Serialize) -> Vec<String> {
        let json = serde_json::to_value(value).expect("serializes");
        let mut keys: Vec<String> = json.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    }

    fn sorted(keys: impl IntoIterator<Item = &'static str>) -> Vec<String> {
        let mut keys: Vec<String> = keys.into_iter().map(str::to_string).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    #[test]
    fn a_plain_struct_yields_its_fields() {
        assert_eq!(fields_of::<Limits>()[0], "max_body_bytes");
        assert!(fields_of::<ToolPolicy>().contains(&"approval"));
        assert!(fields_of::<IdentityProviderConfig>().contains(&"tenant_claim"));
    }

    /// The hand-made lists are exactly the keys the structs serialize (every field, `None`
    /// ones as null), so a field added to a flattened struct or a step fails here first.
    #[test]
    fn the_hand_made_lists_match_the_structs() {
        let agent: crate::config::AgentConfig =
            toml::from_str("name = 'a'\nkind = 'script'\nsteps = [{ say = 'x' }]").expect("agent");
        let own = AGENT_KEYS.iter().copied().chain(fields_of::<ScriptAgentConfig>().iter().copied());
        assert_eq!(keys_of(&agent), sorted(own));

        let tool: crate::config::HttpTool = toml::from_str("name = 't'\nurl = 'http://x'").expect("tool");
        let own = HTTP_TOOL_KEYS.iter().copied().chain(fields_of::<ToolPolicy>().iter().copied());
        assert_eq!(keys_of(&tool), sorted(own));

        let server: crate::config::McpServerConfig = toml::from_str("name = 's'\nurl = 'http://x'").expect("server");
        let own = MCP_SERVER_KEYS.iter().copied().chain(fields_of::<ToolPolicy>().iter().copied());
        assert_eq!(keys_of(&server), sorted(own));

        let samples = [
            "say = 'x'",
            "tool = 't'\nresult = 'r'",
            "tools = [{ tool = 't', result = 'r' }]",
            "ask = 'q'",
            "escalate = 'e'",
            "note = 'n'",
            "step = 's'",
            "client_tool = 'c'",
            "delegate = 'd'",
            "activity = 'a'\ncontent = {}",
            "wait_ms = 1",
            "fail = 'f'",
            "tick = 1",
            "burst = 1",
        ];
        assert_eq!(samples.len(), STEP_KINDS.len());
        for (sample, (name, others, policy)) in samples.iter().zip(STEP_KINDS) {
            let step: crate::config::ScriptStep = toml::from_str(sample).expect(sample);
            let mut own: Vec<&'static str> = vec![name];
            own.extend(*others);
            if *policy {
                own.extend(fields_of::<ToolPolicy>());
            }
            assert_eq!(keys_of(&step), sorted(own), "the {name} step");
        }
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, text).expect("write");
        Config::load(Some(&path), std::iter::empty())
    }

    fn refusal(text: &str) -> String {
        load(text).expect_err("the config is refused").to_string()
    }

    const TENANT: &str = "[[tenants]]\nname = 'default'\n";

    /// The typos that used to load silently, each switching something off.
    #[test]
    fn a_typo_in_any_agent_table_is_refused_with_its_path_and_the_nearest_key() {
        let step = format!(
            "{TENANT}[[agents]]\nname = 'ok'\nkind = 'script'\nsteps = [{{ say = 'hi' }}]\n\
             [[agents]]\nname = 'mailer'\nkind = 'script'\n\
             steps = [{{ say = 'x' }}, {{ tool = 'send', result = 'sent', aproval = 'always' }}]\n"
        );
        let error = refusal(&step);
        assert!(error.contains("agents[1].steps[1].aproval") && error.contains("did you mean 'approval'?"), "{error}");

        let tool = format!(
            "{TENANT}[[agents]]\nname = 'llm'\nkind = 'openai'\nbase_url = 'http://127.0.0.1:1/v1'\nmodel = 'm'\n\
             tools = [{{ name = 'send', url = 'http://127.0.0.1:1/send', aproval = 'always' }}]\n"
        );
        let error = refusal(&tool);
        assert!(error.contains("agents[0].tools[0].aproval") && error.contains("did you mean 'approval'?"), "{error}");

        let server = format!(
            "{TENANT}[[agents]]\nname = 'llm'\nkind = 'openai'\nbase_url = 'http://127.0.0.1:1/v1'\nmodel = 'm'\n\
             mcp_servers = [{{ name = 'billing', url = 'http://127.0.0.1:1/mcp', aproval = 'always' }}]\n"
        );
        let error = refusal(&server);
        assert!(
            error.contains("agents[0].mcp_servers[0].aproval") && error.contains("did you mean 'approval'?"),
            "{error}"
        );

        let stepz = format!("{TENANT}[[agents]]\nname = 'a'\nkind = 'script'\nstepz = [{{ say = 'hi' }}]\n");
        let error = refusal(&stepz);
        assert!(error.contains("agents[0].stepz") && error.contains("did you mean 'steps'?"), "{error}");

        let mcp = format!(
            "{TENANT}[[agents]]\nname = 'a'\nkind = 'script'\nsteps = [{{ say = 'hi' }}]\nmcp_servers = ['x']\n"
        );
        let error = refusal(&mcp);
        assert!(error.contains("agents[0].mcp_servers") && error.contains("this table takes name, title"), "{error}");
    }

    #[test]
    fn every_other_table_refuses_unknown_keys_too() {
        let cases = [
            ("[[tenants]]\nname = 'default'\nquota = {}\n", "tenants[0].quota", "'quotas'"),
            ("[[tenants]]\nname = 'default'\nquotas = { max_concurent_turns = 1 }\n", "tenants[0].quotas.max_concurent_turns", "'max_concurrent_turns'"),
            (
                "[[auth.identity_providers]]\nname = 'idp'\nissuer = 'https://idp'\naudience = ['gw']\njwks_file = 'x'\ntenant_claims = 't'\n",
                "auth.identity_providers[0].tenant_claims",
                "'tenant_claim'",
            ),
            ("[auth.app_tokens]\nissuer2 = 'x'\n", "auth.app_tokens.issuer2", "'issuer'"),
            ("[turns]\nlease = 1\n", "turns.lease", "this table takes"),
            ("listn = '127.0.0.1:1'\n", "unknown key listn", "'listen'"),
            (
                "[[agents]]\nname = 'u'\nkind = 'agui'\nurl = 'http://x'\nfour_eyse = true\n",
                "agents[0].four_eyse",
                "'four_eyes'",
            ),
            (
                "[[agents]]\nname = 'p'\nkind = 'script'\nsteps = [{ tools = [{ tool = 'a', reslt = 'r' }], approval = 'always' }]\n",
                "agents[0].steps[0].tools[0].reslt",
                "'result'",
            ),
            ("[[agents]]\nname = 's'\nkind = 'script'\nsteps = [{ sya = 'hi' }]\n", "agents[0].steps[0].sya", "'say'"),
            (
                "[[agents]]\nname = 's'\nkind = 'script'\nsteps = [{ say = 'hi', tool = 't', result = 'r' }]\n",
                "agents[0].steps[0]",
                "several kinds of step (say, tool)",
            ),
            ("[[agents]]\nname = 's'\nkind = 'scrpt'\nsteps = []\n", "agents[0].kind", "did you mean 'script'?"),
        ];
        for (text, path, hint) in cases {
            let text = if text.starts_with("[[tenants]]") { text.to_string() } else { format!("{text}{TENANT}") };
            let error = refusal(&text);
            assert!(error.contains(path) && error.contains(hint), "{text}: {error}");
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_path() {
        let error = refusal("[limits]\nmax_body_bytes = 'lots'\n");
        assert!(error.contains("limits.max_body_bytes"), "{error}");
    }

    /// Every configuration the repository ships (and the default) loads.
    #[test]
    fn the_shipped_configs_load() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        let mut dirs = vec![root.join("config"), root.join("examples")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "toml") {
                    files.push(path);
                }
            }
        }
        assert!(files.len() >= 5, "{files:?}");
        for file in files {
            if let Err(error) = Config::load(Some(&file), std::iter::empty()) {
                panic!("{} does not load: {error}", file.display());
            }
        }
    }

    #[test]
    fn near_misses_are_suggested_and_far_ones_are_not() {
        assert_eq!(nearest("aproval", &["approval", "deciders"]), Some("approval"));
        assert_eq!(nearest("stepz", &["steps", "name"]), Some("steps"));
        assert_eq!(nearest("four_eyse", &["four_eyes"]), Some("four_eyes"));
        assert_eq!(nearest("mcp_servers", &["name", "steps", "tenants"]), None);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
