//! The gateway's configuration: one typed struct, loaded from the commented default file
//! (`config/gateway.toml`, embedded in the binary), an optional operator file merged over it,
//! and `AGUI_GATEWAY_*` environment overrides for every setting (`env`).
//!
//! Loading writes nothing and validates everything, so `check-config` and `serve` fail the same
//! way on the same mistake.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod agents;
mod auth;
mod env;
mod known_keys;
mod limits;
mod tenants;
mod tls;

pub use agents::{
    AguiAgentConfig, Approval, CallSpec, HttpTool, McpServerConfig, OnCut, OpenaiAgentConfig, ScriptAgentConfig,
    ScriptStep, ToolPolicy,
};

pub use auth::{default_person_scopes, AppTokensConfig, AuthConfig, IdentityProviderConfig};
pub use limits::{EventLogConfig, Limits, RetentionConfig, TurnsConfig};
pub use tenants::{QuotaConfig, TenantConfig};
pub use tls::TlsConfig;

/// Kept here too: commands print the configured database URL through it.
pub use crate::redact::redact_url;

/// The documented example configuration, which is also the built-in default.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/gateway.toml");

/// Where the gateway serves its console (`console = true`).
pub const CONSOLE_PATH: &str = "/console/";

/// Where the CopilotKit runtime's routes are served and documented (`/v1/copilotkit/{tenant}/…`);
/// `copilotkit_path` may publish them under another base.
pub const COPILOTKIT_PATH: &str = "/v1/copilotkit";

/// The first segments of every other route the gateway serves (its API, probes, document and
/// console). `copilotkit_path` may neither lie under one of these nor hold one, or a request
/// would have two meanings; the HTTP layer's tests check this list against its routes.
pub const GATEWAY_ROUTE_PREFIXES: &[&str] = &[
    "/v1/agui",
    "/v1/agents",
    "/v1/threads",
    "/v1/interrupts",
    "/v1/auth",
    "/livez",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/console",
];

/// Prefix of every environment override: `AGUI_GATEWAY_` + the setting's path joined by `_`,
/// upper-cased (`database.url` → `AGUI_GATEWAY_DATABASE_URL`).
pub const ENV_PREFIX: &str = "AGUI_GATEWAY_";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("environment override {name}: {message}")]
    Env { name: String, message: String },
    #[error("invalid config: {0}")]
    Invalid(String),
    /// A key no setting reads: `path` is where it stands (`agents[2].steps[1].aproval`), `hint`
    /// the nearest valid key or the keys its table takes.
    #[error("invalid config: unknown key {path}: {hint}")]
    UnknownKey { path: String, hint: String },
    /// A setting of the wrong type, with its path.
    #[error("invalid config: {path}: {message}")]
    Type { path: String, message: String },
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub listen: String,
    /// Where people decide interrupts (`gateway/console`); empty: the gateway's own console
    /// while [`Config::console`] serves it, else none.
    pub console_url: String,
    /// Whether the gateway serves its console (the inbox of interrupts, threads) at `/console/`.
    pub console: bool,
    /// The base path of the CopilotKit runtime's routes, before `/{tenant}` (default
    /// [`COPILOTKIT_PATH`]).
    pub copilotkit_path: String,
    pub log: LogConfig,
    pub database: DatabaseConfig,
    pub bus: BusConfig,
    pub tls: TlsConfig,
    pub limits: Limits,
    pub event_log: EventLogConfig,
    pub turns: TurnsConfig,
    pub retention: RetentionConfig,
    pub auth: AuthConfig,
    pub tenants: Vec<TenantConfig>,
    pub agents: Vec<AgentConfig>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("console_url", &self.console_url)
            .field("console", &self.console)
            .field("copilotkit_path", &self.copilotkit_path)
            .field("log", &self.log)
            .field("database", &self.database)
            .field("bus", &self.bus)
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .field("event_log", &self.event_log)
            .field("turns", &self.turns)
            .field("retention", &self.retention)
            .field("auth", &self.auth)
            .field("tenants", &self.tenants)
            .field("agents", &self.agents.iter().map(|a| &a.name).collect::<Vec<_>>())
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter directive.
    pub filter: String,
    /// `pretty` (human-readable lines) or `json` (one JSON object per line, for log shippers).
    pub format: LogFormat,
    /// An OTLP/HTTP collector (e.g. `http://otel-collector:4318`) to export spans to; empty: off.
    /// Needs a build with the `otel` cargo feature.
    pub otel_endpoint: String,
    /// The `service.name` of exported spans.
    pub otel_service_name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://path` (created on first start) or `postgres://…`.
    pub url: String,
    pub max_connections: u32,
}

