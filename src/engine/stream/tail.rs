//! A run's stream: the turn's log rendered from a position on, live until its terminal event.
//!
//! [`tail`] is the one way a stream reads a turn's log, a run's ([`follow`], which
//! `Engine::stream` opens) and a connect stream's alike: catch-up reads come from the log table
//! in pages; live events come from the turn's feed in memory: filled by this instance's writer
//! when it runs the turn, else, once this instance follows the turn (`followers.rs`), from the
//! runner's notices.
//! The engine's streams carry events only: how long a stream lives, its keepalives, and what
//! ends it early (shutdown, revocation) are the transport's (`http/sse.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use serde_json::{json, Value};

use super::hub::{Hub, Next};
use super::pages::{LogPages, PAGE};
use crate::engine::branches::branches_event;
use crate::engine::conversation;
use crate::engine::interrupts::{Viewer, Waiting};
use crate::engine::log::events::{
    self as log_events, ClientWaitEvent, PlainEvent, ResumedEvent, WaitingEvent, ON_INTERRUPT, RESUME_OUTCOME,
    WAITING_FOR_OTHERS,
};
use crate::engine::plans::FollowPlan;
use crate::engine::shape::Engine;
use crate::ids::EventId;
use crate::metrics::Metrics;
use crate::protocol::events::Envelope;
use crate::protocol::{Event, RunOutcome, PROTOCOL_VERSION};
use crate::store::{EventKind, Store, StoreError, StoredEvent, TurnRow};

/// How often a stream re-reads the table of a turn another instance runs, in case a wake-up
/// notification was lost.
pub(super) const REMOTE_POLL: Duration = Duration::from_secs(2);

/// What the transport sends: one rendered event, its id and its JSON (one line).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamItem {
    pub id: String,
    pub json: Bytes,
    /// `json` is the logged event as it is, the same for every caller (not rendered for this
    /// one): the transport may share its frame between the streams that send it.
    pub as_logged: bool,
}

impl StreamItem {
    /// An event rendered for this stream's caller.
    pub fn rendered(id: String, json: Bytes) -> StreamItem {
        StreamItem { id, json, as_logged: false }
    }

    /// The logged event as it is.
    fn logged(id: String, json: Bytes) -> StreamItem {
        StreamItem { id, json, as_logged: true }
    }
}

/// The turn's log after `after`, as it is committed: every event once and in order, a batch at
/// a time (what one commit or one page of the table holds, the next page read while this one
/// is sent: [`LogPages`]), for as long as it is read. It ends only when a read fails (the error
/// is its last item) or the hub goes; a reader stops at the event that ends what it shows.
pub(super) fn tail(
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    turn: i64,
    after: i64,
) -> impl Stream<Item = Result<Vec<StoredEvent>, StoreError>> + Send + 'static {
    async_stream::stream! {
        let feed = hub.feed(turn);
        let mut wake = feed.subscribe();
        let mut cursor = after;
        let mut pages = LogPages::new(store.clone(), turn);
        loop {
            wake.borrow_and_update();
            let batch = match feed.next_after(cursor, PAGE as usize) {
                Next::Events(events) => events,
                // Memory holds every committed event this instance knows of: caught up.
                Next::Wait => Vec::new(),
                Next::ReadLog => match pages.after(cursor).await {
                    Ok(events) => {
                        // Caught up with a turn another instance runs (the page was short:
                        // it held the log to its end): from now on this instance follows it,
                        // once for all its streams here. Asked at the first short page, not
                        // at an empty one: a stream chasing a busy turn's tail might read a
                        // few new events each time for as long as it ran.
                        if pages.reached_end() && !feed.is_local() {
                            hub.follow(turn, &feed, events.last().map_or(cursor, |e| e.seq));
                        }
                        events
                    }
                    Err(error) => {
                        yield Err(error);
                        return;
                    }
                },
            };
            if let Some(last) = batch.last() {
                cursor = last.seq;
                yield Ok(batch);
                continue;
            }
            tokio::select! {
                changed = wake.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if let Some(published) = feed.published_at() {
                        metrics.stream_wakeup_seconds.observe(published.elapsed().as_secs_f64());
                    }
                }
                // Not followed (yet, or on a store without other instances): the table is
                // read again now and then, in case a wake-up was missed.
                _ = tokio::time::sleep(REMOTE_POLL), if !feed.is_local() && !feed.is_followed() => {}
            }
        }
    }
}

