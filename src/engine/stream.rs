//! A run's stream: the turn's log rendered from a position on, live until its terminal event.
//!
//! Catch-up reads come from the log table in pages; live events come from the turn's feed in
//! memory when this instance runs the turn, else from the table after a wake-up. A stream ends
//! after its terminal event, or cleanly (resumable with `Last-Event-ID`) at its lifetime cap.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use tokio::time::Instant;

use super::hub::Hub;
use super::FollowPlan;
use crate::ids::EventId;
use crate::protocol::events::Envelope;
use crate::protocol::Event;
use crate::store::{EventKind, Store, StoredEvent};

/// Events read from the table per query.
const PAGE: i64 = 1000;
/// How often a stream re-reads the table of a turn another instance runs, in case a wake-up
/// notification was lost.
const REMOTE_POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub struct StreamOptions {
    pub keepalive: Duration,
    pub max_duration: Duration,
}

/// What the transport sends.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// One event: its id and its JSON (one line).
    Event { id: String, json: Bytes },
    /// Nothing happened for a while.
    Keepalive,
}

pub fn follow(
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    plan: FollowPlan,
    options: StreamOptions,
) -> impl Stream<Item = StreamItem> + Send + 'static {
    async_stream::stream! {
        let feed = hub.feed(plan.turn_pk);
        let mut wake = feed.subscribe();
        let deadline = Instant::now() + options.max_duration;
        let mut cursor = plan.after_seq;
        if cursor > 0 {
            // Resuming after the terminal event: the run is over, there is nothing to send.
            match store.events_after(plan.turn_pk, cursor - 1, 1).await {
                Ok(events) if events.first().is_some_and(|e| e.kind.is_terminal()) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, turn = %plan.turn_id, "reading the event log failed; closing the stream");
                    return;
                }
            }
        }
        loop {
            wake.borrow_and_update();
            let batch = match feed.recent_after(cursor, PAGE as usize) {
                // A local feed's memory holds every committed event: empty means caught up.
                Some(events) if !events.is_empty() || feed.is_local() => events,
                _ => match store.events_after(plan.turn_pk, cursor, PAGE).await {
                    Ok(events) => events,
                    Err(error) => {
                        // Ending the stream lets the client resume from its last id.
                        tracing::warn!(%error, turn = %plan.turn_id, "reading the event log failed; closing the stream");
                        return;
                    }
                },
            };
            if !batch.is_empty() {
                for event in batch {
                    cursor = event.seq;
                    let terminal = event.kind.is_terminal();
                    match render(&plan, event) {
                        Ok(item) => yield item,
                        Err(error) => {
                            tracing::error!(%error, turn = %plan.turn_id, seq = cursor, "a logged event cannot be rendered");
                            return;
                        }
                    }
                    if terminal {
                        return;
                    }
                }
                continue;
            }
            let keepalive = tokio::time::sleep(options.keepalive);
            let poll = tokio::time::sleep(REMOTE_POLL);
            tokio::select! {
                changed = wake.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = keepalive => yield StreamItem::Keepalive,
                _ = poll, if !feed.is_local() => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
            if Instant::now() >= deadline {
                return;
            }
        }
    }
}

/// An event as this run sends it: run-boundary events carry the run's own ids.
fn render(plan: &FollowPlan, event: StoredEvent) -> Result<StreamItem, serde_json::Error> {
    let id = EventId { turn: plan.turn_id.clone(), seq: event.seq }.to_string();
    let json = match event.kind {
        EventKind::RunStarted | EventKind::RunFinished => {
            let mut envelope: Envelope = serde_json::from_slice(&event.body)?;
            match &mut envelope.event {
                Event::RunStarted { thread_id, run_id, .. } | Event::RunFinished { thread_id, run_id, .. } => {
                    thread_id.clone_from(&plan.thread_id);
                    run_id.clone_from(&plan.run_id);
                }
                _ => {}
            }
            Bytes::from(serde_json::to_vec(&envelope)?)
        }
        _ => event.body,
    };
    Ok(StreamItem::Event { id, json })
}
