//! The event log: [`EventLog`]. It is written only in batches of many turns' writes at once:
//! one transaction per batch, never one per event, each turn's writes fenced by its ownership
//! epoch inside that transaction. [`EventLog::commit_batch`] does it in one call; the
//! group-commit writer calls its two halves, [`EventLog::write_batch`] (or, to overlap a batch's
//! writing with the previous batch's commit, [`EventLog::write_batch_ahead`]) and
//! [`OpenBatch::commit`], so it can time them and order the commits of batches written side by
//! side.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use sqlx::Transaction;

use super::backend::{Backend, WakeUp, Wakeups};
use super::error::StoreError;
use super::rows::events::{
    batch_turns, fence_batch, fence_waits, BatchOutcome, EventKind, PartitionUpkeep, StoredEvent, TurnWrites, WriteOp,
};
use super::segments::{page_of, segments_of, LogRow, Segment, MAX_SPAN};
use super::sql::{Record, SqlDb, Stmt};

/// A batch written inside its transaction and not yet committed. Dropping it rolls it back
/// (when its connection is next used); [`OpenBatch::rollback`] does so at once, releasing its
/// locks before the caller goes on.
#[async_trait]
pub trait OpenBatch: Send {
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
    async fn rollback(self: Box<Self>);
}

/// What [`EventLog::write_batch_ahead`] did.
pub enum WrittenAhead {
    /// Every append passed the fence: the batch is written, ready to commit; `followed` are
    /// its turns a stream on another instance follows.
    Open { open: Box<dyn OpenBatch>, followed: Vec<i64> },
    /// The fence refused an append whose events were already inserted: rolled back, to be
    /// written again with [`EventLog::write_batch`].
    Refused,
    /// The gate said no (an earlier batch failed): rolled back before the fence.
    Abandoned,
}

/// A written batch: what its fence refused, and its open transaction.
pub struct WrittenBatch {
    pub outcome: BatchOutcome,
    pub open: Box<dyn OpenBatch>,
}

struct OpenTx<DB: sqlx::Database>(Transaction<'static, DB>);

#[async_trait]
impl<DB: sqlx::Database> OpenBatch for OpenTx<DB> {
    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.0.commit().await?;
        Ok(())
    }

    async fn rollback(self: Box<Self>) {
        if let Err(error) = self.0.rollback().await {
            // The connection is gone: the server ends the transaction (and its locks) with it.
            tracing::debug!(%error, "rolling back an event log batch failed");
        }
    }
}