impl Engine {
    /// The run's events as a stream (see [`follow`]).
    pub fn stream(&self, plan: FollowPlan) -> impl Stream<Item = StreamItem> + Send + 'static {
        follow(
            self.inner.store.clone(),
            self.inner.clock.clone(),
            self.inner.hub.clone(),
            self.inner.metrics.clone(),
            plan,
        )
    }
}

/// The run's events for its caller, from the plan's position to the event that ends the run.
pub fn follow(
    store: Arc<dyn Store>,
    clock: Arc<dyn crate::clock::Clock>,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    plan: FollowPlan,
) -> impl Stream<Item = StreamItem> + Send + 'static {
    async_stream::stream! {
        let _open = OpenStream::new(metrics.clone());
        let mut cursor = plan.after_seq;
        // Parts of the first event the client already has (its Last-Event-ID named a part).
        let mut skip = plan.skip_parts as usize;
        if cursor > plan.run_start_seq {
            // Resuming after the event that ended this run: there is nothing to send. (A
            // reconnect's plan read that event already, checking its Last-Event-ID.)
            let at = match plan.at_position.clone() {
                Some(event) => Ok(vec![event]),
                None => store.events_after(plan.turn_pk, cursor - 1, 1).await,
            };
            match at {
                Ok(events) if events.first().is_some_and(|e| ends_run_for(&plan, e)) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, turn = %plan.turn_id, "reading the event log failed; closing the stream");
                    return;
                }
            }
        }
        // The event the plan wrote itself (a resume's decision) is rendered as it was recorded,
        // not read back; the log is tailed after it.
        let opening: Vec<StoredEvent> = plan.opening.clone().filter(|e| e.seq == cursor + 1).into_iter().collect();
        let from = opening.last().map_or(cursor, |e| e.seq);
        let opening = futures_util::stream::iter((!opening.is_empty()).then_some(Ok(opening)));
        let mut log = std::pin::pin!(opening.chain(tail(store.clone(), hub, metrics.clone(), plan.turn_pk, from)));
        while let Some(batch) = log.next().await {
            let batch = match batch {
                Ok(batch) => batch,
                Err(error) => {
                    // Ending the stream lets the client resume from its last id.
                    tracing::warn!(%error, turn = %plan.turn_id, "reading the event log failed; closing the stream");
                    return;
                }
            };
            // The stream task has these events: the rest of their way is rendering them and
            // the response body taking their frames (it asks for the next only once it took
            // the last), timed once per batch.
            let had = std::time::Instant::now();
            for event in batch {
                cursor = event.seq;
                let ends = ends_run_for(&plan, &event);
                let appended_at = event.at_ms;
                match render(&plan, store.as_ref(), event).await {
                    Ok(items) => {
                        metrics.events_streamed.inc_by(items.len() as u64);
                        let lag_ms = (clock.now_ms() - appended_at).max(0);
                        metrics.stream_lag_seconds.observe(lag_ms as f64 / 1000.0);
                        let parts = items.len();
                        for (index, item) in items.into_iter().enumerate() {
                            if skip > 0 {
                                skip -= 1;
                                continue;
                            }
                            yield name_part(item, &plan.turn_id, cursor, index, parts);
                        }
                    }
                    Err(error) => {
                        tracing::error!(%error, turn = %plan.turn_id, seq = cursor, "a logged event cannot be rendered");
                        return;
                    }
                }
                if ends {
                    metrics.stream_write_seconds.observe(had.elapsed().as_secs_f64());
                    return;
                }
            }
            metrics.stream_write_seconds.observe(had.elapsed().as_secs_f64());
        }
    }
}

