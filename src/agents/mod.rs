//! Agents: the configured ways to answer a turn, one file per kind. An agent writes only
//! through its [`TurnContext`]; it never sees HTTP, callers or the database.

pub mod agui;
pub mod openai;
pub mod script;

use crate::config::{AgentConfig, AgentKindConfig};
use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};

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