#[async_trait]
pub trait EventLog: Send + Sync {
    /// Group commit: every runner's writes in one transaction, each fenced by its epoch (see
    /// [`TurnWrites`]); the refused ones write nothing and are named in the outcome. `now_ms`
    /// is the writer's time of day, which the turns' follow marks are read against.
    async fn commit_batch(&self, batch: &[TurnWrites], now_ms: i64) -> Result<BatchOutcome, StoreError> {
        let written = self.write_batch(batch, now_ms).await?;
        written.open.commit().await?;
        Ok(written.outcome)
    }
    /// The batch written, fence first (`BEGIN`, the turns locked and their epochs read, the
    /// admitted events inserted, the side ops), left open for its commit.
    async fn write_batch(&self, batch: &[TurnWrites], now_ms: i64) -> Result<WrittenBatch, StoreError>;
    /// The batch written events first, fence after (`BEGIN`, every event inserted, then, once
    /// `gate` yields `true`, the turns locked and fenced, then the side ops). The insert takes
    /// no lock on `turns`, so it can run while an earlier batch of the same turns still holds
    /// their rows; only the fence waits for that batch's commit, and `gate` lets the caller
    /// hold the fence back until the earlier batch's own fence returned.
    async fn write_batch_ahead(
        &self,
        batch: &[TurnWrites],
        gate: BoxFuture<'_, bool>,
        now_ms: i64,
    ) -> Result<WrittenAhead, StoreError>;
    /// The batch written and committed in one statement (one round trip: fence, inserts,
    /// checkpoints and the followers' notice), when the store and the batch allow it; `None`:
    /// nothing was written, use [`EventLog::write_batch`]. Only for a batch with no other in
    /// flight: it commits as soon as it is written.
    async fn commit_at_once(&self, batch: &[TurnWrites], now_ms: i64) -> Result<Option<BatchOutcome>, StoreError>;
    /// Marks `turns` as followed by streams on this instance until `until_ms`: the batches of
    /// their runner (on another instance) notify this one of their events from then on.
    async fn follow_turns(&self, turns: &[i64], until_ms: i64) -> Result<(), StoreError>;
    /// Each turn's newest sequence number (0 for none), in one query: a follower's check for
    /// a notice it may have missed.
    async fn last_seqs(&self, turns: &[i64]) -> Result<HashMap<i64, i64>, StoreError>;
    /// Whether a batch's fence reads the follow marks of its turns (PostgreSQL; off where the
    /// bus delivers a turn's messages to its followers only).
    fn set_follower_notices(&self, on: bool);
    /// How many batches this store can have written and uncommitted at once, each on its own
    /// connection: 1 where there is a single write connection (SQLite).
    fn max_pipeline_depth(&self) -> usize;
    /// The turn ids per partition of the log (`event_log.partition_turns`) that migrating the
    /// database, and a batch that finds no partition for its turn, make them with (PostgreSQL).
    fn set_log_partition_turns(&self, turns: i64);
    /// Makes the log's partitions the coming turns need, `turns_per_partition` turn ids each,
    /// and drops those no turn is left in (PostgreSQL; nothing on SQLite). Every instance runs
    /// it now and then; a batch that finds no partition for its turn runs it too.
    async fn keep_log_partitions(&self, turns_per_partition: i64, now_ms: i64) -> Result<PartitionUpkeep, StoreError>;
    /// Up to `limit` events of a turn after `after_seq`, in order.
    async fn events_after(&self, turn: i64, after_seq: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError>;
    async fn last_seq(&self, turn: i64) -> Result<i64, StoreError>;
    /// Wake-ups from other instances sharing the database. `None` where the store serves one
    /// instance only (SQLite).
    async fn listen_for_appends(&self) -> Result<Option<Wakeups>, StoreError>;
    /// Tells other instances what happened here: turns' logs grew (one notification per
    /// batch), a cancel was asked for, a turn started.
    async fn announce_appends(&self, wakeups: &[WakeUp]) -> Result<(), StoreError>;
}

/// A page of the log after `$2`, at most `$3` events, as rows of both tables: segments
/// (`segment`) and events logged before segments (`body`). Sequence numbers are dense within a
/// turn, so a page is a key range: the segments ending after `$2` and starting by `$2 + $3`,
/// found by a bounded scan of the key (a segment spans at most `$4` = [`MAX_SPAN`], so none
/// that starts in range ends after `$2 + $3 + $4`). The planner reads no more than the page,
/// whatever its statistics say (an open-ended `seq > $2` was planned, on a fresh table, as a
/// scan and sort of the turn's whole rest).
const LOG_IN_RANGE: &str = "SELECT first_seq AS seq, CAST(0 AS SMALLINT) AS kind, at_ms, body AS segment, \
        CAST(NULL AS TEXT) AS body FROM event_segments \
     WHERE turn = $1 AND last_seq > $2 AND last_seq <= $2 + $3 + $4 AND first_seq <= $2 + $3 \
     UNION ALL \
     SELECT seq, kind, at_ms, CAST(NULL AS BYTEA) AS segment, body FROM events \
     WHERE turn = $1 AND seq > $2 AND seq <= $2 + $3 \
     ORDER BY seq";
/// The fallback when a range comes back empty: a gap (events of a batch that failed) must not
/// stall a stream. The first segment after it is enough to go on from.
const LOG_AFTER: &str = "SELECT * FROM (SELECT first_seq AS seq, CAST(0 AS SMALLINT) AS kind, at_ms, \
        body AS segment, CAST(NULL AS TEXT) AS body FROM event_segments \
        WHERE turn = $1 AND last_seq > $2 ORDER BY last_seq LIMIT 1) AS s \
     UNION ALL \
     SELECT * FROM (SELECT seq, kind, at_ms, CAST(NULL AS BYTEA) AS segment, body FROM events \
        WHERE turn = $1 AND seq > $2 ORDER BY seq LIMIT $3) AS e \
     ORDER BY seq";
/// A turn's newest sequence number, from either table (0 for none).
pub(super) const LAST_SEQ: &str = "SELECT COALESCE(MAX(last), 0) AS last FROM \
     (SELECT MAX(last_seq) AS last FROM event_segments WHERE turn = $1 \
      UNION ALL SELECT MAX(seq) FROM events WHERE turn = $1) AS newest";
const INSERT_NOTE: &str = "INSERT INTO notes (thread, note_no, body) VALUES ($1, $2, $3)";
const SET_CHECKPOINT: &str = "UPDATE turns SET checkpoint = $1 WHERE id = $2";
const FINISH_TURN: &str = "UPDATE turns SET status = $1, finished_at_ms = $2 WHERE id = $3";
const INSERT_INTERRUPT: &str = "INSERT INTO interrupts (id, thread, turn, shown, deciders, four_eyes, \
     started_by, expires_at_ms, status, created_at_ms, policy_digest) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9, $10)";
const WAIT_TURN: &str = "UPDATE turns SET status = 'waiting', owner_instance = NULL, lease_until_ms = 0 WHERE id = $1";
/// A turn's end or wait is its thread's latest activity (the order of `GET /v1/threads`). Run
/// after the batch's turns are locked, so the lock order (turns, then their thread) is the
/// one a thread's deletion takes too.
const TOUCH_THREAD_OF_TURN: &str =
    "UPDATE threads SET updated_at_ms = $1 WHERE id = (SELECT thread FROM turns WHERE id = $2) AND updated_at_ms < $1";

fn log_row<DB: SqlDb>(row: &Record<DB>) -> Result<LogRow, StoreError> {
    if let Some(segment) = row.get::<Option<Vec<u8>>>("segment")? {
        return Ok(LogRow::Segment(segment));
    }
    let body =
        row.get::<Option<String>>("body")?.ok_or_else(|| StoreError::Corrupt("a log row with no body".into()))?;
    Ok(LogRow::Event(StoredEvent {
        seq: row.get("seq")?,
        kind: EventKind::from_i16(row.get("kind")?)?,
        body: Bytes::from(body),
        at_ms: row.get("at_ms")?,
    }))
}

/// Runs each non-event op of a batch (notes, checkpoints, finished turns, waits) on `tx`.
async fn apply_side_ops<DB: SqlDb>(tx: &mut Transaction<'static, DB>, ops: &[&WriteOp]) -> Result<(), StoreError> {
    // Only a turn's last checkpoint in the batch is written: within one transaction the earlier
    // ones would be overwritten unseen (a relay checkpoints with every event it relays).
    let mut last_checkpoint = std::collections::HashMap::new();
    for (index, op) in ops.iter().enumerate() {
        if let WriteOp::Checkpoint { turn, .. } = op {
            last_checkpoint.insert(*turn, index);
        }
    }
    for (index, op) in ops.iter().enumerate() {
        match op {
            WriteOp::Event { .. } => {}
            WriteOp::Checkpoint { turn, .. } if last_checkpoint.get(turn) != Some(&index) => {}
            WriteOp::PinNote { thread, note_no, body } => {
                Stmt::new(INSERT_NOTE).bind(*thread).bind(*note_no).bind(body).execute(&mut *tx).await?;
            }
            WriteOp::Checkpoint { turn, checkpoint } => {
                Stmt::new(SET_CHECKPOINT).bind(checkpoint).bind(*turn).execute(&mut *tx).await?;
            }
            WriteOp::FinishTurn { turn, status, at_ms } => {
                Stmt::new(FINISH_TURN).bind(status.as_str()).bind(*at_ms).bind(*turn).execute(&mut *tx).await?;
                Stmt::new(TOUCH_THREAD_OF_TURN).bind(*at_ms).bind(*turn).execute(&mut *tx).await?;
            }
            WriteOp::OpenInterrupt(row) => {
                Stmt::new(INSERT_INTERRUPT)
                    .bind(&row.id)
                    .bind(row.thread)
                    .bind(row.turn)
                    .bind(&row.shown)
                    .bind(&row.deciders)
                    .bind(row.four_eyes)
                    .bind(&row.started_by)
                    .bind(row.expires_at_ms)
                    .bind(row.created_at_ms)
                    .bind(&row.policy_digest)
                    .execute(&mut *tx)
                    .await?;
                Stmt::new(WAIT_TURN).bind(row.turn).execute(&mut *tx).await?;
                Stmt::new(TOUCH_THREAD_OF_TURN).bind(row.created_at_ms).bind(row.turn).execute(&mut *tx).await?;
            }
            WriteOp::WaitTurn { turn } => {
                Stmt::new(WAIT_TURN).bind(*turn).execute(&mut *tx).await?;
            }
        }
    }
    Ok(())
}

/// The segments of the events among `ops` (a batch's, in order): one per turn, the fence
/// having settled the epochs already.
fn segments_of_ops<'a>(ops: impl Iterator<Item = &'a WriteOp>) -> Result<Vec<Segment>, StoreError> {
    segments_of(ops.filter_map(|op| match op {
        WriteOp::Event { turn, event } => Some((*turn, 0, event)),
        _ => None,
    }))
}

