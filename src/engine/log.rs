//! The event log's group-commit writer.
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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::hub::Hub;
use crate::metrics::Metrics;
use crate::retry::Backoff;
use crate::store::{BatchOutcome, Store, StoreError, StoredEvent, TurnWrites, WriteOp, WrittenAhead};

/// Appends waiting per writer before `append` waits for room (back-pressure on fast agents).
const QUEUE_DEPTH: usize = 8192;

/// How long a pipelined batch waits for the batch before it to take its fence. Two batches of
/// one writer only meet on the same rows when two runners of a turn wrote the same sequence
/// numbers (which the writer keeps out of one pipeline), so this only bounds what such a
/// clash the writer did not foresee could cost: the later batch rolls back and goes again.
const FENCE_WAIT: Duration = Duration::from_secs(2);

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
    /// An earlier append of the same runner could not be committed, so this one was not
    /// written either (the log would have a hole).
    #[error("an earlier append of this turn could not be committed")]
    Abandoned,
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

    /// Records an append's outcome: a failure poisons every later append of the runner.
    fn record(&self, outcome: &Result<(), LogError>) {
        match outcome {
            Ok(()) => {}
            Err(LogError::Fenced) => {
                self.fenced.store(true, Ordering::Release);
                self.failed.store(true, Ordering::Release);
            }
            Err(_) => self.failed.store(true, Ordering::Release),
        }
    }
}

/// Ops for one turn, committed together in one batch, fenced by the runner's epoch.
struct Append {
    turn: i64,
    epoch: i64,
    ops: Vec<WriteOp>,
    health: Arc<AppendHealth>,
    committed: Option<oneshot::Sender<Result<(), LogError>>>,
    /// When it was queued (for `log_queue_seconds`).
    queued: Instant,
}

/// Newest appended seq per turn, and when the first of the batches it covers committed.
type Announcement = (Vec<(i64, i64)>, Instant);

