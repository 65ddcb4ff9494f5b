//! Audit rows the engine writes (§8): who read notes' text on the board, who started a turn,
//! and one row per decision. They commit with what they record, so nothing stands unaudited.

use serde_json::{json, Value};

use super::board;
use super::plans::RunRequest;
use super::shape::Engine;
use crate::caller::Caller;
use crate::store::{AuditEntry, StoreError, ThreadRow, TurnRow};

impl Engine {
    /// The `run.start` audit row (§8): who started the turn, through which door.
    pub(super) fn run_start_entry(request: &RunRequest<'_>, turn_id: &str, at_ms: i64) -> AuditEntry {
        AuditEntry {
            tenant: request.tenant.to_string(),
            action: "run.start".into(),
            actor: request.caller.label(),
            via: request.caller.via().map(str::to_string),
            detail: json!({
                "thread": request.thread_id.as_str(),
                "turn": turn_id,
                "agent": request.agent,
                "via": request.caller.via().unwrap_or("direct"),
                "door": "agui",
            })
            .to_string(),
            at_ms,
        }
    }

    /// The `board.read` audit row (§8) of a caller shown the text of any note; `None` when it
    /// is shown none.
    pub(super) fn board_read_entry(
        caller: &Caller,
        tenant: &str,
        thread_id: &str,
        clearance: &board::Clearance,
        board: &[Value],
        at_ms: i64,
    ) -> Option<AuditEntry> {
        if !clearance.reads_text(board) {
            return None;
        }
        let shown: Vec<&Value> = board.iter().filter(|n| clearance.reads(n)).map(|n| &n["id"]).collect();
        Some(AuditEntry {
            tenant: tenant.to_string(),
            action: "board.read".into(),
            actor: caller.label(),
            via: caller.via().map(str::to_string),
            detail: json!({ "thread": thread_id, "notes": shown }).to_string(),
            at_ms,
        })
    }

    /// Writes the `board.read` audit row of a caller about to be shown notes' text. It must be
    /// in the trail before the notes are sent: when it cannot be written, the read fails.
    pub async fn audit_board_read(
        &self,
        caller: &Caller,
        thread: &ThreadRow,
        clearance: &board::Clearance,
        board: &[Value],
    ) -> Result<(), StoreError> {
        match Engine::board_read_entry(caller, &thread.tenant, &thread.thread_id, clearance, board, self.now_ms()) {
            Some(entry) => self.inner.store.append_audit(&entry).await,
            None => Ok(()),
        }
    }

    /// The `board.read` row of a stream about to open on `thread` for `caller`, when the board
    /// holds a note whose text it may read; from the thread's `notes` when the request read them
    /// already (a caller who may read no content reads no note's text: nothing is read then).
    pub(super) async fn audit_stream_board_read(
        &self,
        caller: &Caller,
        thread: &ThreadRow,
        clearance: &board::Clearance,
        notes: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        if !clearance.content {
            return Ok(());
        }
        let notes = match notes {
            Some(notes) => notes,
            None => self.inner.store.notes(thread.pk).await?,
        };
        self.audit_board_read(caller, thread, clearance, &board::from_stored(&notes)).await
    }

    /// One audit row per decision (§5.3.7): the person's (or the gateway's, for an expiry),
    /// with `via`, in the turn's tenant. They commit with the decisions, so no decision stands
    /// unrecorded.
    pub(super) fn decision_audit(
        &self,
        tenant: &str,
        turn: &TurnRow,
        actor: &str,
        via: Option<&str>,
        action: &str,
        outcomes: &[&Value],
    ) -> Vec<AuditEntry> {
        let at_ms = self.now_ms();
        outcomes
            .iter()
            .map(|outcome| AuditEntry {
                tenant: tenant.to_string(),
                action: action.to_string(),
                actor: actor.to_string(),
                via: via.map(str::to_string),
                detail: json!({ "turn": turn.public_id, "decision": outcome }).to_string(),
                at_ms,
            })
            .collect()
    }
}
