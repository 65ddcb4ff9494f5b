//! A connect stream: a thread watched across its turns, not one run (`POST …/connect`).
//!
//! It opens with the thread as it stands and then follows it: each turn of the thread, the one
//! running when the stream opened and every later one (whoever started it, on whichever
//! instance), is rendered as runs of its own — `RUN_STARTED` … `RUN_FINISHED`/`RUN_ERROR` —
//! from the turn's log, for this caller, exactly as a run following that turn renders it.
//!
//! Every event's id names a position in the log of the turn being streamed
//! (`<turn>.<seq>[.<part>]`), so a `Last-Event-ID` is resumed on any instance by reading the
//! log again — no replay window. What a position renders to depends only on the log before it
//! and on the caller, so the stream re-derives where it was (which run was open) from the log.
//!
//! The opening:
//! - the latest turn is still going (running, or waiting for a decision or tool results): the
//!   stream renders it from its start — `RUN_STARTED`, `MESSAGES_SNAPSHOT` (the conversation up
//!   to that turn's user message), the turn's `STATE_SNAPSHOT`, and the rest of its log live;
//! - the latest turn ended: one run of its own, `RUN_STARTED`, `MESSAGES_SNAPSHOT` (the whole
//!   conversation), `STATE_SNAPSHOT` (the board), `RUN_FINISHED`, named after the position just
//!   past that turn's sealed log (`<turn>.<last seq + 1>.<part>`, the last one without a part).
//!
//! A turn's log does not always read as one run: a wait the caller may answer ends the run
//! (`RUN_FINISHED` with the interrupt or the pending tool calls), and whatever the log says
//! next opens a new one (a decision renders as a resume run does; anything else is preceded
//! by a `RUN_STARTED` of the stream's own). A failed turn ends its run with its `RUN_ERROR`;
//! the next turn opens with a new `RUN_STARTED`, which AG-UI allows after `RUN_ERROR`.
//!
//! A stream that [ends caught up](ConnectRequest::ends_caught_up) (CopilotKit's connect) stops
//! once it has shown the thread as it stands: after the latest turn's end, or at a wait that
//! nothing in the log has followed yet. A wait the log has already gone past (a decision made,
//! the turn running again) is shown and followed on, so a page that reconnects while a decided
//! turn runs gets the rest of it, not the wait it already answered.
//!
//! New turns are noticed through the hub's thread watch (woken by a turn start here, or by
//! its announcement from another instance), backed by a slow timer in case an announcement was
//! lost; each look reads the thread's turns in order, so no turn is skipped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::{json, Value};

use super::hub::Hub;
use super::tail::{ends_run_for, name_part, render, state_for, tail, OpenStream, RenderError, StreamItem};
use crate::caller::Caller;
use crate::engine::conversation;
use crate::engine::errors::EngineError;
use crate::engine::interrupts::Viewer;
use crate::engine::plans::FollowPlan;
use crate::engine::shape::Engine;
use crate::ids::{EventId, TenantId, ThreadId};
use crate::metrics::Metrics;
use crate::protocol::events::Envelope;
use crate::protocol::{Event, RunOutcome, PROTOCOL_VERSION};
use crate::store::{EventKind, Store, StoredEvent, TurnRow};

/// How often a connect stream looks at its thread's turns when no start was announced, in case
/// an announcement from another instance was lost.
const THREAD_POLL: Duration = Duration::from_secs(10);

/// One connect request, after the HTTP layer validated its shape.
pub struct ConnectRequest<'a> {
    pub tenant: &'a TenantId,
    pub caller: &'a Caller,
    pub thread_id: &'a ThreadId,
    /// The runId the stream's runs carry (the request's, or one the gateway made up).
    pub run_id: &'a str,
    /// A client whose `protocolVersion` is absent or 0.x (the §5.4 interrupt shape).
    pub pre_1_0: bool,
    pub last_event_id: Option<&'a EventId>,
    /// End the stream once it has shown the thread as it stands (CopilotKit's connect), rather
    /// than following its later turns.
    pub ends_caught_up: bool,
}

