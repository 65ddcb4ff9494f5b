//! The event log's group-commit writer: [`LogWriter`] is what the engine appends through.
//!
//! This file is the log's interface (appending, and announcing what committed to other
//! instances); what one append is, its error and health and the hand-over to the hub are in
//! `append`; the writer loop is in `writer`, a batch's stages through its transaction in
//! `stages`, what happens when a batch fails in `recovery`, and the gateway's own events in
//! [`events`].
//!
//! Every turn's appends go to one of a few writer tasks (always the same one for a turn, so its
//! events stay in order). A writer takes everything queued, up to `batch_max_events`, as one
//! batch, commits it in one transaction, then wakes the streams (in-process at once, other
//! instances with one notification per batch). Batches are sized by what is waiting, never by
//! a timer: while one is being written the next gathers, so the batch size grows with the load
//! and a lone event is never held back waiting for company.
//!
//! Pipelining (`event_log.pipeline_depth`, PostgreSQL): up to that many batches of a writer are
//! in flight at once, each on its own connection. Each batch inserts its events first (that
//! locks no turn row), then takes its fence (the turns' row locks and epochs) only after the
//! batch before it took its own, then waits for the batch before it to commit before it sends
//! its own COMMIT. So while batch k waits for its fsync, batch k+1 is already inserted and
//! queued on k's row locks, and the commits, like the fences, happen strictly in batch order.
//! When a batch fails (or its fence refuses an append it already inserted) the batches behind
//! it roll back before it is retried, and go through again after it, screened: an append of a
//! runner whose earlier append failed is never written, so a turn's log gets no hole.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::stream::hub::Hub;
use crate::bus::Bus;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, StoredEvent, WakeUp, WriteOp};
use append::{publish, Announcement, Append};
pub use append::{AppendHealth, LogError};
use writer::Writer;

mod append;
pub mod events;
mod recovery;
mod stages;
mod writer;

/// Appends waiting per writer before `append` waits for room (back-pressure on fast agents).
const QUEUE_DEPTH: usize = 8192;
/// How long a writer on a thread of its own, once its queue closed, lets the tasks it spawned
/// finish (the pool hands its connection back from one) before its runtime goes.
const OWN_THREAD_DRAIN: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct LogWriter {
    writers: Arc<Vec<mpsc::Sender<Append>>>,
    hub: Arc<Hub>,
    announce: mpsc::UnboundedSender<Announcement>,
}

/// How a writer batches: the most events in one batch, and how many batches may be in flight
/// at once (1: each batch commits before the next begins).
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    pub batch_max_events: usize,
    pub pipeline_depth: usize,
}

impl LogWriter {
    /// Starts `writers` writer tasks (and the announcer that wakes other instances). The
    /// pipeline depth is bounded by what the store supports (1 on SQLite).
    ///
    /// On a store only this instance uses (SQLite) the one writer runs on a thread of its own.
    /// Each of its batches is a series of round trips to SQLite's connection thread (the
    /// connection from the pool and back, BEGIN, the fence, the inserts, COMMIT), and after
    /// each the writer must be polled again to go on. On the shared runtime that poll waits
    /// its turn behind every ready stream and agent task: at 1,000 chats on two busy cores
    /// each wait took ~10-17 ms, a batch of ~950 events ~100 ms (70 of them to get the
    /// connection back and begin), and the log committed ~10,000 events a second. On its own
    /// thread the writer is woken at once (a batch: ~11-24 ms). Other writes on the shared
    /// runtime (a turn's start, token counts) still hold the one connection across their own
    /// waits, and the writer waits for them.
    pub fn start(
        store: Arc<dyn Store>,
        clock: Arc<dyn crate::clock::Clock>,
        bus: Arc<dyn Bus>,
        hub: Arc<Hub>,
        writers: usize,
        batching: Batching,
        metrics: Arc<Metrics>,
    ) -> LogWriter {
        let (announce_tx, announce_rx) = mpsc::unbounded_channel();
        let followed_only = bus.announces_followed_turns_only();
        tokio::spawn(announce(bus, announce_rx, metrics.clone()));
        let depth = batching.pipeline_depth.clamp(1, store.max_pipeline_depth().max(1));
        let own_thread = !store.is_shared();
        let writers = (0..writers.max(1))
            .map(|_| {
                let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
                let writer = Writer {
                    store: store.clone(),
                    clock: clock.clone(),
                    hub: hub.clone(),
                    announce: announce_tx.clone(),
                    followed_only,
                    metrics: metrics.clone(),
                    batch_max_events: batching.batch_max_events.max(1),
                    depth,
                };
                if own_thread {
                    run_on_own_thread(writer, receiver);
                } else {
                    tokio::spawn(writer.run(receiver));
                }
                sender
            })
            .collect();
        LogWriter { writers: Arc::new(writers), hub, announce: announce_tx }
    }

