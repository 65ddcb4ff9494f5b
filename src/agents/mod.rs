//! Agents: the configured ways to answer a turn, one file per kind, each implementing the
//! engine's [`Agent`] trait. An agent writes only through its
//! [`TurnContext`](crate::engine::turn::TurnContext); it never sees HTTP, callers or the
//! database. [`registry`] builds them from the configuration at start-up.

pub mod agui;
pub mod openai;
pub mod script;

use std::sync::Arc;

use crate::config::{AgentKindConfig, Config};
use crate::engine::agent::{Agent, AgentRegistry};

/// The HTTP client agents call tools, models and upstream servers with. It follows no
/// redirect: a request carries the configured (secret) headers, and a redirect could hand them
/// to any other address. A 3xx answer is the caller's to report.
#[derive(Debug, Clone)]
pub struct AgentHttp(Result<reqwest::Client, String>);

impl AgentHttp {
    pub fn new() -> AgentHttp {
        AgentHttp(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("the HTTP client could not be set up ({e})")),
        )
    }

    /// The client, or why there is none (no TLS backend on this machine).
    pub fn client(&self) -> Result<&reqwest::Client, &str> {
        self.0.as_ref().map_err(String::as_str)
    }
}

impl Default for AgentHttp {
    fn default() -> AgentHttp {
        AgentHttp::new()
    }
}

/// The configured agents, built from the configuration at start-up for the engine.
pub fn registry(config: &Config) -> AgentRegistry {
    config
        .agents
        .iter()
        .map(|agent| {
            let built: Arc<dyn Agent> = match &agent.kind {
                AgentKindConfig::Script(script) => Arc::new(script::ScriptAgent::new(script.clone())),
                AgentKindConfig::Openai(openai) => Arc::new(openai::OpenaiAgent::new(openai.clone())),
                AgentKindConfig::Agui(agui) => Arc::new(agui::AguiAgent::new(agui.clone())),
            };
            (agent.name.clone(), built)
        })
        .collect()
}
