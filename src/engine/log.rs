//! The event log's group-commit writer.
//!
//! Every turn's appends go to one of a few writer tasks (always the same one for a turn, so its
//! events stay in order). A writer takes everything queued, up to `batch_max_events`, commits it
//! in one transaction, then wakes the streams (in-process at once, other instances with one
//! notification per batch). While a batch commits the next one gathers, so the batch size grows
//! with the load and a lone event is never held back waiting for company.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::hub::Hub;
use crate::metrics::Metrics;
use crate::store::{BatchOutcome, Store, StoreError, StoredEvent, TurnWrites, WriteOp};

/// Appends waiting per writer before `append` waits for room (back-pressure on fast agents).
const QUEUE_DEPTH: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the event log writer has stopped")]
    Stopped,
    #[error("the batch holding this turn's events could not be committed: {0}")]
    Commit(Arc<StoreError>),
    /// The store refused the append: the runner's ownership epoch is no longer the turn's
    /// (another runner holds it) or the turn has ended. The runner must write nothing more.
    #[error("the turn is no longer this runner's to write")]
    Fenced,
}

/// Whether a turn's appends have all succeeded so far; the writer flips it on a failed batch so
/// the turn stops instead of writing a log with a hole in it.
#[derive(Default)]
pub struct AppendHealth {
    failed: AtomicBool,
    fenced: AtomicBool,
}

impl AppendHealth {
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The store refused an append for the runner's epoch: nothing more may be written, not
    /// even a terminal event.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }
}

/// Ops for one turn, committed together in one batch, fenced by the runner's epoch.
struct Append {
    turn: i64,
    epoch: i64,
    ops: Vec<WriteOp>,
    health: Arc<AppendHealth>,
    committed: Option<oneshot::Sender<Result<(), LogError>>>,
}

#[derive(Clone)]
pub struct EventLog {
    writers: Arc<Vec<mpsc::Sender<Append>>>,
    hub: Arc<Hub>,
    announce: mpsc::UnboundedSender<Vec<(i64, i64)>>,
}

impl EventLog {
    /// Starts `writers` writer tasks (and the announcer that wakes other instances).
    pub fn start(
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        writers: usize,
        batch_max_events: usize,
        metrics: Arc<Metrics>,
    ) -> EventLog {
        let (announce_tx, announce_rx) = mpsc::unbounded_channel();
        tokio::spawn(announce(store.clone(), announce_rx));
        let writers = (0..writers.max(1))
            .map(|_| {
                let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
                tokio::spawn(write_batches(
                    store.clone(),
                    hub.clone(),
                    receiver,
                    batch_max_events,
                    announce_tx.clone(),
                    metrics.clone(),
                ));
                sender
            })
            .collect();
        EventLog { writers: Arc::new(writers), hub, announce: announce_tx }
    }

    fn writer(&self, turn: i64) -> &mpsc::Sender<Append> {
        &self.writers[(turn.unsigned_abs() as usize) % self.writers.len()]
    }

    /// Queues `ops` for the turn; they are committed in order with the turn's other appends,
    /// while `epoch` is the turn's.
    pub async fn append(
        &self,
        turn: i64,
        epoch: i64,
        ops: Vec<WriteOp>,
        health: &Arc<AppendHealth>,
    ) -> Result<(), LogError> {
        self.enqueue(Append { turn, epoch, ops, health: health.clone(), committed: None }).await
    }

    /// Hands an append to its turn's writer (waiting for room when the queue is full).
    async fn enqueue(&self, append: Append) -> Result<(), LogError> {
        self.writer(append.turn).send(append).await.map_err(|_| LogError::Stopped)
    }

    /// Events committed outside the writer (a decision, recorded in its own transaction): the
    /// streams hear of them as of any batch.
    pub fn published(&self, turn: i64, events: Vec<StoredEvent>) {
        let appended = publish(&self.hub, events.into_iter().map(|event| WriteOp::Event { turn, event }).collect());
        if !appended.is_empty() {
            let _ = self.announce.send(appended);
        }
    }