    fn writer(&self, turn: i64) -> &mpsc::Sender<Append> {
        &self.writers[(turn.unsigned_abs() as usize) % self.writers.len()]
    }

    /// The way into the log of the turn `turn` held under `epoch`, with a fresh health.
    pub fn for_turn(&self, turn: i64, epoch: i64) -> TurnLog {
        TurnLog { log: self.clone(), turn, epoch, health: Arc::new(AppendHealth::default()) }
    }

    /// Hands an append to its turn's writer (waiting for room when the queue is full).
    async fn enqueue(&self, append: Append) -> Result<(), LogError> {
        self.writer(append.turn).send(append).await.map_err(|_| LogError::Stopped)
    }

    /// Events committed outside the writer (a decision, recorded in its own transaction): the
    /// streams hear of them as of any batch.
    pub fn published(&self, turn: i64, events: Vec<StoredEvent>) {
        // Committed in a transaction of its own, whose fence nobody read: announced always.
        let ops = events.into_iter().map(|event| WriteOp::Event { turn, event }).collect();
        let appended = publish(&self.hub, ops, |_| true);
        if !appended.is_empty() {
            let _ = self.announce.send((appended, Instant::now()));
        }
    }
}

/// One turn's way into the log: its appends go to the turn's writer, in order, under the epoch
/// its runner holds, and what the writer finds (a fence, a failed commit) is reported to the
/// turn's [`AppendHealth`].
#[derive(Clone)]
pub struct TurnLog {
    log: LogWriter,
    turn: i64,
    epoch: i64,
    health: Arc<AppendHealth>,
}

impl TurnLog {
    /// Queues `ops`; they are committed in order with the turn's other appends.
    pub async fn append(&self, ops: Vec<WriteOp>) -> Result<(), LogError> {
        self.send(ops, None).await
    }

    /// Queues `ops` and waits until they (and everything queued before them) are committed.
    pub async fn append_committed(&self, ops: Vec<WriteOp>) -> Result<(), LogError> {
        let (done_tx, done_rx) = oneshot::channel();
        self.send(ops, Some(done_tx)).await?;
        done_rx.await.map_err(|_| LogError::Stopped)?
    }

    async fn send(
        &self,
        ops: Vec<WriteOp>,
        committed: Option<oneshot::Sender<Result<(), LogError>>>,
    ) -> Result<(), LogError> {
        let (turn, epoch, health) = (self.turn, self.epoch, self.health.clone());
        self.log.enqueue(Append { turn, epoch, ops, health, committed, queued: Instant::now() }).await
    }

    /// What the writer found of this turn's appends so far.
    pub fn health(&self) -> &AppendHealth {
        &self.health
    }

    /// Forgets what the writer found: the appends from here on (a terminal event, which must
    /// reach the log whatever came before) start with a clean health.
    pub fn forget_health(&mut self) {
        self.health = Arc::new(AppendHealth::default());
    }
}

