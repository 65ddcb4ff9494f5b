//! Which turn a context runs: the turn's keys, its agent, who started it and whose tokens it
//! spends. Plain data, fixed for the context's life; the context's changing state stays in
//! [`super::context`].

use crate::ids::TenantId;
use crate::store::TurnRow;

#[derive(Debug, Clone)]
pub(super) struct TurnIdentity {
    /// The turn's row key, which every write of the turn names.
    pub(super) turn_pk: i64,
    pub(super) thread_pk: i64,
    /// The turn's public id: message ids and event ids are named after it.
    pub(super) turn_id: String,
    /// The agent the turn runs on (a delegated child's agent is its frame's, not this).
    pub(super) agent: String,
    /// The person who started the turn (the `person:` prefix dropped; empty for none).
    pub(super) started_by: String,
    /// The tenant the turn's tokens are charged to and budgeted by (never an empty one).
    pub(super) tenant: TenantId,
}

impl TurnIdentity {
    pub(super) fn of(turn: &TurnRow, tenant: TenantId) -> TurnIdentity {
        TurnIdentity {
            turn_pk: turn.pk,
            thread_pk: turn.thread,
            turn_id: turn.public_id.clone(),
            agent: turn.agent.clone(),
            started_by: turn.started_by.strip_prefix("person:").unwrap_or_default().to_string(),
            tenant,
        }
    }
}
