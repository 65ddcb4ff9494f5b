//! What the engine asks of an agent (the [`Agent`] trait; what it answers with is in
//! `outcome.rs`, where it stood in `checkpoint.rs`), and the registry of the configured agents
//! turns run on. The engine knows no agent kind: the registry is built at start-up (by the
//! `agents` module, from the configuration) and handed to [`crate::engine::Engine::start`];
//! a running turn sees it as the [`ChildAgents`] it may delegate to.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use serde_json::Value;

use super::app_request::{AppRefusal, AppRequest, AppRoute};
use super::checkpoint::Checkpoint;
use super::context::{ChildAgents, ChildRun, TurnContext};
use super::outcome::{AgentError, AgentOutput};
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

    /// Whether the agent serves an MCP App's own request (§9.2), and how: checked before
    /// anything is kept or a server is called. An agent with no MCP servers hosts no App.
    async fn check_app_request(&self, request: &AppRequest) -> Result<AppRoute, AppRefusal> {
        Err(AppRefusal::new(
            crate::protocol::ErrorCode::UnknownMcpServer,
            format!("this agent has no MCP servers, so no MCP server '{}'", request.server),
        ))
    }

    /// The answer to an App's request routed [`AppRoute::Answer`]: the MCP method's result,
    /// or why it failed, in words that name no secret.
    async fn answer_app_request(&self, _request: &AppRequest) -> Result<Value, String> {
        Err("this agent hosts no MCP App".into())
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

impl ChildAgents for AgentRegistry {
    fn has(&self, name: &str) -> bool {
        self.agents.contains_key(name)
    }

    fn run<'a>(&'a self, name: &str, turn: &'a mut TurnContext, checkpoint: Checkpoint) -> ChildRun<'a> {
        match self.agents.get(name) {
            Some(agent) => agent.run(turn, checkpoint),
            // Not reached: a delegation asks `has` first, and the registry does not change.
            None => {
                let missing = AgentError::Failed(format!("there is no agent '{name}' to delegate to"));
                Box::pin(async move { Err(missing) })
            }
        }
    }
}
