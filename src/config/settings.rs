//! The configuration's shape: [`Config`] and the sections defined beside it, the paths it
//! reserves, and its error. The other sections live in files of their own (`agents.rs`,
//! `auth.rs`, `limits.rs`, `tenants.rs`, `tls.rs`); loading is `config.rs`, checking
//! `validate.rs`.

use serde::{Deserialize, Serialize};

use crate::redact::redact_url;

use super::agents::{AguiAgentConfig, OpenaiAgentConfig, ScriptAgentConfig};
use super::auth::AuthConfig;
use super::limits::{EventLogConfig, Limits, RetentionConfig, TurnsConfig};
use super::tenants::TenantConfig;
use super::tls::TlsConfig;

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
