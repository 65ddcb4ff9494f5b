//! Agents: the configured ways to answer a turn, one file per kind, each implementing the
//! engine's [`Agent`] trait. An agent writes only through its
//! [`TurnContext`](crate::engine::turn::TurnContext); it never sees HTTP, callers or the
//! database. [`registry`] builds them from the configuration at start-up.

pub mod agui;
pub mod capabilities;
pub mod openai;
pub mod script;

use std::sync::Arc;

use crate::config::{AgentKindConfig, Config};
use crate::engine::turn::agent::{Agent, AgentRegistry};

/// The HTTP client agents call tools, models and upstream servers with, over HTTP or HTTPS
/// (the gateway's outbound TLS configuration, `src/tls.rs`). It follows no redirect: a request
/// carries the configured (secret) headers, and a redirect could hand them to any other
/// address. A 3xx answer is the caller's to report.
#[derive(Debug, Clone)]
pub struct AgentHttp(Result<reqwest::Client, String>);

impl AgentHttp {
    pub fn new(tls: &Arc<rustls::ClientConfig>) -> AgentHttp {
        AgentHttp(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .tls_backend_preconfigured(rustls::ClientConfig::clone(tls))
                .build()
                .map_err(|e| format!("the HTTP client could not be set up ({e})")),
        )
    }

    /// The client, or why there is none.
    pub fn client(&self) -> Result<&reqwest::Client, &str> {
        self.0.as_ref().map_err(String::as_str)
    }
}

/// Why a request got no answer, in words for the run's error: a failed TLS handshake says what
/// was wrong with the certificate and for which host; anything else is the client's own words,
/// without the URL (it may carry a query with secrets).
pub fn unreachable_reason(error: reqwest::Error) -> String {
    let host = error.url().and_then(|url| url.host_str()).unwrap_or("?").to_string();
    match crate::tls::describe_failure(&error, &host) {
        Some(tls) => tls,
        None => error.without_url().to_string(),
    }
}

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