/// Every SSE event rendered from one logged event but the last gets a part id (see
/// [`EventId::part`]); the last carries the event's own id.
pub(super) fn name_part(item: StreamItem, turn: &str, seq: i64, index: usize, parts: usize) -> StreamItem {
    if index + 1 < parts {
        let part = u32::try_from(index + 1).unwrap_or(u32::MAX);
        return StreamItem { id: EventId { turn: turn.to_string(), seq, part }.to_string(), ..item };
    }
    item
}

/// Counts a stream as open for as long as it lives.
pub(super) struct OpenStream(Arc<Metrics>);

impl OpenStream {
    pub(super) fn new(metrics: Arc<Metrics>) -> OpenStream {
        metrics.streams_open.inc();
        OpenStream(metrics)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.streams_open.dec();
    }
}

/// Whether the run ends at this event for its caller: a terminal event, or a wait on
/// interrupts the caller may decide (every interrupt, for an API key).
pub(super) fn ends_run_for(plan: &FollowPlan, event: &StoredEvent) -> bool {
    match event.kind {
        EventKind::RunFinished | EventKind::RunError | EventKind::ClientWait => true,
        EventKind::Waiting => waiting_of(event).is_some_and(|w| !split_for(&plan.viewer, &w).0.is_empty()),
        _ => false,
    }
}

fn waiting_of(event: &StoredEvent) -> Option<WaitingEvent> {
    log_events::body_of(&event.body).ok()
}

/// The interrupts this viewer may decide (all of them for an API key), and the others.
fn split_for<'a>(viewer: &Viewer, waiting: &'a WaitingEvent) -> (Vec<&'a Waiting>, Vec<&'a Waiting>) {
    waiting.interrupts.iter().partition(|w| viewer.person.is_none() || w.may_be_decided_by(viewer))
}