/// How instances sharing a PostgreSQL database wake each other (`src/bus`): the database's own
/// notifications, or NATS. The database stays the log either way.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusConfig {
    /// `postgres` (LISTEN/NOTIFY on the database) or `nats`.
    pub kind: String,
    /// The NATS server, for `kind = "nats"`: `nats://HOST:PORT`.
    pub nats_url: String,
    /// Subjects are `<prefix>.turn.<id>` and `<prefix>.control`: instances of one deployment
    /// share a prefix, another deployment on the same NATS takes its own.
    pub nats_subject_prefix: String,
}

impl std::fmt::Debug for DatabaseConfig {
    /// The URL may hold a password: show only its scheme and host part.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentConfig {
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    /// Client-declared tools this agent admits (§2 `tools`).
    #[serde(default)]
    pub frontend_tools: Vec<String>,
    /// Tenants that may use the agent; empty means every tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// A JSON Schema: an answer that is JSON matching it is also sent as a card
    /// (`CUSTOM gateway.card`).
    #[serde(default)]
    pub card: Option<serde_json::Value>,
    /// State keys a run's `state` may write (§7), each with the JSON Schema its value must
    /// match; every other key of a run's `state` is ignored.
    #[serde(default)]
    pub editable_state: std::collections::BTreeMap<String, serde_json::Value>,
    #[serde(flatten)]
    pub kind: AgentKindConfig,
}

impl AgentConfig {
    /// Whether a user message's part of `modality` may reach this agent: a script reads only
    /// words, an `openai` agent what its model takes (`input_modalities`), an `agui` upstream
    /// gets every part as it came (§2 `messages`).
    pub fn takes(&self, modality: crate::protocol::Modality) -> bool {
        match &self.kind {
            AgentKindConfig::Script(_) => modality == crate::protocol::Modality::Text,
            AgentKindConfig::Openai(openai) => openai.takes(modality),
            AgentKindConfig::Agui(_) => true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AgentKindConfig {
    Script(ScriptAgentConfig),
    Openai(OpenaiAgentConfig),
    Agui(AguiAgentConfig),
}

impl Config {
    /// Where an interrupt's `gateway/console` link points (the interrupt's item is added to
    /// it): `console_url` when set; else the gateway's own console, `/console/` on the origin
    /// the client called, while it is served; else none.
    pub fn console_link_base(&self) -> Option<String> {
        match (self.console_url.as_str(), self.console) {
            ("", true) => Some(CONSOLE_PATH.to_string()),
            ("", false) => None,
            (url, _) => Some(url.to_string()),
        }
    }

    /// The built-in configuration: SQLite, the `default` tenant and the `demo` agent.
    pub fn builtin() -> Result<Config, ConfigError> {
        Config::load(None, std::iter::empty())
    }

    /// The process's `AGUI_GATEWAY_*` variables, for [`Config::load`]: read as bytes, so a
    /// variable that is not UTF-8 is ignored, or refused by name when it is one of ours.
    pub fn environment() -> Result<Vec<(String, String)>, ConfigError> {
        env::ours(std::env::vars_os())
    }

    /// Loads the defaults, merges `file` over them and applies the environment `overrides`
    /// (pairs of name and value; pass [`Config::environment`] in production).
    pub fn load(
        file: Option<&Path>,
        overrides: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut tree: toml::Table = DEFAULT_CONFIG_TOML.parse()?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
            let operator: toml::Table = text.parse()?;
            merge_tables(&mut tree, operator);
        }
        env::apply_all(&mut tree, overrides)?;
        known_keys::check(&tree)?;
        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(tree)).map_err(|error| {
            let path = match error.path().to_string() {
                root if root == "." => "the config".to_string(),
                path => path,
            };
            ConfigError::Type { path, message: error.into_inner().message().to_string() }
        })?;
        config.validate()?;
        Ok(config)
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|_| ConfigError::Invalid(format!("listen: '{}' is not an address", self.listen)))
    }

