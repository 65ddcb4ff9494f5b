//! What the engine asks of an agent, and the registry of the configured agents it runs turns
//! on. The engine knows no agent kind: the registry is built at start-up (by the `agents`
//! module, from the configuration) and handed to [`crate::engine::Engine::start`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};
use super::waits::InterruptSpec;

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

    /// What the agent would ask a person now, under its current configuration, about the call
    /// the open interrupt `interrupt_id` (of a turn waiting at `checkpoint`) stands for. A
    /// decision after a long wait is checked against it (§5.3): when it differs from what was
    /// shown, the interrupt is superseded and the agent asks again when the turn goes on.
    fn asked_now(&self, _checkpoint: &Checkpoint, _interrupt_id: &str) -> AskedNow {
        AskedNow::Unknown
    }
}

/// What an agent would ask now about a call an interrupt waits on ([`Agent::asked_now`]).
#[derive(Debug)]
pub enum AskedNow {
    /// The agent cannot tell (the call is not its own, or it keeps no such record): the
    /// decision stands as it was shown.
    Unknown,
    /// It would ask this.
    Asks(InterruptSpec),
    /// It would ask nobody: the call's policy no longer needs a person.
    Nobody,
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