/// What a connect stream renders, for whom, and where it starts.
#[derive(Debug, Clone)]
pub struct ConnectPlan {
    thread_id: String,
    thread_pk: i64,
    /// Where people decide (`gateway/console`), when configured.
    console: Option<String>,
    run_id: String,
    viewer: Viewer,
    resume: Option<EventId>,
    ends_caught_up: bool,
}

impl ConnectPlan {
    pub fn thread_pk(&self) -> i64 {
        self.thread_pk
    }

    pub fn thread_id(&self) -> &str {
        &self.thread_id
    }
}

impl Engine {
    /// Checks a connect request: the thread must exist with a turn and be readable by the
    /// caller — a thread that does not exist yet (it is not waited for: its first run creates
    /// it) is answered exactly as another person's, 403, never a hint that it exists (§8); a
    /// `Last-Event-ID` must name a position of one of its turns (400).
    pub async fn begin_connect(&self, request: ConnectRequest<'_>) -> Result<ConnectPlan, EngineError> {
        let store = &self.inner.store;
        let thread = store
            .find_thread(request.tenant.as_str(), request.thread_id.as_str())
            .await?
            .ok_or(EngineError::PermissionDenied)?;
        if !request.caller.may_read(&thread) {
            return Err(EngineError::PermissionDenied);
        }
        let turns = store.thread_turns(thread.pk).await?;
        if turns.is_empty() {
            return Err(EngineError::PermissionDenied);
        }
        if let Some(id) = request.last_event_id {
            let bad = || EngineError::BadLastEventId(id.to_string());
            let turn = turns.iter().find(|t| t.public_id == id.turn).ok_or_else(bad)?;
            let last = store.last_seq(turn.pk).await?;
            let past_sealed_log = id.seq == last + 1 && ended(store.as_ref(), turn.pk, last).await?;
            if id.seq > last && !past_sealed_log {
                return Err(bad());
            }
        }
        let viewer = Viewer::of(request.caller, request.pre_1_0);
        // A connect stream opens on the board: its reading is in the trail first (§8).
        self.audit_stream_board_read(request.caller, &thread, &viewer.clearance, None).await?;
        Ok(ConnectPlan {
            thread_id: request.thread_id.as_str().to_string(),
            thread_pk: thread.pk,
            console: self.console(),
            run_id: request.run_id.to_string(),
            viewer,
            resume: request.last_event_id.cloned(),
            ends_caught_up: request.ends_caught_up,
        })
    }

    /// The connect stream (see the module docs).
    pub fn connect_stream(&self, plan: ConnectPlan) -> impl Stream<Item = StreamItem> + Send + 'static {
        watch(self.inner.store.clone(), self.inner.hub.clone(), self.inner.metrics.clone(), plan)
    }
}

/// Whether the turn's log ended with a terminal event at `last` (it is sealed).
async fn ended(store: &dyn Store, turn: i64, last: i64) -> Result<bool, crate::store::StoreError> {
    if last < 1 {
        return Ok(false);
    }
    let events = store.events_after(turn, last - 1, 1).await?;
    Ok(events.first().is_some_and(|e| is_terminal(e.kind)))
}

fn is_terminal(kind: EventKind) -> bool {
    matches!(kind, EventKind::RunFinished | EventKind::RunError)
}

/// Where the stream goes on from: a turn, after `after_seq` (and `skip` parts of the next
/// event), or the opening of an ended turn (its first `skip` parts already sent).
enum Position {
    Turn {
        turn: TurnRow,
        after_seq: i64,
        skip: usize,
    },
    EndedOpening {
        turn: TurnRow,
        last_seq: i64,
        skip: usize,
    },
    /// Everything of the turn was sent: the next turn is next.
    After(TurnRow),
}

