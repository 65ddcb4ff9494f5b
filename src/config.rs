//! The gateway's configuration: one typed struct, loaded from the commented default file
//! (`config/gateway.toml`, embedded in the binary), an optional operator file merged over it,
//! and `AGUI_GATEWAY_*` environment overrides for every setting (`env`).
//!
//! Loading writes nothing and validates everything, so `check-config` and `serve` fail the same
//! way on the same mistake.

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
mod validate;

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
mod tests;
