//! What one append is and how it ends: [`Append`] (a turn's ops, queued for the writer),
//! [`LogError`] and the store's verdict on it, the [`AppendHealth`] a runner reads, and the
//! hand-over of committed events to the hub ([`publish`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::engine::stream::hub::Hub;
use crate::store::{StoreError, StoredEvent, WakeUp, WriteOp};

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
    /// The store refused a wait (interrupts, client results) because the turn's cancel was
    /// asked for before it: nothing of it was written, and the runner ends the turn
    /// `cancelled` from its log.
    #[error("the turn's cancel was asked for before it could wait")]
    WaitCancelled,
}

/// How the store's verdict on the append at `index` of a batch reads for its runner.
pub(super) fn verdict(outcome: &crate::store::BatchOutcome, index: usize) -> Result<(), LogError> {
    if outcome.is_cancelled(index) {
        Err(LogError::WaitCancelled)
    } else if outcome.is_refused(index) {
        Err(LogError::Fenced)
    } else {
        Ok(())
    }
}

/// Whether a turn's appends have all succeeded so far; the writer flips it on a failed batch so
/// the turn stops instead of writing a log with a hole in it.
#[derive(Default)]
pub struct AppendHealth {
    failed: AtomicBool,
    fenced: AtomicBool,
    wait_cancelled: AtomicBool,
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

    /// The store refused the runner's wait because the turn's cancel was asked for: nothing
    /// of the wait was written, and the turn ends `cancelled` (read once: it clears).
    pub fn take_wait_cancelled(&self) -> bool {
        self.wait_cancelled.swap(false, Ordering::AcqRel)
    }

    /// Records an append's outcome: a failure poisons every later append of the runner (a
    /// refused wait does not: the runner ends the turn after the log's last committed event).
    pub(super) fn record(&self, outcome: &Result<(), LogError>) {
        match outcome {
            Ok(()) => {}
            Err(LogError::WaitCancelled) => self.wait_cancelled.store(true, Ordering::Release),
            Err(LogError::Fenced) => {
                self.fenced.store(true, Ordering::Release);
                self.failed.store(true, Ordering::Release);
            }
            Err(_) => self.failed.store(true, Ordering::Release),
        }
    }
}

/// Ops for one turn, committed together in one batch, fenced by the runner's epoch.
pub(super) struct Append {
    pub(super) turn: i64,
    pub(super) epoch: i64,
    pub(super) ops: Vec<WriteOp>,
    pub(super) health: Arc<AppendHealth>,
    pub(super) committed: Option<oneshot::Sender<Result<(), LogError>>>,
    /// When it was queued (for `log_queue_seconds`).
    pub(super) queued: Instant,
}

/// What committed, per turn (its events, or only its newest seq), and when the first of the
/// batches it covers committed.
pub(super) type Announcement = (Vec<WakeUp>, Instant);

/// Hands the committed events to the hub, per turn and in order; returns the events of the
/// turns to announce to other instances.
pub(super) fn publish(hub: &Hub, ops: Vec<WriteOp>, announced: impl Fn(i64) -> bool) -> Vec<WakeUp> {
    let mut by_turn: BTreeMap<i64, Vec<StoredEvent>> = BTreeMap::new();
    for op in ops {
        if let WriteOp::Event { turn, event } = op {
            by_turn.entry(turn).or_default().push(event);
        }
    }
    by_turn
        .into_iter()
        .filter_map(|(turn, events)| {
            let wakeup = announced(turn).then(|| WakeUp::Events { turn, events: events.clone() });
            hub.publish(turn, events);
            wakeup
        })
        .collect()
}