    /// Queues `ops` and waits until they (and everything queued before them) are committed.
    pub async fn append_committed(
        &self,
        turn: i64,
        epoch: i64,
        ops: Vec<WriteOp>,
        health: &Arc<AppendHealth>,
    ) -> Result<(), LogError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.enqueue(Append { turn, epoch, ops, health: health.clone(), committed: Some(done_tx) }).await?;
        done_rx.await.map_err(|_| LogError::Stopped)?
    }
}

async fn write_batches(
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    mut queue: mpsc::Receiver<Append>,
    batch_max_events: usize,
    announce: mpsc::UnboundedSender<Vec<(i64, i64)>>,
    metrics: Arc<Metrics>,
) {
    let mut appends: Vec<Append> = Vec::new();
    while let Some(first) = queue.recv().await {
        let mut size = first.ops.len();
        appends.push(first);
        while size < batch_max_events {
            match queue.try_recv() {
                Ok(next) => {
                    size += next.ops.len();
                    appends.push(next);
                }
                Err(_) => break,
            }
        }
        let batch: Vec<TurnWrites> = appends
            .iter_mut()
            .map(|a| TurnWrites { turn: a.turn, epoch: a.epoch, ops: std::mem::take(&mut a.ops) })
            .collect();
        let started = std::time::Instant::now();
        let outcome = commit_with_retry(store.as_ref(), &batch).await;
        metrics.append_commit_seconds.observe(started.elapsed().as_secs_f64());
        let events = |writes: &TurnWrites| writes.ops.iter().filter(|op| matches!(op, WriteOp::Event { .. })).count();
        metrics.append_batch_events.observe(batch.iter().map(events).sum::<usize>() as f64);
        let outcomes: Vec<Result<(), LogError>> = match outcome {
            Ok(outcome) => (0..batch.len())
                .map(|index| if outcome.is_refused(index) { Err(LogError::Fenced) } else { Ok(()) })
                .collect(),
            Err(error) => {
                // One turn's bad append must not sink the others that shared its batch: commit
                // each append on its own.
                tracing::warn!(%error, appends = batch.len(), "an event log batch failed; committing its appends one by one");
                let mut outcomes = Vec::with_capacity(batch.len());
                for writes in &batch {
                    let alone = std::slice::from_ref(writes);
                    outcomes.push(match commit_with_retry(store.as_ref(), alone).await {
                        Ok(outcome) if outcome.refused.is_empty() => Ok(()),
                        Ok(_) => Err(LogError::Fenced),
                        Err(error) => Err(LogError::Commit(Arc::new(error))),
                    });
                }
                outcomes
            }
        };
        let mut committed = Vec::new();
        let mut settled = Vec::with_capacity(appends.len());
        for ((append, writes), outcome) in appends.drain(..).zip(batch).zip(outcomes) {
            match &outcome {
                Ok(()) => {
                    metrics.events_appended.inc_by(events(&writes) as u64);
                    let opened = writes.ops.iter().filter(|op| matches!(op, WriteOp::OpenInterrupt(_))).count();
                    metrics.interrupts_opened.inc_by(opened as u64);
                    committed.extend(writes.ops);
                }
                Err(LogError::Fenced) => {
                    tracing::warn!(
                        turn = append.turn,
                        epoch = append.epoch,
                        "the log refused a stale runner's append; the runner stops"
                    );
                    append.health.fenced.store(true, Ordering::Release);
                    append.health.failed.store(true, Ordering::Release);
                }
                Err(error) => {
                    tracing::error!(turn = append.turn, %error, "a turn's append failed; the turn stops");
                    append.health.failed.store(true, Ordering::Release);
                }
            }
            settled.push((append, outcome));
        }
        settle(&hub, &announce, committed, settled.into_iter());
    }
}

