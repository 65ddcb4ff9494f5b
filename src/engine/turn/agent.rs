//! What the engine asks of an agent, what an agent answers with ([`AgentOutput`], or an
//! [`AgentError`] saying how the run ends), where it stood ([`Checkpoint`]), and the registry
//! of the configured agents turns run on. The engine knows no agent kind: the registry is
//! built at start-up (by the `agents` module, from the configuration) and handed to
//! [`crate::engine::Engine::start`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;

use serde_json::Value;

use super::app_request::{AppRefusal, AppRequest, AppRoute};
use super::waits::InterruptSpec;
use super::{ChildCheckpoint, TurnContext};
use crate::engine::log::LogError;
use crate::protocol::TokenUsage;

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

/// Why an agent stopped before finishing. Each maps to how the run ends.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// An explicit cancel: `RUN_FINISHED` with outcome `cancelled`.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The turn leaves this instance unfinished (shutdown, or a lost lease); not an ending.
    #[error("the turn moves to another instance")]
    Stopped,
    /// The turn waits for interrupts to be decided; not an ending either.
    #[error("the turn waits for a decision")]
    Waiting,
    /// The agent failed: `RUN_ERROR` with code `failed`.
    #[error("{0}")]
    Failed(String),
    /// The agent failed on an error of something it talks to (a model's or an upstream's
    /// stream that broke off, an event that does not parse): `RUN_ERROR` `failed`, saying what
    /// failed and quoting its source (the source stays attached for the logs).
    #[error("{what} ({source})")]
    FailedOn {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A read or record of the running turn failed for good (the database refused it, or was
    /// away longer than the turn waits): `RUN_ERROR` `failed`, saying what could not be done
    /// and nothing of the database's words; the source stays attached for the log, which
    /// names it with the turn's id.
    #[error("{what}")]
    Store {
        what: String,
        #[source]
        source: crate::store::StoreError,
    },
    /// Something the turn says could not be encoded (an event, a checkpoint, an interrupt):
    /// `RUN_ERROR` `failed`, naming what; the encoder's words go to the log only.
    #[error("{what} could not be encoded")]
    Encoding {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The tenant's token budget is spent (§8): `RUN_ERROR` `quota_exceeded` with the figures in
    /// `rawEvent.gateway`.
    #[error("{message}")]
    QuotaExceeded { message: String, figures: Value },
    /// The agent ran out of time (an upstream's deadline): `RUN_ERROR` with code `timed_out`.
    #[error("{0}")]
    TimedOut(String),
    /// Something the gateway stored itself does not read back (a checkpoint, a decision):
    /// `RUN_ERROR` with code `internal`; the cause is logged, the client sees only this.
    #[error("internal error: {0}")]
    Internal(String),
    /// One event exceeded `limits.max_event_bytes`: `RUN_ERROR` `failed`.
    #[error("an event of {size} bytes exceeds the {limit}-byte limit")]
    EventTooLarge { size: usize, limit: usize },
    /// The log could not be written; nothing more can be said on this turn.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl AgentError {
    /// What a client is told in the turn's `RUN_ERROR`: written for the client, never an
    /// internal error's text (the database's, the encoder's: those are the source, logged).
    pub fn client_message(&self) -> String {
        self.to_string()
    }

    /// The internal cause behind this failure, for the log: the database's or the encoder's
    /// error (with its chain), when the failure has one the client is not told.
    pub fn internal_cause(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AgentError::Store { source, .. } => Some(source),
            AgentError::Encoding { source, .. } => Some(source),
            _ => None,
        }
    }

    /// A name for the kind of failure, safe to log (it never holds message text).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentError::Cancelled => "cancelled",
            AgentError::Stopped => "stopped",
            AgentError::Waiting => "waiting",
            AgentError::Failed(_)
            | AgentError::FailedOn { .. }
            | AgentError::Store { .. }
            | AgentError::Encoding { .. } => "failed",
            AgentError::Internal(_) => "internal",
            AgentError::TimedOut(_) => "timed_out",
            AgentError::QuotaExceeded { .. } => "quota_exceeded",
            AgentError::EventTooLarge { .. } => "event_too_large",
            AgentError::Log(_) => "log",
        }
    }
}

/// What a finished agent reports for `RUN_FINISHED`.
#[derive(Debug, Default)]
pub struct AgentOutput {
    pub result: Option<Value>,
    pub usage: Option<Vec<TokenUsage>>,
}

/// Where a turn's agent stood when the turn started (a fresh turn starts at zero).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// The next script step to run.
    pub step: usize,
    /// Interrupts the step waits on; their decisions are read when the turn goes on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<String>,
    /// The last answer a person gave to a question (`{answer}` in later script steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The tool calls awaiting approval, in the order of `awaiting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// An LLM agent's conversation so far and its unfinished tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
    /// The delegation this step is in the middle of, and where its child stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<Box<ChildCheckpoint>>,
}
