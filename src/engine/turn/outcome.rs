//! How an agent's answer to a turn ends: [`AgentOutput`] when it finished, or an
//! [`AgentError`] saying how the run ends instead. Below the context and the `Agent` trait,
//! which both speak it.

use serde_json::Value;

use crate::engine::log::LogError;
use crate::protocol::TokenUsage;

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
