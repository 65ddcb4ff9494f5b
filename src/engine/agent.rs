//! What the engine asks of an agent, and the registry of the configured agents it runs turns
//! on. The engine knows no agent kind: the registry is built at start-up (by the `agents`
//! module, from the configuration) and handed to [`crate::engine::Engine::start`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};

/// A configured agent, ready to answer turns. It writes only through its [`TurnContext`]; it
/// never sees HTTP, callers or the database.
#[async_trait]
pub trait Agent: Send + Sync {
    /// Answers the turn from `checkpoint` on (the default checkpoint, for a new turn).
    async fn run(&self, turn: &mut TurnContext, checkpoint: Checkpoint) -> Result<AgentOutput, AgentError>;

    /// Whether a turn taken over at `checkpoint` goes on with the messages and tool calls the
    /// cut left open (an upstream stream resumed where it stopped), instead of the engine
    /// closing them first so the cut step can run again whole. An agent that says yes closes
    /// them itself when it cannot go on after all ([`TurnContext::close_cut_items`]).
    fn continues_cut_items(&self, _checkpoint: &Checkpoint) -> bool {
        false
    }
}

/// The configured agents by name: the ones turns run on and delegations hand tasks to.
#[derive(Clone, Default)]
pub struct AgentRegistry {
    agents: HashMap<String, Arc<dyn Agent>>,
}

impl AgentRegistry {
    /// The agent named `name`, if one is configured.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Agent>> {
        self.agents.get(name)
    }
}

impl FromIterator<(String, Arc<dyn Agent>)> for AgentRegistry {
    fn from_iter<I: IntoIterator<Item = (String, Arc<dyn Agent>)>>(agents: I) -> AgentRegistry {
        AgentRegistry { agents: agents.into_iter().collect() }
    }
}
