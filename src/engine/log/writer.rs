//! One writer task: it gathers its queue's appends into batches (sized by what is waiting,
//! never by a timer), launches them (pipelined up to the depth), and settles each in order once
//! it committed: flags the runners it refused, hands the events to the streams, answers the
//! appends that wait and queues the announcement to other instances.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::append::{publish, verdict, Announcement, Append, LogError};
use super::stages::{write_and_commit, Finished, StageSenders, Stages};
use crate::engine::stream::hub::Hub;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, TurnWrites, WriteOp};

/// Appends waiting before a batch is launched behind one still in flight.
const PIPELINE_BACKLOG: usize = 32;

/// One writer task: its queue's batches, written (pipelined up to `depth`) and committed in order.
pub(super) struct Writer {
    pub(super) store: Arc<dyn Store>,
    /// The engine's clock: the time of day a batch's fence reads follow marks against.
    pub(super) clock: Arc<dyn crate::clock::Clock>,
    pub(super) hub: Arc<Hub>,
    pub(super) announce: mpsc::UnboundedSender<Announcement>,
    /// Whether only the turns a batch's fence found followed are announced (else all).
    pub(super) followed_only: bool,
    pub(super) metrics: Arc<Metrics>,
    pub(super) batch_max_events: usize,
    pub(super) depth: usize,
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

impl Writer {
    pub(super) async fn run(self, mut queue: mpsc::Receiver<Append>) {
        // Appends of batches rolled back behind a failed one: older than anything queued.
        let mut requeued: VecDeque<Append> = VecDeque::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // The stages of the newest batch in flight, for the next one to wait on.
        let mut last: Option<Stages> = None;
        let mut closed = false;
        loop {
            // A batch goes behind one in flight only when enough waits to be worth a second
            // transaction's round trips; else it gathers until the one in flight committed (and
            // then goes alone, in one statement where the store can).
            let backlog = requeued.len() + queue.len();
            if in_flight.is_empty() || (in_flight.len() < self.depth && backlog >= PIPELINE_BACKLOG) {
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
            let room = in_flight.len() < self.depth && !closed && requeued.len() < PIPELINE_BACKLOG;
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
                                .map(|index| verdict(&outcome, index))
                                .collect();
                            self.settle(appends, batch, outcomes, &outcome.followed, acknowledged);
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
        let now_ms = self.clock.now_ms();
        let task = tokio::spawn(async move {
            write_and_commit(store.as_ref(), &written, earlier, senders, pipelined, now_ms).await
        });
        InFlight { appends, batch, epochs, started, task }
    }

    /// After a batch's commit: counts it, flags the runners it refused or failed, hands the
    /// committed events to the streams, answers the appends that wait, and queues the
    /// announcement to other instances (of the `followed` turns only, where the bus wants so).
    pub(super) fn settle(
        &self,
        appends: Vec<Append>,
        batch: Vec<TurnWrites>,
        outcomes: Vec<Result<(), LogError>>,
        followed: &[i64],
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
                Err(LogError::WaitCancelled) => {
                    tracing::debug!(turn = append.turn, "a wait met the turn's cancel; the turn ends cancelled");
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
        let appended = publish(&self.hub, committed, |turn| !self.followed_only || followed.contains(&turn));
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
