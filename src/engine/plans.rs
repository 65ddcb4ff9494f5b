//! What a run request is and what it is answered with: the [`RunRequest`] the HTTP layer
//! validated, and the [`RunPlan`] it follows (a turn's log from a position on, a
//! [`FollowPlan`], or a [`Refusal`]). Below the rooms that make plans (`request`, the connect
//! stream) and the one that streams them (`stream::tail`).

use std::sync::Arc;

use serde_json::Value;

use super::interrupts::Viewer;
use crate::caller::Caller;
use crate::ids::{EventId, RunId, TenantId, ThreadId};
use crate::protocol::{ErrorCode, RunAgentInput};
use crate::store::{StoredEvent, TurnRow};

/// Why a run is refused after the request was accepted: a lone `RUN_ERROR` with this code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    /// `rawEvent.gateway` of the `RUN_ERROR`: a limit's `{scope, limit, used, resetsAt}`.
    pub figures: Option<Value>,
}

/// What a run streams: a turn's log from a position on, or a refusal (one per request: no box).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum RunPlan {
    Follow(FollowPlan),
    Refused(Refusal),
}

#[derive(Debug, Clone)]
pub struct FollowPlan {
    pub thread_id: String,
    pub thread_pk: i64,
    pub run_id: String,
    pub turn_pk: i64,
    pub turn_id: String,
    /// Where in the turn's log this run begins: 0, or just before the decision it resumed with.
    pub run_start_seq: i64,
    /// Stream the events after this sequence number.
    pub after_seq: i64,
    /// SSE events of the event at `after_seq + 1` the client already has (a part id).
    pub skip_parts: u32,
    /// Who the stream is rendered for.
    pub viewer: Viewer,
    /// Whether the run restates the conversation (`MESSAGES_SNAPSHOT`) right after its
    /// `RUN_STARTED`: when the thread had turns before this one (or on a connect stream) and
    /// the caller may read content.
    pub snapshot_on_open: bool,
    /// This run's answers to its resume entries (`CUSTOM gateway.resume`), when it resumed.
    pub resume_outcomes: Option<Vec<Value>>,
    /// Where people decide (`gateway/console`, `console_url`), when one is configured.
    pub console: Option<String>,
    /// What the plan read or wrote that the stream needs, not to read it again (`None`: it reads
    /// it). The thread's turns, the run's own among them, for the conversation the run restates
    /// when it opens (they hold: a thread takes one turn at a time).
    pub turns: Option<Arc<[TurnRow]>>,
    /// The first event at or after `after_seq` when that is past the run's start, as a
    /// reconnect read it to check its `Last-Event-ID`: whether the run already ended there.
    pub at_position: Option<StoredEvent>,
    /// The event the run opens with, when the plan wrote it itself (a resume's decision).
    pub opening: Option<StoredEvent>,
}

impl FollowPlan {
    /// A run following `turn` of `thread` (its id and key) from the turn's start for `viewer`,
    /// restating the conversation when the thread had turns before and the viewer may read
    /// content. What differs (a later start, a connect stream, rows read) each caller sets.
    pub(crate) fn new(
        thread: (&str, i64),
        run_id: &str,
        turn: &TurnRow,
        viewer: Viewer,
        console: Option<String>,
    ) -> FollowPlan {
        FollowPlan {
            thread_id: thread.0.to_string(),
            thread_pk: thread.1,
            run_id: run_id.to_string(),
            turn_pk: turn.pk,
            turn_id: turn.public_id.clone(),
            run_start_seq: 0,
            after_seq: 0,
            skip_parts: 0,
            snapshot_on_open: turn.ordinal > 1 && viewer.clearance.content,
            viewer,
            resume_outcomes: None,
            console,
            turns: None,
            at_position: None,
            opening: None,
        }
    }
}

/// One run request, after the HTTP layer validated its shape.
pub struct RunRequest<'a> {
    pub tenant: &'a TenantId,
    pub caller: &'a Caller,
    pub agent: &'a str,
    pub thread_id: &'a ThreadId,
    pub run_id: &'a RunId,
    pub input: &'a RunAgentInput,
    pub last_event_id: Option<&'a EventId>,
    /// The agent's editable keys in the run's `state`, as the client sent them: the engine
    /// takes those it changed, checked against their schemas (written when the run starts a
    /// turn; an echo of what the thread holds is no edit).
    pub state_writes: serde_json::Map<String, Value>,
}