/// Rolls `tx` back after `error` and hands the error on: an aborted PostgreSQL transaction
/// keeps its locks until it is rolled back, and a pipelined writer must not leave them held.
async fn abandon<DB: SqlDb, T>(tx: Transaction<'static, DB>, error: StoreError) -> Result<T, StoreError> {
    Box::new(OpenTx(tx)).rollback().await;
    Err(error)
}

#[async_trait]
impl<B: Backend> EventLog for B {
    async fn write_batch(&self, batch: &[TurnWrites], now_ms: i64) -> Result<WrittenBatch, StoreError> {
        // The fence: the batch's turns are locked (in id order, so overlapping batches, claims
        // and renewals never deadlock; on SQLite the write lock is taken at BEGIN) and their
        // epochs read under the lock, so a claim either committed before (and the stale
        // writes are dropped here) or waits for this commit.
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        let written = async {
            let fence = self.lock_turns(&mut tx, &batch_turns(batch), now_ms).await?;
            let mut outcome = fence_batch(batch, &fence.current);
            fence_waits(&mut outcome, batch, &fence.cancelling);
            outcome.followed = fence.followed.iter().copied().collect();
            let ops = outcome.admitted(batch);
            let segments = segments_of_ops(ops.iter().copied())?;
            if !segments.is_empty() {
                self.insert_segments(&mut tx, &segments).await?;
            }
            apply_side_ops(&mut tx, &ops).await?;
            Ok::<_, StoreError>(outcome)
        }
        .await;
        match written {
            Ok(outcome) => Ok(WrittenBatch { outcome, open: Box::new(OpenTx(tx)) }),
            Err(error) => abandon(tx, error).await,
        }
    }