/// Runs `writer` on a thread of its own, in a runtime of its own (the batch tasks it spawns
/// run there too); on the shared runtime if the thread or its runtime could not be started.
fn run_on_own_thread(writer: Writer, queue: mpsc::Receiver<Append>) {
    let shared = tokio::runtime::Handle::current();
    // The thread takes the writer and its queue from here, so they are still at hand when
    // the thread did not start.
    let parked = Arc::new(std::sync::Mutex::new(Some((writer, queue))));
    let take = |parked: &std::sync::Mutex<Option<(Writer, mpsc::Receiver<Append>)>>| {
        parked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    };
    let taken = parked.clone();
    let started = std::thread::Builder::new().name("agui-log-writer".into()).spawn(move || {
        let Some((writer, queue)) = take(&taken) else { return };
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::warn!(%error, "no runtime for the event log writer's thread; it runs on the shared one");
                shared.spawn(writer.run(queue));
                return;
            }
        };
        runtime.block_on(async move {
            writer.run(queue).await;
            // The pool takes its connection back in a task it spawned here: dropping the
            // runtime before that task ran would lose the store's only write connection.
            let tasks = tokio::runtime::Handle::current().metrics();
            let drained_by = Instant::now() + OWN_THREAD_DRAIN;
            while tasks.num_alive_tasks() > 0 && Instant::now() < drained_by {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
    });
    if let Err(error) = started {
        tracing::warn!(%error, "the event log writer's thread did not start; it runs on the shared runtime");
        if let Some((writer, queue)) = take(&parked) {
            tokio::spawn(writer.run(queue));
        }
    }
}

/// A turn's whole log, read in pages.
pub(crate) async fn read_log(store: &dyn Store, turn: i64) -> Result<Vec<StoredEvent>, StoreError> {
    const PAGE: i64 = 1000;
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq);
        let page = store.events_after(turn, after, PAGE).await?;
        // A short page held the log to its end as it stood: asking again would read nothing
        // (the log has no holes: what is committed is a prefix of it).
        let end = (page.len() as i64) < PAGE;
        events.extend(page);
        if end {
            return Ok(events);
        }
    }
}

/// Folds a later wake-up of the same turn into an earlier one: events join up, else the
/// newest seq stands for both.
fn merge(earlier: &mut WakeUp, later: WakeUp) {
    let newest = |w: &WakeUp| match w {
        WakeUp::Committed { seq, .. } => *seq,
        WakeUp::Events { events, .. } => events.last().map_or(0, |e| e.seq),
        _ => 0,
    };
    match (&mut *earlier, later) {
        (WakeUp::Events { events, .. }, WakeUp::Events { events: more, .. }) => events.extend(more),
        (_, later) => {
            if let WakeUp::Committed { turn, .. } | WakeUp::Events { turn, .. } = *earlier {
                let seq = newest(earlier).max(newest(&later));
                *earlier = WakeUp::Committed { turn, seq };
            }
        }
    }
}

/// Sends other instances one message for everything committed since the last one, at most
/// one per the bus's [`Bus::announce_every`].
async fn announce(bus: Arc<dyn Bus>, mut queue: mpsc::UnboundedReceiver<Announcement>, metrics: Arc<Metrics>) {
    let turn_of = |w: &WakeUp| match w {
        WakeUp::Committed { turn, .. } | WakeUp::Events { turn, .. } => Some(*turn),
        _ => None,
    };
    let every = bus.announce_every();
    let mut last_sent: Option<tokio::time::Instant> = None;
    while let Some((first, since)) = queue.recv().await {
        if let Some(last) = last_sent.filter(|_| !every.is_zero()) {
            tokio::time::sleep_until(last + every).await;
        }
        last_sent = Some(tokio::time::Instant::now());
        let mut newest: BTreeMap<i64, WakeUp> = BTreeMap::new();
        let mut add = |wakeup: WakeUp| {
            let Some(turn) = turn_of(&wakeup) else { return };
            match newest.get_mut(&turn) {
                Some(earlier) => merge(earlier, wakeup),
                None => {
                    newest.insert(turn, wakeup);
                }
            }
        };
        first.into_iter().for_each(&mut add);
        while let Ok((more, _)) = queue.try_recv() {
            more.into_iter().for_each(&mut add);
        }
        let wakeups: Vec<WakeUp> = newest.into_values().collect();
        match bus.announce(&wakeups).await {
            // Timed from the oldest commit it covers: what the other instances' streams waited.
            Ok(()) => metrics.log_notify_seconds.observe(since.elapsed().as_secs_f64()),
            // Streams elsewhere also poll the log, so a lost notification only delays them.
            Err(error) => tracing::warn!(%error, "could not announce appends to other instances"),
        }
    }
}