    pub fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// The environment variables whose values are secrets the gateway holds for its agents: a
    /// model's API key, tools', MCP servers' and upstreams' secret headers. Their values are
    /// masked wherever they would be recorded, streamed or logged (`redact::mask_secrets`).
    pub fn secret_variables(&self) -> Vec<String> {
        let mut variables = Vec::new();
        for agent in &self.agents {
            match &agent.kind {
                AgentKindConfig::Openai(openai) => {
                    variables.push(openai.api_key_env.clone());
                    for tool in &openai.tools {
                        variables.extend(tool.secret_headers.values().cloned());
                        variables.extend(tool.secret_args.values().cloned());
                    }
                    for server in &openai.mcp_servers {
                        variables.extend(server.secret_headers.values().cloned());
                        variables.extend(server.secret_args.values().cloned());
                    }
                }
                AgentKindConfig::Agui(agui) => variables.extend(agui.secret_headers.values().cloned()),
                AgentKindConfig::Script(_) => {}
            }
        }
        variables.retain(|v| !v.is_empty());
        variables
    }

    /// Makes every secret this configuration holds — its agents' ([`Config::secret_variables`])
    /// and the gateway's own ([`Config::own_secrets`]) — one to mask from now on, before
    /// anything can log, record or stream it.
    pub fn hold_its_secrets(&self) {
        crate::redact::hold_secrets_of(self.secret_variables());
        crate::redact::hold_setting_secrets(self.own_secrets());
    }

    /// The gateway's own secrets, each with the setting that holds it: the app-token signing
    /// secret, the metrics token, and the passwords (and secret query values) of the database
    /// and NATS URLs. Masked as the agents' secrets are (`redact::hold_setting_secrets`).
    pub fn own_secrets(&self) -> Vec<(String, String)> {
        let mut secrets = vec![
            ("auth.app_tokens.secret".to_string(), self.auth.app_tokens.secret.clone()),
            ("auth.metrics_token".to_string(), self.auth.metrics_token.clone()),
        ];
        for (setting, url) in [("database.url", &self.database.url), ("bus.nats_url", &self.bus.nats_url)] {
            secrets.extend(crate::redact::url_secrets(url).into_iter().map(|secret| (setting.to_string(), secret)));
        }
        secrets.retain(|(_, value)| !value.is_empty());
        secrets
    }