    async fn write_batch_ahead(
        &self,
        batch: &[TurnWrites],
        gate: BoxFuture<'_, bool>,
        now_ms: i64,
    ) -> Result<WrittenAhead, StoreError> {
        // The events table has no foreign key to `turns`, so the insert locks no turn row: a
        // claim or an earlier batch is never blocked by it. The rows stay invisible until the
        // commit, and the fence below (taken, as in `write_batch`, under the turns' row locks
        // held to the commit) decides whether they may be committed at all.
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        let written = async {
            let segments = segments_of_ops(batch.iter().flat_map(|writes| writes.ops.iter()))?;
            if !segments.is_empty() {
                self.insert_segments(&mut tx, &segments).await?;
            }
            if !gate.await {
                return Ok(Err(WrittenAhead::Abandoned));
            }
            let fence = self.lock_turns(&mut tx, &batch_turns(batch), now_ms).await?;
            let mut outcome = fence_batch(batch, &fence.current);
            fence_waits(&mut outcome, batch, &fence.cancelling);
            if !outcome.refused.is_empty() {
                return Ok(Err(WrittenAhead::Refused));
            }
            apply_side_ops(&mut tx, &outcome.admitted(batch)).await?;
            Ok::<_, StoreError>(Ok(fence.followed.iter().copied().collect::<Vec<i64>>()))
        }
        .await;
        match written {
            Ok(Ok(followed)) => Ok(WrittenAhead::Open { open: Box::new(OpenTx(tx)), followed }),
            Ok(Err(undone)) => {
                Box::new(OpenTx(tx)).rollback().await;
                Ok(undone)
            }
            Err(error) => abandon(tx, error).await,
        }
    }

    async fn commit_at_once(&self, batch: &[TurnWrites], now_ms: i64) -> Result<Option<BatchOutcome>, StoreError> {
        self.write_at_once(batch, now_ms).await
    }

    async fn follow_turns(&self, turns: &[i64], until_ms: i64) -> Result<(), StoreError> {
        Backend::follow_turns(self, turns, until_ms).await
    }