/// An event as this run sends it (§3, §5.2, §5.4): run-boundary events carry the run's own
/// ids; a wait becomes the caller's ending (or `gateway.waiting`); a decision opens the run
/// that made it (with the board as it stood then). Several items rendered from one event are
/// told apart by part ids ([`name_part`]). The conversation reads are boxed: they are rare, and
/// inline they would take their room in every open stream for all of its life.
pub(super) async fn render(
    plan: &FollowPlan,
    store: &dyn Store,
    event: StoredEvent,
) -> Result<Vec<StreamItem>, RenderError> {
    let id = EventId { turn: plan.turn_id.clone(), seq: event.seq, part: 0 }.to_string();
    // The activity a restated conversation holds is content, as its live events are.
    let shown = conversation::Activity::for_content(plan.viewer.clearance.content);
    let item = |event: Event, at_ms: i64| -> Result<StreamItem, RenderError> {
        Ok(StreamItem::rendered(id.clone(), Bytes::from(serde_json::to_vec(&Envelope::new(event, at_ms))?)))
    };
    let run_finished = |outcome: Option<RunOutcome>| Event::RunFinished {
        thread_id: plan.thread_id.clone(),
        run_id: plan.run_id.clone(),
        result: None,
        outcome,
        usage: None,
    };
    match event.kind {
        EventKind::RunStarted | EventKind::RunFinished => {
            let mut envelope: Envelope = serde_json::from_slice(&event.body)?;
            match &mut envelope.event {
                Event::RunStarted { thread_id, run_id, .. } | Event::RunFinished { thread_id, run_id, .. } => {
                    thread_id.clone_from(&plan.thread_id);
                    run_id.clone_from(&plan.run_id);
                }
                _ => {}
            }
            let mut items = vec![StreamItem::rendered(id.clone(), Bytes::from(serde_json::to_vec(&envelope)?))];
            if event.kind == EventKind::RunStarted && plan.snapshot_on_open {
                // A reopened thread (§3): the conversation the gateway recorded, so a page that
                // sent a stale or empty history shows the thread as it is.
                let turns = Box::pin(turns_of(plan, store)).await?;
                let messages =
                    Box::pin(conversation::load_at_in(store, &turns, plan.turn_pk, event.seq, shown)).await?;
                // Which alternatives its user messages have, when any has one (§6).
                let branches = branches_event(&turns, plan.turn_pk, &messages);
                items.push(item(Event::MessagesSnapshot { messages }, event.at_ms)?);
                if let Some(branches) = branches {
                    items.push(item(branches, event.at_ms)?);
                }
            }
            Ok(items)
        }
        EventKind::Waiting => {
            let Some(waiting) = waiting_of(&event) else { return Ok(Vec::new()) };
            let (mine, others) = split_for(&plan.viewer, &waiting);
            let console = plan.console.as_deref();
            let others: Vec<Value> = others.iter().map(|w| w.for_others(console)).collect();
            if mine.is_empty() {
                let value = json!({ "waiting": others });
                return Ok(vec![item(
                    Event::Custom { name: WAITING_FOR_OTHERS.into(), value, subagent_run_id: None },
                    event.at_ms,
                )?]);
            }
            if plan.viewer.pre_1_0 {
                // §5.4: the conversation, one on_interrupt per interrupt, and a plain ending.
                let messages = Box::pin(conversation::load(store, plan.thread_pk, shown)).await?;
                let mut items = vec![item(Event::MessagesSnapshot { messages }, event.at_ms)?];
                for waiting in &mine {
                    let value = json!({
                        "id": waiting.interrupt.id,
                        "message": waiting.interrupt.message,
                        "metadata": waiting.shown(plan.viewer.clearance.content, console).metadata,
                    });
                    items.push(item(
                        Event::Custom { name: ON_INTERRUPT.into(), value, subagent_run_id: None },
                        event.at_ms,
                    )?);
                }
                items.push(item(run_finished(None), event.at_ms)?);
                return Ok(items);
            }
            let interrupts = mine.iter().map(|w| w.shown(plan.viewer.clearance.content, console)).collect();
            let mut envelope = Envelope::new(run_finished(Some(RunOutcome::Interrupt { interrupts })), event.at_ms);
            if !others.is_empty() {
                let mut metadata = serde_json::Map::new();
                metadata.insert("gateway/waiting-for-others".into(), Value::Array(others));
                envelope.metadata = Some(metadata);
            }
            Ok(vec![StreamItem::rendered(id, Bytes::from(serde_json::to_vec(&envelope)?))])
        }
        EventKind::Resumed if event.seq == plan.run_start_seq + 1 => {
            // The decision this run made (or found made): the run starts here.
            // A decision event that parses but reads as no known body opens the run all the same.
            serde_json::from_slice::<Envelope>(&event.body)?;
            let recorded = log_events::body_of::<ResumedEvent>(&event.body).unwrap_or_default();
            let outcomes = plan.resume_outcomes.clone().unwrap_or(recorded.decisions);
            let started = Event::RunStarted {
                thread_id: plan.thread_id.clone(),
                run_id: plan.run_id.clone(),
                protocol_version: Some(PROTOCOL_VERSION.to_string()),
                parent_run_id: None,
                input: None,
            };
            let mut items = vec![item(started, event.at_ms)?];
            if plan.snapshot_on_open {
                let turns = Box::pin(turns_of(plan, store)).await?;
                let messages =
                    Box::pin(conversation::load_at_in(store, &turns, plan.turn_pk, event.seq, shown)).await?;
                items.push(item(Event::MessagesSnapshot { messages }, event.at_ms)?);
            }
            if let Some(board) = recorded.board.filter(|_| plan.viewer.clearance.content) {
                let notes: Vec<Value> = board.iter().map(|note| plan.viewer.clearance.show(note)).collect();
                let snapshot = json!({ "board": { "notes": notes } });
                items.push(item(Event::StateSnapshot { snapshot, subagent_run_id: None }, event.at_ms)?);
            }
            for outcome in outcomes {
                items.push(item(
                    Event::Custom { name: RESUME_OUTCOME.into(), value: outcome, subagent_run_id: None },
                    event.at_ms,
                )?);
            }
            Ok(items)
        }
        EventKind::ClientWait => {
            // The run ends here for everyone: the client owes the results of these calls.
            serde_json::from_slice::<Envelope>(&event.body)?;
            let pending = log_events::body_of::<ClientWaitEvent>(&event.body).unwrap_or_default();
            // A pre-1.0 client's schema has no `pendingToolCallIds` (it refuses the key): it
            // runs the tool calls it saw, as it always did, from a plain ending (§5.4).
            if plan.viewer.pre_1_0 {
                return Ok(vec![item(run_finished(None), event.at_ms)?]);
            }
            let outcome = RunOutcome::Success { pending_tool_call_ids: pending.pending_tool_call_ids };
            Ok(vec![item(run_finished(Some(outcome)), event.at_ms)?])
        }
        // Someone else's decision, seen by a stream that waited through it: nothing to show.
        EventKind::Resumed => Ok(Vec::new()),
        // The board as this caller may see it (§7): redacted notes, or no state event at all.
        EventKind::StateSnapshot => state_for(&plan.viewer, id, &event.body),
        EventKind::Plain => match log_events::classify_plain(&event.body) {
            PlainEvent::StateDelta => state_for(&plan.viewer, id, &event.body),
            // A cut answer withdrawn (§4.6): the conversation as it stands now, without it, which
            // the official client takes in place of the messages it holds; the answer follows
            // whole.
            PlainEvent::Cut => {
                let turns = Box::pin(turns_of(plan, store)).await?;
                let messages =
                    Box::pin(conversation::load_at_in(store, &turns, plan.turn_pk, event.seq + 1, shown)).await?;
                Ok(vec![item(Event::MessagesSnapshot { messages }, event.at_ms)?])
            }
            // A card is content (§3): only for callers who may read it.
            // So are reasoning and activity: a caller without content sees none of their events
            // (not even empty ones), as it would see no card.
            PlainEvent::Card | PlainEvent::Reasoning | PlainEvent::Activity if !plan.viewer.clearance.content => {
                Ok(Vec::new())
            }
            PlainEvent::Card | PlainEvent::Reasoning | PlainEvent::Activity | PlainEvent::Other => {
                Ok(vec![StreamItem::logged(id, event.body)])
            }
        },
        EventKind::RunError => Ok(vec![StreamItem::logged(id, event.body)]),
    }
}

/// The thread's turns: as the plan read them, else from the store.
async fn turns_of(plan: &FollowPlan, store: &dyn Store) -> Result<Arc<[TurnRow]>, StoreError> {
    match &plan.turns {
        Some(turns) => Ok(turns.clone()),
        None => Ok(store.thread_turns(plan.thread_pk).await?.into()),
    }
}

pub(super) fn state_for(viewer: &Viewer, id: String, body: &Bytes) -> Result<Vec<StreamItem>, RenderError> {
    // No labelled note in it: nothing to redact, sent as stored.
    let labelled = body.windows(11).any(|w| w == br#""labels":[""#);
    if viewer.clearance.content && !labelled {
        return Ok(vec![StreamItem::logged(id, body.clone())]);
    }
    let event: Value = serde_json::from_slice(body)?;
    Ok(match viewer.clearance.state_event(&event) {
        Some(shown) => vec![StreamItem::rendered(id, Bytes::from(serde_json::to_vec(&shown)?))],
        None => Vec::new(),
    })
}

#[derive(Debug, thiserror::Error)]
pub(super) enum RenderError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}
