//! The engine's errors: [`EngineError`], what stops a request before its stream opens (each
//! variant documents its HTTP status), and [`StartError`], why an engine could not start.
//! Below every room, which all answer with them.

use super::plans::Refusal;
use crate::store::StoreError;

/// Errors that stop a request before its stream opens; each documents its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// 403 `permission_denied`: never says whether the thread exists.
    #[error("permission denied")]
    PermissionDenied,
    /// 400 `bad_last_event_id`.
    #[error("Last-Event-ID is not an event of this run: {0}")]
    BadLastEventId(String),
    /// 400 `bad_request`, naming the field.
    #[error("{field}: {message}")]
    BadRequest { field: &'static str, message: String },
    /// 400 `bad_request`: the run changes an editable state key to a value its schema refuses.
    #[error("state.{key}: {message}")]
    BadState { key: String, message: String },
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `not_running`.
    #[error("{0}")]
    NotRunning(String),
    /// 409 `turn_in_progress`: a turn of the thread runs or waits.
    #[error("{0}")]
    TurnInProgress(String),
    /// 403 `permission_denied`: only a person decides; the message names where they can.
    #[error("only a person can answer interrupts{0}")]
    PersonOnly(String),
    /// A decision refused by the checks of §5.3 (409 with the code; 403 for `not_a_decider`).
    #[error("{}", .0.message)]
    DecisionRefused(Refusal),
    /// 500 `internal`: logged, never shown.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// 500 `internal`: the wake-up bus failed (logged, never shown).
    #[error(transparent)]
    Bus(#[from] crate::bus::BusError),
    /// 500 `internal`: JSON the gateway wrote itself (a checkpoint, a decision, who decides)
    /// does not read back: the engine's fault to report, not the store's (logged, never shown).
    #[error("{what}")]
    Unreadable {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// 500 `internal`: an event the engine writes could not be encoded (logged, never shown).
    #[error("{what} could not be encoded")]
    Encoding {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Why an engine could not start: its database, or its wake-up bus.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bus(#[from] crate::bus::BusError),
}