    pub fn tenant(&self, name: &str) -> Option<&TenantConfig> {
        self.tenants.iter().find(|t| t.name == name)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        validate_copilotkit_path(&self.copilotkit_path)
            .map_err(|why| ConfigError::Invalid(format!("copilotkit_path: {why}")))?;
        if !(self.database.url.starts_with("sqlite:") || self.database.url.starts_with("postgres")) {
            return invalid("database.url must start with sqlite: or postgres://".into());
        }
        if !matches!(self.bus.kind.as_str(), "postgres" | "nats") {
            return invalid(format!("bus.kind must be \"postgres\" or \"nats\", not \"{}\"", self.bus.kind));
        }
        if self.bus.kind == "nats" && !self.bus.nats_url.starts_with("nats://") {
            return invalid("bus.nats_url must start with nats:// when bus.kind = \"nats\"".into());
        }
        if self.tls.cert_file.is_empty() != self.tls.key_file.is_empty() {
            let (set, unset) = if self.tls.cert_file.is_empty() {
                ("tls.key_file", "tls.cert_file")
            } else {
                ("tls.cert_file", "tls.key_file")
            };
            return invalid(format!(
                "{set} is set but {unset} is not: serving HTTPS takes both (or neither, for plain HTTP)"
            ));
        }
        if self.event_log.batch_max_events == 0 || self.event_log.writers == 0 || self.event_log.pipeline_depth == 0 {
            return invalid(
                "event_log.batch_max_events, event_log.writers and event_log.pipeline_depth must be at least 1".into(),
            );
        }
        if self.limits.keepalive_secs == 0 || self.limits.stream_max_secs == 0 {
            return invalid("limits.keepalive_secs and limits.stream_max_secs must be at least 1".into());
        }
        if self.limits.max_streams_per_caller == 0 || self.limits.max_streams_per_thread == 0 {
            return invalid(
                "limits.max_streams_per_caller and limits.max_streams_per_thread must be at least 1".into(),
            );
        }
        let limits = &self.limits;
        let edge = [
            ("max_connections", limits.max_connections as u64),
            ("header_read_timeout_secs", limits.header_read_timeout_secs),
            ("idle_timeout_secs", limits.idle_timeout_secs),
            ("h2_keepalive_interval_secs", limits.h2_keepalive_interval_secs),
            ("h2_keepalive_timeout_secs", limits.h2_keepalive_timeout_secs),
            ("body_read_timeout_secs", limits.body_read_timeout_secs),
            ("max_json_values", limits.max_json_values as u64),
            ("max_tool_schema_bytes", limits.max_tool_schema_bytes as u64),
            ("max_tool_schema_depth", limits.max_tool_schema_depth as u64),
            ("max_content_part_bytes", limits.max_content_part_bytes as u64),
            ("max_content_bytes", limits.max_content_bytes as u64),
        ];
        if let Some((name, _)) = edge.iter().find(|(_, value)| *value == 0) {
            return invalid(format!("limits.{name} must be at least 1"));
        }
        if limits.max_connections > 1_000_000 {
            return invalid("limits.max_connections must be at most 1000000".into());
        }
        if let Some(scheme) = limits.content_url_schemes.iter().find(|scheme| {
            crate::protocol::input::url_scheme(&format!("{scheme}:")).as_deref() != Some(scheme.as_str())
        }) {
            return invalid(format!(
                "limits.content_url_schemes: '{scheme}' is no URL scheme (lower-case, as \"https\" or \"data\")"
            ));
        }
        // hyper's smallest read buffer: a smaller one would not hold a plain request line.
        if limits.max_header_bytes < 8192 {
            return invalid("limits.max_header_bytes must be at least 8192".into());
        }
        let turns = &self.turns;
        if turns.heartbeat_ms == 0 || turns.sweep_ms == 0 || turns.lease_ms <= turns.heartbeat_ms * 2 {
            return invalid(
                "turns: heartbeat_ms and sweep_ms must be at least 1, lease_ms over twice heartbeat_ms".into(),
            );
        }
        if self.retention.batch == 0 || self.retention.interval_secs == 0 {
            return invalid("retention.batch and retention.interval_secs must be at least 1".into());
        }
        self.validate_auth()?;
        let mut names = HashSet::new();
        for tenant in &self.tenants {
            if !crate::ids::is_valid_name(&tenant.name) || !names.insert(&tenant.name) {
                return invalid(format!("tenant '{}' is duplicated or not a valid name", tenant.name));
            }
            for origin in &tenant.cors_origins {
                let scheme_ok = origin.starts_with("https://") || origin.starts_with("http://");
                if !scheme_ok || origin.ends_with('/') || origin.contains('*') {
                    return invalid(format!(
                        "tenant '{}': cors_origins entry '{origin}' must be an exact origin such as https://app.example",
                        tenant.name
                    ));
                }
            }
        }
        let mut names = HashSet::new();
        for agent in &self.agents {
            if !crate::ids::is_valid_name(&agent.name) || !names.insert(&agent.name) {
                return invalid(format!("agent '{}' is duplicated or not a valid name", agent.name));
            }
            for tenant in &agent.tenants {
                if self.tenant(tenant).is_none() {
                    return invalid(format!("agent '{}' names unknown tenant '{tenant}'", agent.name));
                }
            }
            for (key, schema) in &agent.editable_state {
                if key == "board" {
                    return invalid(format!("agent '{}': the board is not editable state", agent.name));
                }
                if let Err(why) = jsonschema::validator_for(schema) {
                    return invalid(format!(
                        "agent '{}': editable_state.{key} is not a valid JSON Schema: {why}",
                        agent.name
                    ));
                }
            }
            if let Some(card) = &agent.card {
                if let Err(why) = jsonschema::validator_for(card) {
                    return invalid(format!("agent '{}': its card is not a valid JSON Schema: {why}", agent.name));
                }
            }
            match &agent.kind {
                AgentKindConfig::Script(script) => {
                    if script.chunk_chars == 0 {
                        return invalid(format!("agent '{}': chunk_chars must be at least 1", agent.name));
                    }
                    if script.steps.is_empty() {
                        return invalid(format!("agent '{}' has no steps", agent.name));
                    }
                    for step in &script.steps {
                        if let ScriptStep::Delegate { delegate, .. } = step {
                            if !self.agents.iter().any(|a| a.name == *delegate) {
                                return invalid(format!(
                                    "agent '{}' delegates to '{delegate}', which is no agent",
                                    agent.name
                                ));
                            }
                        }
                        if let ScriptStep::Activity { activity, content, patch } = step {
                            if let Err(why) = activity_step(activity, content.is_some(), patch.as_deref()) {
                                return invalid(format!("agent '{}': its activity step {why}", agent.name));
                            }
                        }
                    }
                }
                AgentKindConfig::Openai(openai) => {
                    if let Err(why) = openai.validate() {
                        return invalid(format!("agent '{}': {why}", agent.name));
                    }
                    if let Some(unknown) = openai.delegates.iter().find(|d| !self.agents.iter().any(|a| a.name == **d))
                    {
                        return invalid(format!("agent '{}' delegates to '{unknown}', which is no agent", agent.name));
                    }
                }
                AgentKindConfig::Agui(agui) => {
                    if let Err(why) = agui.validate() {
                        return invalid(format!("agent '{}': {why}", agent.name));
                    }
                }
            }
        }
        Ok(())
    }
}

