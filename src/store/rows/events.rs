//! The event log's rows and a batch's writes, and the fence that decides which writes of a
//! batch are kept: the vocabulary of [`crate::store::EventLog`].

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use super::interrupts::InterruptRow;
use super::threads::TurnStatus;
use crate::store::error::StoreError;

/// What kind of event a log row holds. Run-boundary events are re-rendered per run (they carry
/// the run's ids); the rest are sent as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Plain = 0,
    RunStarted = 1,
    RunFinished = 2,
    RunError = 3,
    StateSnapshot = 4,
    /// The turn waits for interrupts: rendered per caller (§5.2). Ends the run that reaches it
    /// for a caller who may decide something.
    Waiting = 5,
    /// Interrupts were decided (or client tool results arrived) and the turn goes on: the run
    /// that brought them starts here.
    Resumed = 6,
    /// The turn waits for the results of client-declared tools: the run ends `success` with
    /// `pendingToolCallIds` (§9.2).
    ClientWait = 7,
}

impl EventKind {
    pub fn from_i16(value: i16) -> Result<Self, StoreError> {
        Ok(match value {
            0 => EventKind::Plain,
            1 => EventKind::RunStarted,
            2 => EventKind::RunFinished,
            3 => EventKind::RunError,
            4 => EventKind::StateSnapshot,
            5 => EventKind::Waiting,
            6 => EventKind::Resumed,
            7 => EventKind::ClientWait,
            other => return Err(StoreError::Corrupt(format!("event kind {other}"))),
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::RunFinished | EventKind::RunError)
    }
}

/// One row of the event log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub kind: EventKind,
    /// The event's JSON, as the agent produced it (run ids are added when rendered).
    pub body: Bytes,
    pub at_ms: i64,
}

impl StoredEvent {
    /// The body as text: the log stores JSON text, so a body that is not UTF-8 is refused.
    pub(crate) fn body_text(&self) -> Result<&str, StoreError> {
        std::str::from_utf8(&self.body).map_err(|_| StoreError::Corrupt("event body is not UTF-8".into()))
    }
}

/// One runner's writes for its turn, fenced by the ownership epoch the runner holds: the store
/// writes them only while `epoch` is the turn's current one and the turn runs, checked inside
/// the committing transaction. An append that ends the turn (its terminal event, a wait) seals
/// it: nothing after it in the same batch is written either.
#[derive(Debug, Clone)]
pub struct TurnWrites {
    pub turn: i64,
    pub epoch: i64,
    pub ops: Vec<WriteOp>,
}

impl TurnWrites {
    /// Whether these writes end the runner's hold on the turn (it finishes or waits).
    fn seals(&self) -> bool {
        self.ops.iter().any(|op| {
            matches!(op, WriteOp::FinishTurn { .. } | WriteOp::WaitTurn { .. } | WriteOp::OpenInterrupt(_))
                || matches!(op, WriteOp::Event { event, .. } if event.kind.is_terminal())
        })
    }
}

/// One write of a group-committed batch. A batch commits whole or not at all.
#[derive(Debug, Clone)]
pub enum WriteOp {
    Event {
        turn: i64,
        event: StoredEvent,
    },
    PinNote {
        thread: i64,
        note_no: i64,
        body: String,
    },
    Checkpoint {
        turn: i64,
        checkpoint: String,
    },
    FinishTurn {
        turn: i64,
        status: TurnStatus,
        at_ms: i64,
    },
    /// An interrupt opens; its turn is marked waiting in the same batch.
    OpenInterrupt(InterruptRow),
    /// The turn waits for something other than an interrupt (client tool results).
    WaitTurn {
        turn: i64,
    },
}

/// What one upkeep of the log's partitions did (PostgreSQL; nothing on SQLite, which has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionUpkeep {
    /// The partitions made ahead of the turns to come.
    pub created: Vec<String>,
    /// The partitions dropped whole: no turn of their range was left.
    pub dropped: Vec<String>,
}

/// Which appends of a batch the store refused because their epoch was stale or their turn had
/// ended (their indexes in the batch, ascending); everything else was committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub refused: Vec<usize>,
    /// Of the refused appends, those that would have made a turn wait after its cancel was
    /// asked for (see [`fence_waits`]): their runner ends the turn `cancelled` instead.
    pub cancelled: Vec<usize>,
    /// The batch's turns a stream on another instance follows (as the fence read them): the
    /// log writer tells those instances of their new events once the batch committed.
    pub followed: Vec<i64>,
}

impl BatchOutcome {
    /// Whether the append at `index` of the batch was refused.
    pub fn is_refused(&self, index: usize) -> bool {
        self.refused.binary_search(&index).is_ok()
    }

    /// Whether the append at `index` was refused because its turn's cancel was asked for.
    pub fn is_cancelled(&self, index: usize) -> bool {
        self.cancelled.binary_search(&index).is_ok()
    }

    /// The ops of the appends the fence let through, in batch order: what the store writes.
    pub(crate) fn admitted<'a>(&self, batch: &'a [TurnWrites]) -> Vec<&'a WriteOp> {
        batch
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.is_refused(*index))
            .flat_map(|(_, writes)| writes.ops.iter())
            .collect()
    }
}

/// Decides, from the turns' rows as locked by the committing transaction (turn → epoch and
/// status), which appends of a batch may be written: those whose epoch is current on a running
/// turn, up to and including the first append that seals the turn. One pass over the batch.
pub(crate) fn fence_batch(batch: &[TurnWrites], current: &HashMap<i64, (i64, TurnStatus)>) -> BatchOutcome {
    let mut sealed: HashSet<i64> = HashSet::new();
    let mut refused = Vec::new();
    for (index, writes) in batch.iter().enumerate() {
        // An empty append only waits for what was queued before it: it writes nothing to fence.
        if writes.ops.is_empty() {
            continue;
        }
        let current_ok = current.get(&writes.turn) == Some(&(writes.epoch, TurnStatus::Running));
        if !current_ok || sealed.contains(&writes.turn) {
            refused.push(index);
            continue;
        }
        if writes.seals() {
            sealed.insert(writes.turn);
        }
    }
    BatchOutcome { refused, cancelled: Vec::new(), followed: Vec::new() }
}

/// Refuses, besides what [`fence_batch`] refused, every append that would make a turn wait
/// (open interrupts, wait for client results) when the turn's cancel was asked for, as its row
/// reads under the batch's lock: a cancel answered `202` while the turn ran committed before
/// this wait, and must end the turn, not see it wait (§4.1). Nothing of such an append is
/// written; its runner ends the turn `cancelled` from what its log holds.
pub(crate) fn fence_waits(outcome: &mut BatchOutcome, batch: &[TurnWrites], cancelling: &HashSet<i64>) {
    if cancelling.is_empty() {
        return;
    }
    for (index, writes) in batch.iter().enumerate() {
        let waits = writes.ops.iter().any(|op| matches!(op, WriteOp::OpenInterrupt(_) | WriteOp::WaitTurn { .. }));
        if waits && cancelling.contains(&writes.turn) && !outcome.is_refused(index) {
            outcome.refused.push(index);
            outcome.cancelled.push(index);
        }
    }
    outcome.refused.sort_unstable();
}

/// The distinct turns of a batch, in ascending order: rows are locked in this order so two
/// transactions locking overlapping sets never deadlock.
pub(crate) fn batch_turns(batch: &[TurnWrites]) -> Vec<i64> {
    let mut turns: Vec<i64> = batch.iter().map(|w| w.turn).collect();
    turns.sort_unstable();
    turns.dedup();
    turns
}