fn watch(
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    plan: ConnectPlan,
) -> impl Stream<Item = StreamItem> + Send + 'static {
    async_stream::stream! {
        let _open = OpenStream::new(metrics.clone());
        let thread_watch = hub.thread_watch(plan.thread_pk);
        let mut started = thread_watch.subscribe();
        macro_rules! or_close {
            ($result:expr) => {
                match $result {
                    Ok(value) => value,
                    Err(error) => {
                        // Ending the stream lets the client resume from its last id.
                        tracing::warn!(error = %error, thread = %plan.thread_id, "the connect stream failed; closing it");
                        return;
                    }
                }
            };
        }
        let turns = or_close!(store.thread_turns(plan.thread_pk).await);
        let mut position = match &plan.resume {
            None => {
                let Some(latest) = turns.last().cloned() else { return };
                let last = or_close!(store.last_seq(latest.pk).await);
                if or_close!(ended(store.as_ref(), latest.pk, last).await) {
                    Position::EndedOpening { turn: latest, last_seq: last, skip: 0 }
                } else {
                    Position::Turn { turn: latest, after_seq: 0, skip: 0 }
                }
            }
            Some(id) => {
                let Some(turn) = turns.iter().find(|t| t.public_id == id.turn).cloned() else { return };
                let last = or_close!(store.last_seq(turn.pk).await);
                if id.seq > last && id.part == 0 {
                    Position::After(turn)
                } else if id.seq > last {
                    Position::EndedOpening { turn, last_seq: last, skip: id.part as usize }
                } else if id.part == 0 && id.seq == last && or_close!(ended(store.as_ref(), turn.pk, last).await) {
                    Position::After(turn)
                } else if id.part == 0 {
                    Position::Turn { turn, after_seq: id.seq, skip: 0 }
                } else {
                    Position::Turn { turn, after_seq: id.seq - 1, skip: id.part as usize }
                }
            }
        };
        loop {
            // Stream the position's turn to its end; `done` is the turn streamed.
            let done = match position {
                Position::After(turn) => turn,
                Position::EndedOpening { turn, last_seq, skip } => {
                    let items = or_close!(ended_opening(&plan, store.as_ref(), &turn, last_seq).await);
                    metrics.events_streamed.inc_by(items.len() as u64);
                    for item in items.into_iter().skip(skip) {
                        yield item;
                    }
                    turn
                }
                Position::Turn { turn, after_seq, mut skip } => {
                    let mut run = TurnRun::new(&plan, &turn);
                    if after_seq > 0 {
                        // Which run was open at the client's position, from the log before it.
                        let earlier = or_close!(crate::engine::log::read_log(store.as_ref(), turn.pk).await);
                        for event in earlier.into_iter().take_while(|e| e.seq <= after_seq) {
                            or_close!(run.render(store.as_ref(), event).await);
                        }
                    }
                    let mut log = std::pin::pin!(tail(store.clone(), hub.clone(), metrics.clone(), turn.pk, after_seq));
                    let mut finished = false;
                    'turn: while let Some(batch) = log.next().await {
                        let batch = or_close!(batch);
                        // Timed as a run's stream times it (`stream_write_seconds`).
                        let had = std::time::Instant::now();
                        let mut batch = batch.into_iter().peekable();
                        while let Some(event) = batch.next() {
                            finished = is_terminal(event.kind);
                            let seq = event.seq;
                            let items = or_close!(run.render(store.as_ref(), event).await);
                            metrics.events_streamed.inc_by(items.len() as u64);
                            for item in items {
                                if skip > 0 {
                                    skip -= 1;
                                    continue;
                                }
                                yield item;
                            }
                            if finished {
                                metrics.stream_write_seconds.observe(had.elapsed().as_secs_f64());
                                break 'turn;
                            }
                            // A wait shown: caught up, unless the log already goes on past it
                            // (a decision made, the turn running again).
                            if plan.ends_caught_up && run.ended && batch.peek().is_none()
                                && or_close!(store.last_seq(turn.pk).await) <= seq
                            {
                                metrics.stream_write_seconds.observe(had.elapsed().as_secs_f64());
                                return;
                            }
                        }
                        metrics.stream_write_seconds.observe(had.elapsed().as_secs_f64());
                    }
                    if !finished {
                        // The log's tail ended without the turn's end: the engine is going.
                        return;
                    }
                    turn
                }
            };
            // Wait for the thread's next turn.
            loop {
                started.borrow_and_update();
                let turns = or_close!(store.thread_turns(plan.thread_pk).await);
                let next = turns.iter().skip_while(|t| t.pk != done.pk).nth(1).cloned();
                if let Some(next) = next {
                    position = Position::Turn { turn: next, after_seq: 0, skip: 0 };
                    break;
                }
                if plan.ends_caught_up {
                    // The latest turn was shown to its end: the thread as it stands.
                    return;
                }
                tokio::select! {
                    changed = started.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    _ = tokio::time::sleep(THREAD_POLL) => {}
                }
            }
        }
    }
}