#[derive(Clone)]
pub struct EventLog {
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

impl EventLog {
    /// Starts `writers` writer tasks (and the announcer that wakes other instances). The
    /// pipeline depth is bounded by what the store supports (1 on SQLite).
    pub fn start(
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        writers: usize,
        batching: Batching,
        metrics: Arc<Metrics>,
    ) -> EventLog {
        let (announce_tx, announce_rx) = mpsc::unbounded_channel();
        tokio::spawn(announce(store.clone(), announce_rx, metrics.clone()));
        let depth = batching.pipeline_depth.clamp(1, store.max_pipeline_depth().max(1));
        let writers = (0..writers.max(1))
            .map(|_| {
                let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
                let writer = Writer {
                    store: store.clone(),
                    hub: hub.clone(),
                    announce: announce_tx.clone(),
                    metrics: metrics.clone(),
                    batch_max_events: batching.batch_max_events.max(1),
                    depth,
                };
                tokio::spawn(writer.run(receiver));
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
        let queued = Instant::now();
        self.enqueue(Append { turn, epoch, ops, health: health.clone(), committed: None, queued }).await
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
            let _ = self.announce.send((appended, Instant::now()));
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
        let queued = Instant::now();
        self.enqueue(Append { turn, epoch, ops, health: health.clone(), committed: Some(done_tx), queued }).await?;
        done_rx.await.map_err(|_| LogError::Stopped)?
    }
}

/// One writer task: its queue's batches, written (pipelined up to `depth`) and committed in order.
struct Writer {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    announce: mpsc::UnboundedSender<Announcement>,
    metrics: Arc<Metrics>,
    batch_max_events: usize,
    depth: usize,
}

/// A batch handed to its task, in the writer's order.
struct InFlight {
    appends: Vec<Append>,
    /// Its writes, shared with its task (and taken back when it is done).
    batch: Arc<Vec<TurnWrites>>,
    /// The epoch each of its turns is written under (two runners' batches of one turn are
    /// never in flight together: they may carry the same sequence numbers).
    epochs: HashMap<i64, i64>,
    started: Instant,
    task: JoinHandle<Finished>,
}

impl InFlight {
    /// Its appends and writes, once its task is done (and let go of them).
    fn into_parts(self) -> (Vec<Append>, Vec<TurnWrites>) {
        let batch = Arc::try_unwrap(self.batch).unwrap_or_else(|shared| (*shared).clone());
        (self.appends, batch)
    }
}

/// What a batch's task did.
enum Finished {
    /// Committed, with what its fence refused, when its COMMIT was sent and acknowledged.
    Committed { outcome: BatchOutcome, sent: Instant, acknowledged: Instant },
    /// It failed; its transaction was rolled back first (nothing of it is committed, unless
    /// its COMMIT was sent and the answer was lost: the retry finds out).
    Failed(StoreError),
    /// A batch before it did not commit: rolled back (or never begun), to be written again.
    Abandoned,
}

/// The signals a batch gives the one behind it: its fence was taken (the gate of the next
/// batch's fence), and it committed (the gate of the next batch's COMMIT). `false` or a
/// dropped sender: it did not.
struct Stages {
    fenced: oneshot::Receiver<bool>,
    committed: oneshot::Receiver<bool>,
}

struct StageSenders {
    fenced: Option<oneshot::Sender<bool>>,
    committed: Option<oneshot::Sender<bool>>,
}

impl StageSenders {
    fn fenced(&mut self, ok: bool) {
        if let Some(sender) = self.fenced.take() {
            let _ = sender.send(ok);
        }
    }

    fn committed(&mut self, ok: bool) {
        self.fenced(ok);
        if let Some(sender) = self.committed.take() {
            let _ = sender.send(ok);
        }
    }
}

/// Whether the earlier batch reached the stage (`None`: there is no earlier batch in flight).
async fn reached(stage: Option<oneshot::Receiver<bool>>) -> bool {
    match stage {
        None => true,
        Some(stage) => stage.await.unwrap_or(false),
    }
}

impl Writer {
    async fn run(self, mut queue: mpsc::Receiver<Append>) {
        // Appends of batches rolled back behind a failed one: older than anything queued.
        let mut requeued: VecDeque<Append> = VecDeque::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // The stages of the newest batch in flight, for the next one to wait on.
        let mut last: Option<Stages> = None;
        let mut closed = false;
        loop {
            if in_flight.len() < self.depth {
                let mut appends = self.gather(&mut requeued, &mut queue, &in_flight);
                if appends.is_empty() && in_flight.is_empty() && requeued.is_empty() {
                    let Some(first) = queue.recv().await else { return };
                    requeued.push_back(first);
                    appends = self.gather(&mut requeued, &mut queue, &in_flight);
                }
                let appends = self.screen(appends);
                if !appends.is_empty() {
                    in_flight.push_back(self.launch(appends, last.take(), &mut last));
                    continue;
                }
            }
            let room = in_flight.len() < self.depth && !closed && requeued.is_empty();
            let Some(head) = in_flight.front_mut() else {
                if closed && requeued.is_empty() {
                    return;
                }
                continue;
            };
            tokio::select! {
                biased;
                finished = &mut head.task => {
                    let finished = finished.unwrap_or_else(|error| {
                        Finished::Failed(StoreError::Corrupt(format!("an event log batch task failed: {error}")))
                    });
                    let Some(head) = in_flight.pop_front() else { continue };
                    if in_flight.is_empty() {
                        last = None;
                    }
                    let started = head.started;
                    let (appends, batch) = head.into_parts();
                    match finished {
                        Finished::Committed { outcome, sent, acknowledged } => {
                            self.metrics.log_write_seconds.observe((sent - started).as_secs_f64());
                            self.metrics.log_commit_seconds.observe((acknowledged - sent).as_secs_f64());
                            self.metrics.append_commit_seconds.observe((acknowledged - started).as_secs_f64());
                            let outcomes = (0..appends.len())
                                .map(|index| if outcome.is_refused(index) { Err(LogError::Fenced) } else { Ok(()) })
                                .collect();
                            self.settle(appends, batch, outcomes, acknowledged);
                        }
                        failed => {
                            // Every batch behind it rolls back (each waits on the one before),
                            // and only then is this one tried again: a retry must not wait for
                            // row locks a later batch took once this one's were released.
                            let behind: Vec<InFlight> = in_flight.drain(..).collect();
                            last = None;
                            let mut undone = Vec::new();
                            for later in behind {
                                let mut later = later;
                                let _ = (&mut later.task).await;
                                undone.push(later.into_parts());
                            }
                            match failed {
                                Finished::Failed(error) => self.recover(appends, batch, error).await,
                                _ => undone.insert(0, (appends, batch)),
                            }
                            for (appends, batch) in undone.into_iter().rev() {
                                for (mut append, writes) in appends.into_iter().zip(batch).rev() {
                                    append.ops = writes.ops;
                                    requeued.push_front(append);
                                }
                            }
                        }
                    }
                }
                next = queue.recv(), if room => match next {
                    Some(append) => requeued.push_back(append),
                    None => closed = true,
                },
            }
        }
    }

    /// Takes what is waiting, oldest first, up to `batch_max_events` (at least one append), but
    /// stops before an append of a turn that a batch in flight writes under another epoch.
    fn gather(
        &self,
        requeued: &mut VecDeque<Append>,
        queue: &mut mpsc::Receiver<Append>,
        in_flight: &VecDeque<InFlight>,
    ) -> Vec<Append> {
        let clashes = |append: &Append| {
            in_flight.iter().any(|batch| batch.epochs.get(&append.turn).is_some_and(|&epoch| epoch != append.epoch))
        };
        let mut appends: Vec<Append> = Vec::new();
        let mut size = 0;
        while size < self.batch_max_events {
            let next = match requeued.pop_front() {
                Some(append) => append,
                None => match queue.try_recv() {
                    Ok(append) => append,
                    Err(_) => break,
                },
            };
            if clashes(&next) {
                requeued.push_front(next);
                break;
            }
            size += next.ops.len();
            appends.push(next);
        }
        appends
    }

    /// Answers, without writing them, the appends of runners whose earlier append failed: the
    /// log must not get a hole (nor a second writer).
    fn screen(&self, appends: Vec<Append>) -> Vec<Append> {
        let mut kept = Vec::with_capacity(appends.len());
        for append in appends {
            if append.health.is_fenced() {
                answer(append, Err(LogError::Fenced));
            } else if append.health.is_failed() {
                answer(append, Err(LogError::Abandoned));
            } else {
                kept.push(append);
            }
        }
        kept
    }

    /// Starts a batch's task behind `earlier` (the stages of the batch before it, if that one
    /// is still in flight); leaves this batch's stages in `last`.
    fn launch(&self, mut appends: Vec<Append>, earlier: Option<Stages>, last: &mut Option<Stages>) -> InFlight {
        let started = Instant::now();
        for append in &appends {
            self.metrics.log_queue_seconds.observe((started - append.queued).as_secs_f64());
        }
        let epochs = appends.iter().map(|a| (a.turn, a.epoch)).collect();
        let batch: Arc<Vec<TurnWrites>> = Arc::new(
            appends
                .iter_mut()
                .map(|a| TurnWrites { turn: a.turn, epoch: a.epoch, ops: std::mem::take(&mut a.ops) })
                .collect(),
        );
        let (fenced_tx, fenced_rx) = oneshot::channel();
        let (committed_tx, committed_rx) = oneshot::channel();
        *last = Some(Stages { fenced: fenced_rx, committed: committed_rx });
        let senders = StageSenders { fenced: Some(fenced_tx), committed: Some(committed_tx) };
        let store = self.store.clone();
        let pipelined = self.depth > 1;
        let written = batch.clone();
        let task =
            tokio::spawn(async move { write_and_commit(store.as_ref(), &written, earlier, senders, pipelined).await });
        InFlight { appends, batch, epochs, started, task }
    }

    /// A batch that failed, retried alone (nothing else of this writer is in flight): as one
    /// transaction again (after an interruption, recognising its own commit), else append by
    /// append, so one turn's bad append does not sink the others that shared its batch.
    async fn recover(&self, appends: Vec<Append>, batch: Vec<TurnWrites>, error: StoreError) {
        let interrupted = error.is_transient();
        // Pipelined, a batch inserts before its fence: a refused append's rows (a stale runner's
        // sequence numbers) can fail the whole insert, which the fence-first retry avoids.
        let outcomes = if interrupted || (self.depth > 1 && error.is_refused_by_database()) {
            tracing::warn!(%error, appends = batch.len(), "an event log batch failed; trying it again on its own");
            match commit_with_retry(self.store.as_ref(), &batch, interrupted).await {
                Ok(outcome) => Some(
                    (0..batch.len())
                        .map(|index| if outcome.is_refused(index) { Err(LogError::Fenced) } else { Ok(()) })
                        .collect(),
                ),
                Err(error) => {
                    tracing::warn!(%error, appends = batch.len(), "an event log batch failed; committing its appends one by one");
                    None
                }
            }
        } else {
            tracing::warn!(%error, appends = batch.len(), "an event log batch failed; committing its appends one by one");
            None
        };
        let outcomes = match outcomes {
            Some(outcomes) => outcomes,
            None => {
                let mut outcomes = Vec::with_capacity(batch.len());
                for (append, writes) in appends.iter().zip(&batch) {
                    // An earlier append of the same runner failed just now: this one would
                    // leave a hole.
                    let outcome = if append.health.is_fenced() {
                        Err(LogError::Fenced)
                    } else if append.health.is_failed() {
                        Err(LogError::Abandoned)
                    } else {
                        match commit_with_retry(self.store.as_ref(), std::slice::from_ref(writes), false).await {
                            Ok(outcome) if outcome.refused.is_empty() => Ok(()),
                            Ok(_) => Err(LogError::Fenced),
                            Err(error) => Err(LogError::Commit(Arc::new(error))),
                        }
                    };
                    append.health.record(&outcome);
                    outcomes.push(outcome);
                }
                outcomes
            }
        };
        self.settle(appends, batch, outcomes, Instant::now());
    }

    /// After a batch's commit: counts it, flags the runners it refused or failed, hands the
    /// committed events to the streams, answers the appends that wait, and queues the
    /// announcement to other instances.
    fn settle(
        &self,
        appends: Vec<Append>,
        batch: Vec<TurnWrites>,
        outcomes: Vec<Result<(), LogError>>,
        acknowledged: Instant,
    ) {
        let events = |writes: &TurnWrites| writes.ops.iter().filter(|op| matches!(op, WriteOp::Event { .. })).count();
        self.metrics.append_batch_events.observe(batch.iter().map(events).sum::<usize>() as f64);
        let mut committed = Vec::new();
        let mut settled = Vec::with_capacity(appends.len());
        for ((append, writes), outcome) in appends.into_iter().zip(batch).zip(outcomes) {
            match &outcome {
                Ok(()) => {
                    self.metrics.events_appended.inc_by(events(&writes) as u64);
                    let opened = writes.ops.iter().filter(|op| matches!(op, WriteOp::OpenInterrupt(_))).count();
                    self.metrics.interrupts_opened.inc_by(opened as u64);
                    committed.extend(writes.ops);
                }
                Err(LogError::Fenced) => {
                    tracing::warn!(
                        turn = append.turn,
                        epoch = append.epoch,
                        "the log refused a stale runner's append; the runner stops"
                    );
                }
                Err(error) => {
                    tracing::error!(turn = append.turn, %error, "a turn's append failed; the turn stops");
                }
            }
            append.health.record(&outcome);
            settled.push((append, outcome));
        }
        let appended = publish(&self.hub, committed);
        for (append, outcome) in settled {
            answer(append, outcome);
        }
        if !appended.is_empty() {
            let _ = self.announce.send((appended, acknowledged));
        }
    }
}

/// Tells an append's waiter (if any) how it went.
fn answer(append: Append, outcome: Result<(), LogError>) {
    if let Some(done) = append.committed {
        let _ = done.send(outcome);
    }
}

/// A batch's way through its own transaction: written (events first when pipelined, its fence
/// only once the batch before it took its own), then committed once the batch before it
/// committed. It tells the batch behind it of each stage, failures included, and rolls back
/// before it tells of a failure, so the batch behind it never waits on its locks.
async fn write_and_commit(
    store: &dyn Store,
    batch: &[TurnWrites],
    earlier: Option<Stages>,
    mut stages: StageSenders,
    pipelined: bool,
) -> Finished {
    let (earlier_fenced, earlier_committed) = match earlier {
        Some(Stages { fenced, committed }) => (Some(fenced), Some(committed)),
        None => (None, None),
    };
    let written = if pipelined {
        let gate = async move {
            // Past the wait, the batch before it is presumed stuck on this one's rows: this one
            // gives way (rolls back and goes again after it).
            tokio::time::timeout(FENCE_WAIT, reached(earlier_fenced)).await.unwrap_or(false)
        };
        match store.write_batch_ahead(batch, gate.boxed()).await {
            Ok(WrittenAhead::Open(open)) => Ok(Some((BatchOutcome::default(), open))),
            // Its fence refused an append it had inserted: written again fence first, still
            // after the batch before it took its fence (the gate passed).
            Ok(WrittenAhead::Refused) => store.write_batch(batch).await.map(|w| Some((w.outcome, w.open))),
            Ok(WrittenAhead::Abandoned) => Ok(None),
            Err(error) => Err(error),
        }
    } else {
        store.write_batch(batch).await.map(|w| Some((w.outcome, w.open)))
    };
    let (outcome, open) = match written {
        Ok(Some(written)) => written,
        Ok(None) => {
            stages.committed(false);
            return Finished::Abandoned;
        }
        Err(error) => {
            stages.committed(false);
            return Finished::Failed(error);
        }
    };
    stages.fenced(true);
    if !reached(earlier_committed).await {
        open.rollback().await;
        stages.committed(false);
        return Finished::Abandoned;
    }
    let sent = Instant::now();
    match open.commit().await {
        Ok(()) => {
            let acknowledged = Instant::now();
            stages.committed(true);
            Finished::Committed { outcome, sent, acknowledged }
        }
        Err(error) => {
            stages.committed(false);
            Finished::Failed(error)
        }
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
///
/// `interrupted`: an earlier attempt already failed in a way that may have committed it (the
/// first attempt then waits a moment, as any retry does).
async fn commit_with_retry(
    store: &dyn Store,
    batch: &[TurnWrites],
    mut interrupted: bool,
) -> Result<BatchOutcome, StoreError> {
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(2));
    if interrupted {
        backoff.wait().await;
    }
    loop {
        match store.commit_batch(batch).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) if error.is_transient() => {
                interrupted = true;
                let delay = backoff.next_delay();
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "event log commit failed; retrying");
                tokio::time::sleep(delay).await;
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
async fn announce(store: Arc<dyn Store>, mut queue: mpsc::UnboundedReceiver<Announcement>, metrics: Arc<Metrics>) {
    while let Some((first, since)) = queue.recv().await {
        let mut newest: BTreeMap<i64, i64> = first.into_iter().collect();
        while let Ok((more, _)) = queue.try_recv() {
            for (turn, seq) in more {
                let entry = newest.entry(turn).or_insert(seq);
                *entry = (*entry).max(seq);
            }
        }
        let pairs: Vec<(i64, i64)> = newest.into_iter().collect();
        match store.announce_appends(&pairs).await {
            // Timed from the oldest commit it covers: what the other instances' streams waited.
            Ok(()) => metrics.log_notify_seconds.observe(since.elapsed().as_secs_f64()),
            // Streams elsewhere also poll the log, so a lost notification only delays them.
            Err(error) => tracing::warn!(%error, "could not announce appends to other instances"),
        }
    }
}