/// A script's `activity` step: a type, and either content or a patch the official client takes
/// (it refuses a bad pointer or an op without its `value`, and so would end the run).
fn activity_step(
    activity: &str,
    has_content: bool,
    patch: Option<&[crate::protocol::events::PatchOp]>,
) -> Result<(), String> {
    if activity.is_empty() {
        return Err("names no activity type".into());
    }
    let Some(patch) = patch else {
        return if has_content { Ok(()) } else { Err(format!("'{activity}' has neither content nor patch")) };
    };
    if has_content {
        return Err(format!("'{activity}' has both content and patch"));
    }
    let pointer = |p: &str| p.is_empty() || p.starts_with('/');
    for op in patch {
        let known = ["add", "remove", "replace", "move", "copy", "test"].contains(&op.op.as_str());
        let needs_value = ["add", "replace", "test"].contains(&op.op.as_str());
        let needs_from = ["move", "copy"].contains(&op.op.as_str());
        if !known
            || !pointer(&op.path)
            || (needs_value && op.value.is_none())
            || (needs_from && !op.from.as_deref().is_some_and(pointer))
        {
            return Err(format!("'{activity}' has a patch operation the protocol refuses: {} at '{}'", op.op, op.path));
        }
    }
    Ok(())
}

/// A base path for the CopilotKit runtime's routes: absolute, no trailing `/`, plain segments
/// (compared byte for byte with request paths, so nothing to percent-decode), and clear of the
/// gateway's other routes. Another base may not overlap the canonical one either: its old
/// path answers 404 once it is moved.
fn validate_copilotkit_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(format!("'{path}' must start with \"/\" and not end with one (e.g. \"/api/copilotkit\")"));
    }
    let plain = |segment: &str| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    };
    if !path[1..].split('/').all(plain) {
        return Err(format!("'{path}' must be segments of letters, digits, '-', '.', '_' or '~'"));
    }
    // One path under (or equal to) another, segment by segment.
    let within = |inner: &str, outer: &str| {
        inner == outer || inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'))
    };
    let own = GATEWAY_ROUTE_PREFIXES.iter().copied();
    let canonical = Some(COPILOTKIT_PATH).filter(|canonical| *canonical != path);
    match own.chain(canonical).find(|route| within(path, route) || within(route, path)) {
        Some(route) => Err(format!("'{path}' overlaps the gateway's own routes under {route}")),
        None => Ok(()),
    }
}

