//! The gateway's configuration: one typed struct, loaded from the commented default file
//! (`config/gateway.toml`, embedded in the binary), an optional operator file merged over it,
//! and `AGUI_GATEWAY_*` environment overrides for every setting (`env`).
//!
//! Loading writes nothing and validates everything, so `check-config` and `serve` fail the same
//! way on the same mistake.

use std::net::SocketAddr;
use std::path::Path;

mod agents;
mod auth;
mod env;
mod known_keys;
mod limits;
mod settings;
mod tenants;
mod tls;
mod validate;

pub use agents::{
    AguiAgentConfig, Approval, CallSpec, HttpTool, McpServerConfig, OnCut, OpenaiAgentConfig, ScriptAgentConfig,
    ScriptStep, ToolPolicy,
};

pub use auth::{default_person_scopes, AppTokensConfig, AuthConfig, IdentityProviderConfig};
pub use limits::{EventLogConfig, Limits, RetentionConfig, TurnsConfig};
pub use settings::{
    AgentConfig, AgentKindConfig, BusConfig, Config, ConfigError, DatabaseConfig, LogConfig, LogFormat, CONSOLE_PATH,
    COPILOTKIT_PATH, ENV_PREFIX, GATEWAY_ROUTE_PREFIXES,
};
pub use tenants::{QuotaConfig, TenantConfig};
pub use tls::TlsConfig;

/// Kept here too: commands print the configured database URL through it.
pub use crate::redact::redact_url;

/// The documented example configuration, which is also the built-in default.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/gateway.toml");

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
            env::merge_tables(&mut tree, operator);
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

#[cfg(test)]
mod tests;
