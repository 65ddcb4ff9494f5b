//! Where every run that streams ends: [`Engine::follow`] turns a turn and a position into the
//! run's [`FollowPlan`], and [`Engine::record_run_and_follow`] records a run against an
//! existing turn first (a decision's run, one that brought client tool results, when the
//! decision did not record it). Planning and deciding both end here; nothing here calls back
//! into them.
//!
//! A plan carries what its request read, so that nothing is read twice on the way to the
//! run's first event: the thread's turns when they were read, the event a reconnect's
//! `Last-Event-ID` names, the decision event a resume wrote (see [`FollowPlan`]).

use std::sync::Arc;

use serde_json::Value;

use crate::engine::errors::EngineError;
use crate::engine::interrupts::Viewer;
use crate::engine::plans::{FollowPlan, Refusal, RunPlan, RunRequest};
use crate::engine::shape::Engine;
use crate::protocol::ErrorCode;
use crate::store::{NewRun, StoreError, StoredEvent, ThreadRow, TurnRow};

/// A run to follow: its turn, where it begins, and what its request read or wrote for it.
pub(super) struct Following<'a> {
    pub thread: &'a ThreadRow,
    pub turn: &'a TurnRow,
    /// Where in the turn's log the run begins: 0, or just before the decision it resumed with.
    pub start_seq: i64,
    /// This run's answers to its resume entries, when it resumed.
    pub resume_outcomes: Option<Vec<Value>>,
    pub board_read: BoardRead,
    /// The thread's turns, when the request read them.
    pub turns: Option<Vec<TurnRow>>,
    /// The event the run opens with, when the request wrote it (a decision).
    pub opening: Option<StoredEvent>,
}

impl<'a> Following<'a> {
    /// A run of `turn` from `start_seq` whose request read nothing it could pass on and wrote
    /// no `board.read` row yet.
    pub(super) fn of(thread: &'a ThreadRow, turn: &'a TurnRow, start_seq: i64) -> Following<'a> {
        Following {
            thread,
            turn,
            start_seq,
            resume_outcomes: None,
            board_read: BoardRead::Due(None),
            turns: None,
            opening: None,
        }
    }
}

/// Whether the `board.read` audit row (§8) of a run's stream is written when its plan is made:
/// every stream that opens on notes' text is in the trail before it shows them.
pub(super) enum BoardRead {
    /// Written already, in the transaction of what the run recorded (a new turn, a decision).
    Written,
    /// To write before the stream opens, from the thread's notes when the request read them.
    Due(Option<Vec<String>>),
}

impl Engine {
    /// Records `run_key` as a run following the turn from `following.start_seq` (a decision's
    /// run, or one that brought client tool results), then follows the run the key names: the
    /// same one when the key was already recorded, so sending the request again replays it.
    pub(super) async fn record_run_and_follow(
        &self,
        request: &RunRequest<'_>,
        run_key: &str,
        following: Following<'_>,
    ) -> Result<RunPlan, EngineError> {
        let store = &self.inner.store;
        let (thread, turn) = (following.thread, following.turn);
        // An erase of the thread may meet the run's record: PostgreSQL breaks the deadlock
        // between the two (tried again: the erase then goes first), and a record of a run on
        // rows the erase took away is refused. The thread is unknown then, and the run is
        // answered as for any unknown thread (§10).
        let mut tries = 0;
        let recorded = loop {
            let run = NewRun {
                thread: thread.pk,
                run_id: run_key,
                turn: turn.pk,
                start_seq: following.start_seq,
                at_ms: self.now_ms(),
            };
            match store.add_run(&run).await {
                Ok(recorded) => break recorded,
                Err(error) if error.is_transient() && tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(error) if error.is_refused_by_database() => {
                    if store.thread_by_pk(thread.pk).await?.is_none() {
                        return Err(EngineError::PermissionDenied);
                    }
                    return Err(error.into());
                }
                Err(error) => return Err(error.into()),
            }
        };
        // The key may have been recorded before (from elsewhere in the log, or for another
        // turn): the run it names is followed.
        let (pk, start_seq) = recorded;
        if pk == turn.pk {
            let opening = following.opening.filter(|_| start_seq == following.start_seq);
            return self.follow(request, Following { start_seq, opening, ..following }).await;
        }
        match store.find_run(thread.pk, run_key).await? {
            Some((turn, start_seq)) => {
                let following = Following { turn: &turn, start_seq, opening: None, ..following };
                self.follow(request, following).await
            }
            None => Err(StoreError::Corrupt(format!("the run '{run_key}' was not recorded")).into()),
        }
    }

    /// A run that follows `following.turn` from its start, after the client's `Last-Event-ID`
    /// when it sent one (which must be an event of this run: at or after its start); its
    /// stream's `board.read` row written first when it is still due.
    pub(super) async fn follow(
        &self,
        request: &RunRequest<'_>,
        following: Following<'_>,
    ) -> Result<RunPlan, EngineError> {
        let Following { thread, turn, start_seq, resume_outcomes, board_read, turns, opening } = following;
        let (after_seq, skip_parts, at_position) = self.position(request, turn, start_seq).await?;
        let viewer = viewer_of(request);
        if let BoardRead::Due(notes) = board_read {
            self.audit_stream_board_read(request.caller, thread, &viewer.clearance, notes).await?;
        }
        let thread = (request.thread_id.as_str(), thread.pk);
        Ok(RunPlan::Follow(FollowPlan {
            run_start_seq: start_seq,
            after_seq,
            skip_parts,
            resume_outcomes,
            turns: turns.map(Arc::from),
            at_position,
            opening,
            ..FollowPlan::new(thread, request.run_id.as_str(), turn, viewer, self.console())
        }))
    }

    /// Where a run of `turn` beginning at `start_seq` streams from: after its start, or after
    /// the client's `Last-Event-ID` (and the parts of the next event it names), which must be
    /// an event of this run. With an id, the first event at or after that position too, read
    /// with the check: the stream needs it to know whether the run already ended there.
    async fn position(
        &self,
        request: &RunRequest<'_>,
        turn: &TurnRow,
        start_seq: i64,
    ) -> Result<(i64, u32, Option<StoredEvent>), EngineError> {
        let Some(id) = request.last_event_id else { return Ok((start_seq, 0, None)) };
        let bad = || EngineError::BadLastEventId(id.to_string());
        if id.turn != turn.public_id || id.seq <= start_seq {
            return Err(bad());
        }
        let (after_seq, skip_parts) = match id.part {
            0 => (id.seq, 0),
            part => (id.seq - 1, part),
        };
        // The events from the position on: the id names one of them when the log reaches it
        // (its seq is no later than the last).
        let events = self.inner.store.events_after(turn.pk, after_seq - 1, 2).await?;
        if !events.iter().any(|e| e.seq >= id.seq) {
            return Err(bad());
        }
        let at_position = events.into_iter().next().filter(|_| after_seq > start_seq);
        Ok((after_seq, skip_parts, at_position))
    }

    /// Where people decide (`gateway/console`): `console_url`, else the gateway's own console
    /// while it is served; none when neither.
    pub(in crate::engine) fn console(&self) -> Option<String> {
        self.inner.config.console_link_base()
    }
}

/// Who a run's stream is rendered for.
pub(super) fn viewer_of(request: &RunRequest<'_>) -> Viewer {
    Viewer::of(request.caller, request.input.is_pre_1_0_client())
}

pub(super) fn refuse(code: ErrorCode, message: &str) -> RunPlan {
    RunPlan::Refused(Refusal { code, message: message.to_string(), figures: None })
}