/// Tables merge key by key; any other value (arrays included) replaces the default.
fn merge_tables(base: &mut toml::Table, over: toml::Table) {
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
    use super::*;

    #[test]
    fn the_builtin_config_serves_the_demo_agent_on_sqlite() {
        let config = Config::builtin().expect("default config loads");
        assert_eq!(config.listen, "127.0.0.1:8080");
        assert_eq!(config.database.url, "sqlite://agui-gateway.db");
        assert!(config.agent("demo").is_some());
        assert!(config.tenant("default").is_some());
        assert_eq!(config.limits.max_body_bytes, 4 * 1024 * 1024);
    }

    #[test]
    fn environment_overrides_reach_nested_settings_with_their_types() {
        let config = Config::load(
            None,
            [
                ("AGUI_GATEWAY_DATABASE_URL".to_string(), "postgres://db/x".to_string()),
                ("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES".to_string(), "1024".to_string()),
                ("UNRELATED".to_string(), "1".to_string()),
            ],
        )
        .expect("loads");
        assert_eq!(config.database.url, "postgres://db/x");
        assert_eq!(config.limits.max_body_bytes, 1024);
    }

    #[test]
    fn a_bad_override_is_refused_with_its_name() {
        let error =
            Config::load(None, [("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES".into(), "lots".into())]).expect_err("refused");
        assert!(error.to_string().contains("AGUI_GATEWAY_LIMITS_MAX_BODY_BYTES"), "{error}");
        let error = Config::load(None, [("AGUI_GATEWAY_NOPE".into(), "1".into())]).expect_err("refused");
        assert!(error.to_string().contains("no such setting"), "{error}");
    }

    #[test]
    fn an_activity_step_the_protocol_would_refuse_is_refused_at_load() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("activity.toml");
        let agent = |step: &str| format!("[[agents]]\nname = \"painter\"\nkind = \"script\"\nsteps = [ {step} ]\n");
        std::fs::write(&path, agent("{ activity = \"plan\", content = { done = 0 } }")).expect("write");
        Config::load(Some(&path), std::iter::empty()).expect("content alone loads");
        for (step, why) in [
            ("{ activity = \"plan\" }", "neither content nor patch"),
            ("{ activity = \"plan\", content = {}, patch = [] }", "both content and patch"),
            ("{ activity = \"plan\", patch = [ { op = \"replace\", path = \"done\", value = 1 } ] }", "refuses"),
            ("{ activity = \"plan\", patch = [ { op = \"add\", path = \"/done\" } ] }", "refuses"),
            ("{ activity = \"plan\", patch = [ { op = \"merge\", path = \"/done\", value = 1 } ] }", "refuses"),
        ] {
            std::fs::write(&path, agent(step)).expect("write");
            let error = Config::load(Some(&path), std::iter::empty()).expect_err(step).to_string();
            assert!(error.contains("activity step") && error.contains(why), "{step}: {error}");
        }
    }

    #[test]
    fn the_copilotkit_path_defaults_to_the_canonical_base_and_refuses_bad_or_overlapping_ones() {
        let config = Config::builtin().expect("default config loads");
        assert_eq!(config.copilotkit_path, COPILOTKIT_PATH);
        let with = |path: &str| {
            let variable = ("AGUI_GATEWAY_COPILOTKIT_PATH".to_string(), path.to_string());
            Config::load(None, [variable])
        };
        for good in ["/api/copilotkit", "/copilotkit", "/a/b.c/d-e_f~"] {
            assert_eq!(with(good).expect(good).copilotkit_path, good);
        }
        for bad in [
            "api/copilotkit",
            "/api/copilotkit/",
            "/",
            "",
            "/api//copilotkit",
            "/api/../v1",
            "/api/{tenant}",
            "/api copilotkit",
            "/v1",
            "/v1/threads",
            "/v1/agui/agents/x",
            "/console",
            "/metrics/copilotkit",
            "/v1/copilotkit/under",
        ] {
            let error = with(bad).expect_err(bad).to_string();
            assert!(error.contains("copilotkit_path"), "{bad}: {error}");
        }
    }

    #[test]
    fn a_misspelled_setting_is_refused() {
        let dir = std::env::temp_dir().join(format!("agui-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("typo.toml");
        std::fs::write(&path, "[limits]\nmax_body_byte = 10\n").expect("write");
        let error = Config::load(Some(&path), std::iter::empty()).expect_err("refused");
        assert!(error.to_string().contains("max_body_byte"), "{error}");
    }

    #[test]
    fn the_edge_limits_have_defaults_overrides_and_bounds() {
        let config = Config::builtin().expect("loads");
        assert_eq!(config.limits.max_connections, 4096);
        assert_eq!(config.limits.header_read_timeout_secs, 10);
        assert_eq!(config.tenant("default").and_then(|t| t.quotas.max_concurrent_turns), Some(256));
        let config = Config::load(
            None,
            [
                ("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS".to_string(), "10".to_string()),
                ("AGUI_GATEWAY_LIMITS_IDLE_TIMEOUT_SECS".to_string(), "3".to_string()),
                ("AGUI_GATEWAY_LIMITS_MAX_TOOL_SCHEMA_DEPTH".to_string(), "4".to_string()),
            ],
        )
        .expect("loads");
        assert_eq!((config.limits.max_connections, config.limits.idle_timeout_secs), (10, 3));
        assert_eq!(config.limits.max_tool_schema_depth, 4);
        for (name, value, refusal) in [
            ("AGUI_GATEWAY_LIMITS_HEADER_READ_TIMEOUT_SECS", "0", "limits.header_read_timeout_secs"),
            ("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS", "0", "limits.max_connections"),
            ("AGUI_GATEWAY_LIMITS_MAX_HEADER_BYTES", "100", "limits.max_header_bytes"),
        ] {
            let error = Config::load(None, [(name.to_string(), value.to_string())]).expect_err("refused");
            assert!(error.to_string().contains(refusal), "{error}");
        }
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("typo.toml");
        std::fs::write(&path, "[limits]\nmax_conections = 10\n").expect("write");
        let error = Config::load(Some(&path), std::iter::empty()).expect_err("refused").to_string();
        assert!(error.contains("limits.max_conections") && error.contains("'max_connections'"), "{error}");
    }

    #[test]
    fn a_blank_secret_is_refused_at_load_naming_its_setting() {
        for (name, setting) in [
            ("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET", "auth.app_tokens.secret"),
            ("AGUI_GATEWAY_AUTH_METRICS_TOKEN", "auth.metrics_token"),
        ] {
            for blank in [" ".repeat(40), "\t \n".repeat(12)] {
                let error = Config::load(None, [(name.to_string(), blank)]).expect_err("refused").to_string();
                assert!(error.contains(setting) && error.contains("blank"), "{error}");
            }
        }
        let secret = "a real secret of well over thirty-two bytes";
        let config = Config::load(None, [("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET".to_string(), secret.to_string())])
            .expect("loads");
        assert_eq!(config.auth.app_tokens.secret, secret);
    }

    #[test]
    fn content_url_schemes_default_to_https_and_data_and_must_be_schemes() {
        let config = Config::builtin().expect("loads");
        assert_eq!(config.limits.content_url_schemes, ["https", "data"]);
        let config =
            Config::load(None, [("AGUI_GATEWAY_LIMITS_CONTENT_URL_SCHEMES".into(), r#"["https", "http"]"#.into())])
                .expect("loads");
        assert_eq!(config.limits.content_url_schemes, ["https", "http"]);
        for bad in [r#"["https:"]"#, r#"["HTTPS"]"#, r#"[""]"#, r#"["a b"]"#] {
            let error = Config::load(None, [("AGUI_GATEWAY_LIMITS_CONTENT_URL_SCHEMES".into(), bad.into())])
                .expect_err("refused")
                .to_string();
            assert!(error.contains("limits.content_url_schemes"), "{bad}: {error}");
        }
    }

    #[test]
    fn passwords_never_reach_debug_output() {
        let config = Config::load(None, [("AGUI_GATEWAY_DATABASE_URL".into(), "postgres://u:hunter2@h/db".into())])
            .expect("loads");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn the_gateways_own_secrets_are_named_by_their_settings() {
        let config = Config::load(
            None,
            [
                ("AGUI_GATEWAY_AUTH_METRICS_TOKEN".to_string(), "metrics-token-123".to_string()),
                ("AGUI_GATEWAY_DATABASE_URL".to_string(), "postgres://gw:db-pass-456@db/gw".to_string()),
                ("AGUI_GATEWAY_BUS_NATS_URL".to_string(), "nats://bus:nats-pass-789@nats:4222".to_string()),
            ],
        )
        .expect("loads");
        let secrets = config.own_secrets();
        for (setting, value) in [
            ("auth.metrics_token", "metrics-token-123"),
            ("database.url", "db-pass-456"),
            ("bus.nats_url", "nats-pass-789"),
        ] {
            assert!(secrets.contains(&(setting.to_string(), value.to_string())), "{setting}: {secrets:?}");
        }
        assert!(!secrets.iter().any(|(setting, _)| setting == "auth.app_tokens.secret"), "an empty secret is none");
    }
}