/// One turn rendered as the runs of a connect stream: which run is open, and the plan the
/// run renderer is given.
struct TurnRun {
    plan: FollowPlan,
    open: bool,
    /// The last event rendered ended the run the stream showed (a wait, the turn's end).
    ended: bool,
}

impl TurnRun {
    fn new(connect: &ConnectPlan, turn: &TurnRow) -> TurnRun {
        let thread = (connect.thread_id.as_str(), connect.thread_pk);
        let plan = FollowPlan {
            // A decision opens a run only when one is rendered (see `render`).
            run_start_seq: NO_RESUME,
            // Each turn opens with the conversation, its first too: the stream shows the thread.
            snapshot_on_open: connect.viewer.clearance.content,
            ..FollowPlan::new(thread, &connect.run_id, turn, connect.viewer.clone(), connect.console.clone())
        };
        TurnRun { plan, open: false, ended: false }
    }

    /// The SSE events one logged event becomes on this stream, named with part ids.
    async fn render(&mut self, store: &dyn Store, event: StoredEvent) -> Result<Vec<StreamItem>, RenderError> {
        let seq = event.seq;
        let opens_itself = match event.kind {
            EventKind::RunStarted => true,
            EventKind::Resumed if !self.open => true,
            _ => false,
        };
        // A decision opens a run only when none is open (it renders as a resume run's start);
        // within an open run it is someone else's decision, shown as nothing.
        self.plan.run_start_seq = if event.kind == EventKind::Resumed && !self.open { seq - 1 } else { NO_RESUME };
        let ends = ends_run_for(&self.plan, &event);
        let at_ms = event.at_ms;
        let mut items = render(&self.plan, store, event).await?;
        if !self.open && !items.is_empty() && !opens_itself {
            items.insert(0, event_item(&self.plan.turn_id, seq, run_started(&self.plan), at_ms)?);
        }
        if !items.is_empty() {
            self.open = true;
        }
        self.ended = ends && !items.is_empty();
        if ends {
            self.open = false;
        }
        let parts = items.len();
        Ok(items.into_iter().enumerate().map(|(i, item)| name_part(item, &self.plan.turn_id, seq, i, parts)).collect())
    }
}

/// A `run_start_seq` no decision event follows.
const NO_RESUME: i64 = -2;

fn run_started(plan: &FollowPlan) -> Event {
    Event::RunStarted {
        thread_id: plan.thread_id.clone(),
        run_id: plan.run_id.clone(),
        protocol_version: Some(PROTOCOL_VERSION.to_string()),
        parent_run_id: None,
        input: None,
    }
}

fn event_item(turn: &str, seq: i64, event: Event, at_ms: i64) -> Result<StreamItem, RenderError> {
    let id = EventId { turn: turn.to_string(), seq, part: 0 }.to_string();
    Ok(StreamItem::rendered(id, Bytes::from(serde_json::to_vec(&Envelope::new(event, at_ms))?)))
}

