//! Interrupts' rows and their decisions: the vocabulary of [`crate::store::InterruptStore`].

use crate::store::error::StoreError;
/// Where an interrupt is in its life (§5.1). Only `Open` interrupts can be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptStatus {
    Open,
    /// A person decided it (approved, denied, answered or cancelled).
    Decided,
    /// Its time ran out: the gateway denied it.
    Expired,
    /// The call it asked about changed since it was shown.
    Superseded,
    /// Nobody decided it: its turn was cancelled while it waited (its thread being erased).
    Withdrawn,
}

impl InterruptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptStatus::Open => "open",
            InterruptStatus::Decided => "decided",
            InterruptStatus::Expired => "expired",
            InterruptStatus::Superseded => "superseded",
            InterruptStatus::Withdrawn => "withdrawn",
        }
    }

    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "open" => InterruptStatus::Open,
            "decided" => InterruptStatus::Decided,
            "expired" => InterruptStatus::Expired,
            "superseded" => InterruptStatus::Superseded,
            "withdrawn" => InterruptStatus::Withdrawn,
            other => return Err(StoreError::Corrupt(format!("interrupt status '{other}'"))),
        })
    }
}

/// An interrupt as stored (§5.1).
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRow {
    pub id: String,
    pub thread: i64,
    pub turn: i64,
    /// The AG-UI `Interrupt` shown to clients, as JSON.
    pub shown: String,
    /// `{"persons": [...], "roles": [...]}`; both empty: the person who started the turn.
    pub deciders: String,
    pub four_eyes: bool,
    pub started_by: String,
    pub expires_at_ms: i64,
    pub status: InterruptStatus,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub decided_seq: Option<i64>,
    pub created_at_ms: i64,
    /// What the interrupt asked under the policy of its time, digested (`InterruptSpec::
    /// policy_digest`): a decision after a long wait compares it with what would be asked now.
    /// Empty: never re-checked.
    pub policy_digest: String,
}

/// One decision of a resume, the decision route or the expiry sweeper.
#[derive(Debug, Clone)]
pub struct Decision {
    pub interrupt_id: String,
    /// [`InterruptStatus::Decided`] or [`InterruptStatus::Expired`].
    pub status: InterruptStatus,
    /// What was decided, as JSON (`{"approved", "comment", "editedArgs", "answer"}`).
    pub decision: String,
    pub decided_by: String,
    pub decided_via: String,
}

/// What [`InterruptStore::decide_interrupts`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// All decisions recorded; the decision event is at `seq`; `resumed` (with the turn's new
    /// ownership epoch) when nothing of the turn is open any more and it was handed to the
    /// deciding instance to run on; `run_recorded` when the run id given was recorded with them.
    Recorded { seq: i64, resumed: Option<i64>, run_recorded: bool },
    /// One of them was decided by someone else first: nothing was recorded.
    AlreadyDecided,
}
