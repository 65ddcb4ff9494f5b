//! What differs between the two databases, as one trait: [`Backend`]. Each role of the store
//! (`threads.rs`, `events.rs`, …) is written once, generically, for every `B: Backend`; the
//! backends (`postgres.rs`, `sqlite.rs`) supply their pools, their locking and the few
//! statements that cannot be shared (array parameters, notifications).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use sqlx::{Pool, Transaction};

use super::error::StoreError;
use super::rows::events::{BatchOutcome, PartitionUpkeep, StoredEvent, TurnWrites};
use super::rows::threads::TurnStatus;
use super::segments::Segment;
use super::sql::SqlDb;

/// What one instance tells the others sharing the database (and what a listener hears).
#[derive(Debug, Clone, PartialEq)]
pub enum WakeUp {
    /// The turn's log holds committed events up to `seq`: streams following it read on.
    Committed { turn: i64, seq: i64 },
    /// The turn's newest committed events themselves (a notification they fitted in): streams
    /// following it are fed from them without reading the table.
    Events { turn: i64, events: Vec<StoredEvent> },
    /// A cancel was requested for the turn: the instance running it flips its switch.
    Cancel { turn: i64 },
    /// A turn started on the thread: connect streams watching it look for the new turn.
    NewTurn { thread: i64 },
    /// Notifications may have been lost (the listening connection dropped, or one was too long
    /// to send whole): every stream and every watch looks at the log again.
    Lost,
}

/// The wake-ups other instances send, a notification's worth at a time.
pub(crate) type Wakeups = tokio::sync::mpsc::Receiver<Vec<WakeUp>>;

#[async_trait]
pub(crate) trait Backend: Send + Sync + 'static {
    type Db: SqlDb;

    /// Whether other instances may share this database.
    const SHARED: bool;
    /// Appended to the claim's inner `SELECT` so racing claimers pass over a row another one
    /// holds (`FOR UPDATE SKIP LOCKED`), or empty where the database has no row locks.
    const SKIP_LOCKED: &'static str;
    /// How a transaction that must not interleave with another writer begins (a decision, a
    /// batch): PostgreSQL locks rows within it, SQLite takes its write lock at once.
    const BEGIN_WRITE: &'static str;
    /// Appended to a `SELECT` of one row the transaction then changes (`FOR UPDATE`).
    const LOCK_ROW: &'static str;
    /// How many event log batches may be written and uncommitted at once (each holds a write
    /// connection): 1 where writes go through one connection.
    const MAX_PIPELINE_DEPTH: usize;
    /// Appended to a `SELECT` of a row that must not change before the transaction commits,
    /// while others may read it too (`FOR SHARE`): a claim reading the owner's lease.
    const LOCK_SHARED: &'static str;
    /// A statement (`$1`: the tenant) that makes every transaction starting a turn of one
    /// tenant wait for the one before it to commit, so each counts the turns the others
    /// started (§8 limits); empty where [`Backend::BEGIN_WRITE`] already serialises writers.
    const LOCK_TENANT: &'static str;

    fn read_pool(&self) -> &Pool<Self::Db>;
    fn write_pool(&self) -> &Pool<Self::Db>;

    async fn run_migrations(&self) -> Result<(), StoreError>;

    /// Locks the rows of `turns` (ascending ids) for the committing transaction and reads each
    /// one's epoch and status under the lock, and whether another instance follows it: the
    /// fence of a batch.
    async fn lock_turns(
        &self,
        tx: &mut Transaction<'static, Self::Db>,
        turns: &[i64],
        now_ms: i64,
    ) -> Result<Fence, StoreError>;

    /// The whole batch in one statement, fence included, when this database and this batch
    /// allow it (`None`: write it the transactional way).
    async fn write_at_once(&self, _batch: &[TurnWrites], _now_ms: i64) -> Result<Option<BatchOutcome>, StoreError> {
        Ok(None)
    }

    /// Whether a batch's fence reads the follow marks of its turns (off where the bus delivers
    /// a turn's messages to its followers only). Nothing where no other instance can follow.
    fn set_follower_notices(&self, _on: bool) {}

    /// Each turn's newest sequence number in one query, where the database can (`None`: ask
    /// turn by turn).
    async fn last_seqs_at_once(&self, _turns: &[i64]) -> Result<Option<HashMap<i64, i64>>, StoreError> {
        Ok(None)
    }

    /// Marks `turns` as followed from this instance until `until_ms` (see
    /// `migrations/postgres/0017_followers.sql`). Nothing where no other instance can run them.
    async fn follow_turns(&self, _turns: &[i64], _until_ms: i64) -> Result<(), StoreError> {
        Ok(())
    }

    /// The turn ids per partition of the log that migrating (and a batch finding no partition)
    /// makes them with. Nothing where the log is not partitioned.
    fn set_partition_turns(&self, _turns: i64) {}

    /// Makes the log's partitions the coming turns need (`turns_per_partition` turn ids each)
    /// and drops those whose turns are all gone. Nothing where the log is not partitioned.
    async fn keep_partitions(&self, _turns_per_partition: i64, _now_ms: i64) -> Result<PartitionUpkeep, StoreError> {
        Ok(PartitionUpkeep::default())
    }

    /// Inserts a batch's segments (its events, a row per turn: see [`super::segments`]).
    async fn insert_segments(
        &self,
        tx: &mut Transaction<'static, Self::Db>,
        segments: &[Segment],
    ) -> Result<(), StoreError>;

    async fn listen(&self) -> Result<Option<Wakeups>, StoreError>;
    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), StoreError>;
}

/// A batch's turns as its fence read them under their row locks.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    /// Each turn's epoch and status.
    pub current: HashMap<i64, (i64, TurnStatus)>,
    /// The turns a stream on another instance follows.
    pub followed: HashSet<i64>,
    /// The turns whose cancel was asked for: none of them may begin to wait.
    pub cancelling: HashSet<i64>,
}

/// The fence's rows, `(id, epoch, status, followed)` as read, by turn. A row whose status the
/// gateway does not know is left out: its turn is fenced like a missing one, never written to.
pub(crate) fn fence_rows(rows: impl IntoIterator<Item = (i64, i64, String, bool)>) -> Fence {
    let mut fence = Fence::default();
    for (id, epoch, status, followed) in rows {
        let Ok(status) = TurnStatus::parse(&status) else { continue };
        fence.current.insert(id, (epoch, status));
        if followed {
            fence.followed.insert(id);
        }
    }
    fence
}