/// The opening of a thread whose latest turn ended: the conversation and the state as that
/// turn left them, as one run, named after the position just past the turn's sealed log. Made
/// from the turn's log alone (stamped with its terminal event's time), so a reconnect renders
/// it again exactly.
async fn ended_opening(
    plan: &ConnectPlan,
    store: &dyn Store,
    turn: &TurnRow,
    last_seq: i64,
) -> Result<Vec<StreamItem>, RenderError> {
    let seq = last_seq + 1;
    let log = crate::engine::log::read_log(store, turn.pk).await?;
    let at_ms = log.last().map_or(0, |e| e.at_ms);
    let follow = TurnRun::new(plan, turn).plan;
    let mut items = vec![event_item(&turn.public_id, seq, run_started(&follow), at_ms)?];
    if plan.viewer.clearance.content {
        let turns = store.thread_turns(plan.thread_pk).await?;
        let messages = conversation::load_at_in(store, &turns, turn.pk, seq, conversation::Activity::Shown).await?;
        let branches = crate::engine::branches::branches_event(&turns, turn.pk, &messages);
        items.push(event_item(&turn.public_id, seq, Event::MessagesSnapshot { messages }, at_ms)?);
        if let Some(branches) = branches {
            items.push(event_item(&turn.public_id, seq, branches, at_ms)?);
        }
    }
    let state = Event::StateSnapshot { snapshot: state_at_end(&log), subagent_run_id: None };
    let body = Bytes::from(serde_json::to_vec(&Envelope::new(state, at_ms))?);
    let id = EventId { turn: turn.public_id.clone(), seq, part: 0 }.to_string();
    items.extend(state_for(&plan.viewer, id, &body)?);
    let finished = Event::RunFinished {
        thread_id: plan.thread_id.clone(),
        run_id: plan.run_id.clone(),
        result: None,
        outcome: Some(RunOutcome::Success { pending_tool_call_ids: vec![] }),
        usage: None,
    };
    items.push(event_item(&turn.public_id, seq, finished, at_ms)?);
    let parts = items.len();
    Ok(items.into_iter().enumerate().map(|(i, item)| name_part(item, &turn.public_id, seq, i, parts)).collect())
}

/// The state (board and editable keys) as a turn's log leaves it: its last `STATE_SNAPSHOT`
/// with the `STATE_DELTA`s after it applied. A delta that does not apply is skipped, as the
/// official client skips it.
fn state_at_end(log: &[StoredEvent]) -> Value {
    let mut state = json!({});
    for stored in log {
        let is_delta = stored.kind == EventKind::Plain
            && matches!(
                crate::engine::log::events::classify_plain(&stored.body),
                crate::engine::log::events::PlainEvent::StateDelta
            );
        if stored.kind != EventKind::StateSnapshot && !is_delta {
            continue;
        }
        let Ok(envelope) = serde_json::from_slice::<Envelope>(&stored.body) else { continue };
        match envelope.event {
            Event::StateSnapshot { snapshot, .. } => state = snapshot,
            Event::StateDelta { delta, .. } => {
                if let Ok(patch) = serde_json::to_value(&delta).and_then(serde_json::from_value::<json_patch::Patch>) {
                    let mut patched = state.clone();
                    if json_patch::patch(&mut patched, &patch).is_ok() {
                        state = patched;
                    }
                }
            }
            _ => {}
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: i64, kind: EventKind, event: Value) -> StoredEvent {
        StoredEvent { seq, kind, body: Bytes::from(event.to_string()), at_ms: 0 }
    }

    #[test]
    fn the_state_a_turn_leaves_is_its_snapshot_with_the_deltas_after_it() {
        let log = vec![
            stored(
                1,
                EventKind::StateSnapshot,
                json!({"type": "STATE_SNAPSHOT", "snapshot": {"board": {"notes": []}}}),
            ),
            stored(
                2,
                EventKind::Plain,
                json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/board/notes/-", "value": {"text": "a"}}]}),
            ),
            // A delta that does not apply is skipped, as the official client skips it.
            stored(3, EventKind::Plain, json!({"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/nope"}]})),
        ];
        assert_eq!(state_at_end(&log), json!({"board": {"notes": [{"text": "a"}]}}));
        assert_eq!(state_at_end(&[]), json!({}));
    }
}