    async fn last_seqs(&self, turns: &[i64]) -> Result<HashMap<i64, i64>, StoreError> {
        if let Some(last) = self.last_seqs_at_once(turns).await? {
            return Ok(last);
        }
        let mut last = HashMap::with_capacity(turns.len());
        for &turn in turns {
            last.insert(turn, self.last_seq(turn).await?);
        }
        Ok(last)
    }

    fn set_follower_notices(&self, on: bool) {
        Backend::set_follower_notices(self, on);
    }

    fn max_pipeline_depth(&self) -> usize {
        B::MAX_PIPELINE_DEPTH
    }

    fn set_log_partition_turns(&self, turns: i64) {
        self.set_partition_turns(turns)
    }

    async fn keep_log_partitions(&self, turns_per_partition: i64, now_ms: i64) -> Result<PartitionUpkeep, StoreError> {
        self.keep_partitions(turns_per_partition, now_ms).await
    }

    async fn events_after(&self, turn: i64, after_seq: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let in_range = Stmt::new(LOG_IN_RANGE)
            .bind(turn)
            .bind(after_seq)
            .bind(limit)
            .bind(MAX_SPAN)
            .fetch_all_as(self.read_pool(), log_row)
            .await?;
        let rows = if in_range.is_empty() {
            Stmt::new(LOG_AFTER).bind(turn).bind(after_seq).bind(limit).fetch_all_as(self.read_pool(), log_row).await?
        } else {
            in_range
        };
        page_of(rows, after_seq, limit)
    }

    async fn last_seq(&self, turn: i64) -> Result<i64, StoreError> {
        Stmt::new(LAST_SEQ).bind(turn).fetch_one(self.read_pool()).await?.get("last")
    }

    async fn listen_for_appends(&self) -> Result<Option<Wakeups>, StoreError> {
        self.listen().await
    }

    async fn announce_appends(&self, wakeups: &[WakeUp]) -> Result<(), StoreError> {
        self.announce(wakeups).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::store::rows::events::fence_batch;
    use crate::store::rows::threads::TurnStatus;

    fn event(turn: i64, seq: i64, kind: EventKind) -> WriteOp {
        WriteOp::Event { turn, event: StoredEvent { seq, kind, body: Bytes::from_static(b"{}"), at_ms: seq } }
    }

    fn writes(turn: i64, epoch: i64, ops: Vec<WriteOp>) -> TurnWrites {
        TurnWrites { turn, epoch, ops }
    }

    #[test]
    fn the_fence_admits_current_running_turns_up_to_their_seal() {
        let current = HashMap::from([
            (1, (1, TurnStatus::Running)),
            (2, (3, TurnStatus::Running)),
            (3, (1, TurnStatus::Waiting)),
        ]);
        let batch = [
            writes(1, 1, vec![event(1, 1, EventKind::Plain)]),
            // A stale epoch on a running turn.
            writes(2, 2, vec![event(2, 5, EventKind::Plain)]),
            // A turn that no longer runs.
            writes(3, 1, vec![event(3, 2, EventKind::Plain)]),
            writes(1, 1, vec![event(1, 2, EventKind::RunFinished)]),
            // An empty append writes nothing, so nothing is refused.
            writes(1, 1, Vec::new()),
            // After the seal, even the current epoch writes nothing.
            writes(1, 1, vec![event(1, 3, EventKind::Plain)]),
            // A turn whose row is missing (or whose status is unknown).
            writes(9, 1, vec![event(9, 1, EventKind::Plain)]),
            writes(2, 3, vec![event(2, 5, EventKind::Plain)]),
        ];
        let outcome = fence_batch(&batch, &current);
        assert_eq!(outcome.refused, vec![1, 2, 5, 6]);
        assert!(outcome.is_refused(5) && !outcome.is_refused(4));
        let seqs: Vec<(i64, i64)> = outcome
            .admitted(&batch)
            .iter()
            .filter_map(|op| match op {
                WriteOp::Event { turn, event } => Some((*turn, event.seq)),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, vec![(1, 1), (1, 2), (2, 5)]);
    }

    #[test]
    fn a_fence_row_with_an_unknown_status_is_left_out() {
        let rows = super::super::backend::fence_rows([
            (1, 4, "running".to_string(), true),
            (2, 1, "paused".to_string(), true),
        ]);
        assert_eq!(rows.current, HashMap::from([(1, (4, TurnStatus::Running))]));
        assert_eq!(rows.followed, HashSet::from([1]), "a row left out is not followed either");
    }
}
