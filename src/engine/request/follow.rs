//! Where every run that streams ends: [`Engine::follow`] turns a turn and a position into the
//! run's [`FollowPlan`], and [`Engine::record_run_and_follow`] records a run against an
//! existing turn first (a decision's run, one that brought client tool results). Planning and
//! deciding both end here; nothing here calls back into them.

use serde_json::Value;

use crate::engine::interrupts::Viewer;
use crate::engine::{board, Engine, EngineError, ErrorCode, FollowPlan, Refusal, RunPlan, RunRequest};
use crate::store::{StoreError, ThreadRow, TurnRow};

impl Engine {
    /// Records `run_key` as a run following `turn` from `start_seq` (a decision's run, or one
    /// that brought client tool results), then follows the run the key names: the same one
    /// when the key was already recorded, so sending the request again replays it.
    pub(in crate::engine) async fn record_run_and_follow(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        run_key: &str,
        turn: i64,
        start_seq: i64,
        resume_outcomes: Option<Vec<Value>>,
    ) -> Result<RunPlan, EngineError> {
        let store = &self.inner.store;
        // An erase of the thread may meet the run's record: PostgreSQL breaks the deadlock
        // between the two (tried again: the erase then goes first), and a record of a run on
        // rows the erase took away is refused. The thread is unknown then, and the run is
        // answered as for any unknown thread (§10).
        let mut tries = 0;
        let started = loop {
            match store.add_run(thread.pk, run_key, turn, start_seq, self.now_ms()).await {
                Ok(started) => break started,
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
        match store.find_run(thread.pk, run_key).await? {
            Some((turn, start_seq)) if turn.pk == started => {
                self.follow(request, thread, &turn, start_seq, resume_outcomes).await
            }
            _ => Err(StoreError::Corrupt(format!("the run '{run_key}' was not recorded")).into()),
        }
    }

    /// A run that follows `turn` from `start_seq`, after the client's `Last-Event-ID` when it
    /// sent one (which must be an event of this run: at or after its start).
    pub(in crate::engine) async fn follow(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        turn: &TurnRow,
        start_seq: i64,
        resume_outcomes: Option<Vec<Value>>,
    ) -> Result<RunPlan, EngineError> {
        let (after_seq, skip_parts) = match request.last_event_id {
            None => (start_seq, 0),
            Some(id) => {
                let last = self.inner.store.last_seq(turn.pk).await?;
                if id.turn != turn.public_id || id.seq > last || id.seq <= start_seq {
                    return Err(EngineError::BadLastEventId(id.to_string()));
                }
                match id.part {
                    0 => (id.seq, 0),
                    part => (id.seq - 1, part),
                }
            }
        };
        Ok(RunPlan::Follow(FollowPlan {
            thread_id: request.thread_id.as_str().to_string(),
            thread_pk: thread.pk,
            run_id: request.run_id.as_str().to_string(),
            turn_pk: turn.pk,
            turn_id: turn.public_id.clone(),
            run_start_seq: start_seq,
            after_seq,
            skip_parts,
            snapshot_on_open: turn.ordinal > 1 && viewer_of(request).clearance.content,
            viewer: viewer_of(request),
            resume_outcomes,
            board_read_audited: false,
            console: self.console(),
        }))
    }

    /// Where people decide (`gateway/console`): `console_url`, else the gateway's own console
    /// while it is served; none when neither.
    pub(in crate::engine) fn console(&self) -> Option<String> {
        self.inner.config.console_link_base()
    }
}

/// Who a run's stream is rendered for.
pub(super) fn viewer_of(request: &RunRequest<'_>) -> Viewer {
    Viewer {
        person: request.caller.person_id().map(str::to_string),
        roles: request.caller.roles().to_vec(),
        pre_1_0: request.input.is_pre_1_0_client(),
        clearance: board::Clearance::of(request.caller),
    }
}

pub(super) fn refuse(code: ErrorCode, message: &str) -> RunPlan {
    RunPlan::Refused(Refusal { code, message: message.to_string(), figures: None })
}
