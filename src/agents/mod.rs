//! Agents: the configured ways to answer a turn, one file per kind. An agent writes only
//! through its [`TurnContext`]; it never sees HTTP, callers or the database.

pub mod agui;
pub mod openai;
pub mod script;

use crate::config::{AgentConfig, AgentKindConfig};
use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};

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

/// A configured agent, ready to answer turns.
#[derive(Debug, Clone)]
pub enum Agent {
    Script(script::ScriptAgent),
    Openai(openai::OpenaiAgent),
    Agui(agui::AguiAgent),
}

impl Agent {
    pub fn from_config(config: &AgentConfig) -> Agent {
        match &config.kind {
            AgentKindConfig::Script(script) => Agent::Script(script::ScriptAgent::new(script.clone())),
            AgentKindConfig::Openai(openai) => Agent::Openai(openai::OpenaiAgent::new(openai.clone())),
            AgentKindConfig::Agui(agui) => Agent::Agui(agui::AguiAgent::new(agui.clone())),
        }
    }

    /// Answers the turn from `checkpoint` on (the start, for a new turn).
    pub async fn run(&self, turn: &mut TurnContext, checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        match self {
            Agent::Script(agent) => agent.run(turn, checkpoint).await,
            Agent::Openai(agent) => agent.run(turn, checkpoint).await,
            Agent::Agui(agent) => agent.run(turn, checkpoint).await,
        }
    }
}