/// After a commit: hands the committed events to the streams, answers the appends that wait,
/// and queues the announcement to other instances.
fn settle(
    hub: &Hub,
    announce: &mpsc::UnboundedSender<Vec<(i64, i64)>>,
    committed: Vec<WriteOp>,
    appends: impl Iterator<Item = (Append, Result<(), LogError>)>,
) {
    let appended = publish(hub, committed);
    for (append, outcome) in appends {
        if let Some(done) = append.committed {
            let _ = done.send(outcome);
        }
    }
    if !appended.is_empty() {
        let _ = announce.send(appended);
    }
}

/// A turn's whole log, read in pages.
pub(crate) async fn read_log(store: &dyn Store, turn: i64) -> Result<Vec<StoredEvent>, StoreError> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq);
        let page = store.events_after(turn, after, 1000).await?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

/// Commits a batch; waits out a database that is away (connection errors, a restart, a
/// deadlock) with backoff, but gives up at once on any other error the database reported
/// (retrying cannot fix it).
///
/// A connection can die after the database committed but before it answered; the retry then
/// meets its own rows. That case is recognised (each append's first event is stored, byte for
/// byte, so the batch went in whole) and counted as committed, so no event is written twice or
/// lost.
async fn commit_with_retry(store: &dyn Store, batch: &[TurnWrites]) -> Result<BatchOutcome, StoreError> {
    let mut delay = Duration::from_millis(20);
    let mut interrupted = false;
    loop {
        match store.commit_batch(batch).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) if error.is_transient() => {
                interrupted = true;
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "event log commit failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(error) if error.is_refused_by_database() => {
                if interrupted {
                    if let Some(outcome) = already_committed(store, batch).await {
                        return Ok(outcome);
                    }
                }
                return Err(error);
            }
            Err(other) => return Err(other),
        }
    }
}

/// Whether an earlier attempt of this batch committed: the batch's transaction is all or
/// nothing, so if any append's first event is stored exactly as the batch holds it, the batch
/// went in, and the appends with no event stored were the ones its fence refused.
async fn already_committed(store: &dyn Store, batch: &[TurnWrites]) -> Option<BatchOutcome> {
    let mut found_any = false;
    let mut refused = Vec::new();
    for (index, writes) in batch.iter().enumerate() {
        let Some(event) = writes.ops.iter().find_map(|op| match op {
            WriteOp::Event { event, .. } => Some(event),
            _ => None,
        }) else {
            continue;
        };
        match store.events_after(writes.turn, event.seq - 1, 1).await {
            Ok(found) if found.first().is_some_and(|s| s.seq == event.seq && s.body == event.body) => found_any = true,
            Ok(_) => refused.push(index),
            Err(_) => return None,
        }
    }
    found_any.then_some(BatchOutcome { refused })
}

/// Hands the committed events to the hub, per turn and in order; returns each turn's newest seq.
fn publish(hub: &Hub, ops: Vec<WriteOp>) -> Vec<(i64, i64)> {
    let mut by_turn: BTreeMap<i64, Vec<StoredEvent>> = BTreeMap::new();
    for op in ops {
        if let WriteOp::Event { turn, event } = op {
            by_turn.entry(turn).or_default().push(event);
        }
    }
    by_turn
        .into_iter()
        .filter_map(|(turn, events)| {
            let last = events.last()?.seq;
            hub.publish(turn, events);
            Some((turn, last))
        })
        .collect()
}

/// Sends other instances one notification for everything committed since the last one.
async fn announce(store: Arc<dyn Store>, mut queue: mpsc::UnboundedReceiver<Vec<(i64, i64)>>) {
    while let Some(first) = queue.recv().await {
        let mut newest: BTreeMap<i64, i64> = first.into_iter().collect();
        while let Ok(more) = queue.try_recv() {
            for (turn, seq) in more {
                let entry = newest.entry(turn).or_insert(seq);
                *entry = (*entry).max(seq);
            }
        }
        let pairs: Vec<(i64, i64)> = newest.into_iter().collect();
        if let Err(error) = store.announce_appends(&pairs).await {
            // Streams elsewhere also poll the log, so a lost notification only delays them.
            tracing::warn!(%error, "could not announce appends to other instances");
        }
    }
}
