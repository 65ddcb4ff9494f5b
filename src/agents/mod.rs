//! Agents: the configured ways to answer a turn, one file per kind, each implementing the
//! engine's [`Agent`] trait. An agent writes only through its
//! [`TurnContext`](crate::engine::turn::TurnContext); it never sees HTTP, callers or the
//! database. [`registry`] builds them from the configuration at start-up; [`http`] is the outbound HTTP
//! client they share.

pub mod agui;
pub mod capabilities;
pub mod http;
pub mod openai;
pub mod script;

use std::sync::Arc;

use crate::config::{AgentKindConfig, Config};
use crate::engine::turn::agent::{Agent, AgentRegistry};

/// The configured agents, built from the configuration at start-up for the engine; every agent
/// that makes HTTP requests uses `tls` for HTTPS.
pub fn registry(config: &Config, tls: &Arc<rustls::ClientConfig>) -> AgentRegistry {
    config
        .agents
        .iter()
        .map(|agent| {
            let built: Arc<dyn Agent> = match &agent.kind {
                AgentKindConfig::Script(script) => Arc::new(script::ScriptAgent::new(script.clone())),
                AgentKindConfig::Openai(openai) => Arc::new(openai::OpenaiAgent::new(openai.clone(), tls)),
                AgentKindConfig::Agui(agui) => Arc::new(agui::AguiAgent::new(agui.clone(), tls)),
            };
            (agent.name.clone(), built)
        })
        .collect()
}
