//! Interrupts and their decisions (§5): [`InterruptStore`]. Interrupts open inside a log batch
//! (`WriteOp::OpenInterrupt`); they are decided here, all of a turn's decisions in one
//! transaction with their decision event and audit rows.

use async_trait::async_trait;
use sqlx::Transaction;

use super::audit::insert_audit;
use super::backend::Backend;
use super::error::StoreError;
use super::events::LAST_SEQ;
use super::rows::audit::AuditEntry;
use super::rows::events::StoredEvent;
use super::rows::interrupts::{Decided, Decision, InterruptRow, InterruptStatus};
use super::rows::threads::TurnStatus;
use super::segments::segments_of;
use super::sql::{Record, SqlDb, Stmt};
use super::threads::HELD_BY_INSTANCE;

/// One round of decisions of one turn, recorded together with their decision event `marker`
/// (its `at_ms` is the decisions' time) and the `audit` rows, by `instance`. With `run`, the run
/// id of the request that decides is recorded too.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRound<'a> {
    pub turn: i64,
    pub decisions: &'a [Decision],
    pub marker: &'a StoredEvent,
    pub audit: &'a [AuditEntry],
    pub run: Option<&'a str>,
    pub instance: &'a str,
}

#[async_trait]
pub trait InterruptStore: Send + Sync {
    /// The turn's interrupts, oldest first.
    async fn turn_interrupts(&self, turn: i64) -> Result<Vec<InterruptRow>, StoreError>;
    /// The tenant's interrupt with this id (a client names it on the decision route): none
    /// when the id is another tenant's.
    async fn find_interrupt(&self, tenant: &str, id: &str) -> Result<Option<InterruptRow>, StoreError>;
    /// The tenant's open interrupts not yet past their deadline at `now_ms`, oldest first, at
    /// most `limit` (a person's inbox reads them and keeps those they may decide or see).
    async fn tenant_open_interrupts(
        &self,
        tenant: &str,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<InterruptRow>, StoreError>;
    /// Open interrupts whose deadline has come at `now_ms` (a resume at that instant is refused as
    /// expired too), of every tenant (the expiry sweeper).
    async fn lapsed_interrupts(&self, now_ms: i64) -> Result<Vec<InterruptRow>, StoreError>;
    /// Records the `decisions` of one waiting turn in one transaction, all or nothing, with the
    /// decision event `marker` (its seq is assigned here) and the decisions' `audit` rows. When
    /// no interrupt of the turn stays open the turn runs again, owned by `instance` under a new
    /// epoch (lapsed at once when `instance` holds no lease: a command's engine, which then
    /// releases it). A turn that no longer waits records nothing.
    /// With `run`, the run id of the request that decides is recorded too, following the turn
    /// from the decision event on (as [`super::ThreadStore::add_run`] records it), unless the id
    /// is taken.
    async fn decide_interrupts(&self, round: &DecisionRound<'_>) -> Result<Decided, StoreError>;
    /// Cancels a waiting turn: its open interrupts are withdrawn and it runs again, owned by
    /// `instance` under a new epoch with its cancel asked for, so that its runner ends it
    /// `cancelled` in its log (and every stream following it ends), as a running turn's cancel
    /// does. Returns the new epoch; `None` when the turn does not wait (any more), or, with
    /// `idle_before` (retention), when its thread was active since then (checked under the
    /// turn's lock: a turn that waits now since after that time is never cancelled).
    async fn cancel_waiting_turn(
        &self,
        turn: i64,
        instance: &str,
        idle_before: Option<i64>,
    ) -> Result<Option<i64>, StoreError>;
}

const TURN_INTERRUPTS: &str = "SELECT * FROM interrupts WHERE turn = $1 ORDER BY created_at_ms, id";
const FIND_INTERRUPT: &str =
    "SELECT i.* FROM interrupts i JOIN threads h ON h.id = i.thread WHERE h.tenant = $1 AND i.id = $2";
const TENANT_OPEN_INTERRUPTS: &str = "SELECT i.* FROM interrupts i JOIN threads h ON h.id = i.thread \
     WHERE h.tenant = $1 AND i.status = 'open' AND i.expires_at_ms > $2 ORDER BY i.created_at_ms, i.id LIMIT $3";
const LAPSED_INTERRUPTS: &str =
    "SELECT * FROM interrupts WHERE status = 'open' AND expires_at_ms <= $1 ORDER BY expires_at_ms LIMIT 100";
const DECIDE_INTERRUPT: &str = "UPDATE interrupts SET status = $1, decision = $2, decided_by = $3, \
     decided_via = $4, decided_at_ms = $5 WHERE id = $6 AND turn = $7 AND status = 'open'";
const MARK_DECIDED_SEQ: &str = "UPDATE interrupts SET decided_seq = $1 WHERE id = $2";
/// A run id following a turn of its thread (`$4`) from `$2`; nothing when the id is taken.
const INSERT_RUN_OF_TURN: &str = "INSERT INTO runs (thread, run_id, turn, start_seq, created_at_ms) \
     SELECT thread, $1, id, $2, $3 FROM turns WHERE id = $4 ON CONFLICT (thread, run_id) DO NOTHING";
const OPEN_INTERRUPTS_LEFT: &str = "SELECT COUNT(*) AS open FROM interrupts WHERE turn = $1 AND status = 'open'";
const RESUME_TURN: &str = "UPDATE turns SET status = 'running', owner_instance = $1, lease_until_ms = $2, \
     epoch = epoch + 1 WHERE id = $3 AND status = 'waiting' RETURNING epoch";
const THREAD_ACTIVITY_OF_TURN: &str =
    "SELECT h.updated_at_ms AS at FROM threads h JOIN turns t ON t.thread = h.id WHERE t.id = $1";
const WITHDRAW_INTERRUPTS: &str = "UPDATE interrupts SET status = 'withdrawn' WHERE turn = $1 AND status = 'open'";
const RESUME_TO_CANCEL: &str = "UPDATE turns SET status = 'running', cancel_requested = TRUE, owner_instance = $1, \
     lease_until_ms = $2, epoch = epoch + 1 WHERE id = $3 AND status = 'waiting' RETURNING epoch";

fn interrupt_row<DB: SqlDb>(row: &Record<DB>) -> Result<InterruptRow, StoreError> {
    Ok(InterruptRow {
        id: row.get("id")?,
        thread: row.get("thread")?,
        turn: row.get("turn")?,
        shown: row.get("shown")?,
        deciders: row.get("deciders")?,
        four_eyes: row.get("four_eyes")?,
        started_by: row.get("started_by")?,
        expires_at_ms: row.get("expires_at_ms")?,
        status: InterruptStatus::parse(&row.get::<String>("status")?)?,
        decision: row.get("decision")?,
        decided_by: row.get("decided_by")?,
        decided_seq: row.get("decided_seq")?,
        created_at_ms: row.get("created_at_ms")?,
        policy_digest: row.get("policy_digest")?,
    })
}

/// A write transaction holding the lock of `turn`'s row while the turn waits; `None` (nothing
/// held) when it does not wait.
async fn begin_on_waiting_turn<B: Backend>(
    backend: &B,
    turn: i64,
) -> Result<Option<Transaction<'static, B::Db>>, StoreError> {
    let mut tx = backend.write_pool().begin_with(B::BEGIN_WRITE).await?;
    let status: Option<String> = match Stmt::new(&format!("SELECT status FROM turns WHERE id = $1 {}", B::LOCK_ROW))
        .bind(turn)
        .fetch_optional(&mut tx)
        .await?
    {
        Some(row) => Some(row.get("status")?),
        None => None,
    };
    if status.as_deref() != Some(TurnStatus::Waiting.as_str()) {
        tx.rollback().await?;
        return Ok(None);
    }
    Ok(Some(tx))
}

/// Sets the waiting `turn` (locked by `tx`) running again, owned by `instance` under a new
/// epoch, with `statement` (a resume, or a resume to be cancelled); the new epoch.
async fn run_again<B: Backend>(
    tx: &mut Transaction<'static, B::Db>,
    statement: &str,
    instance: &str,
    turn: i64,
) -> Result<Option<i64>, StoreError> {
    match Stmt::new(statement).bind(instance).bind(HELD_BY_INSTANCE).bind(turn).fetch_optional(tx).await? {
        Some(row) => Ok(Some(row.get::<i64>("epoch")?)),
        None => Ok(None),
    }
}

#[async_trait]
impl<B: Backend> InterruptStore for B {
    async fn turn_interrupts(&self, turn: i64) -> Result<Vec<InterruptRow>, StoreError> {
        Stmt::new(TURN_INTERRUPTS).bind(turn).fetch_all_as(self.read_pool(), interrupt_row).await
    }

    async fn find_interrupt(&self, tenant: &str, id: &str) -> Result<Option<InterruptRow>, StoreError> {
        Stmt::new(FIND_INTERRUPT).bind(tenant).bind(id).fetch_optional_as(self.read_pool(), interrupt_row).await
    }

    async fn tenant_open_interrupts(
        &self,
        tenant: &str,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<InterruptRow>, StoreError> {
        Stmt::new(TENANT_OPEN_INTERRUPTS)
            .bind(tenant)
            .bind(now_ms)
            .bind(limit)
            .fetch_all_as(self.read_pool(), interrupt_row)
            .await
    }

    async fn lapsed_interrupts(&self, now_ms: i64) -> Result<Vec<InterruptRow>, StoreError> {
        Stmt::new(LAPSED_INTERRUPTS).bind(now_ms).fetch_all_as(self.read_pool(), interrupt_row).await
    }

    async fn decide_interrupts(&self, round: &DecisionRound<'_>) -> Result<Decided, StoreError> {
        let DecisionRound { turn, decisions, marker, audit, run, instance } = *round;
        // Deciders of one turn queue up here, so the decision event's seq is theirs alone; and
        // only a waiting turn takes decisions (or client results): a running one has a runner
        // appending, whose numbering a decision event would cut into.
        let Some(mut tx) = begin_on_waiting_turn(self, turn).await? else { return Ok(Decided::AlreadyDecided) };
        let at_ms = marker.at_ms;
        for decision in decisions {
            let changed = Stmt::new(DECIDE_INTERRUPT)
                .bind(decision.status.as_str())
                .bind(&decision.decision)
                .bind(&decision.decided_by)
                .bind(&decision.decided_via)
                .bind(at_ms)
                .bind(&decision.interrupt_id)
                .bind(turn)
                .execute(&mut tx)
                .await?;
            if changed == 0 {
                tx.rollback().await?;
                return Ok(Decided::AlreadyDecided);
            }
        }
        let last: i64 = Stmt::new(LAST_SEQ).bind(turn).fetch_one(&mut tx).await?.get("last")?;
        let seq = last + 1;
        let marker = StoredEvent { seq, ..marker.clone() };
        self.insert_segments(&mut tx, &segments_of([(turn, 0, &marker)])?).await?;
        for decision in decisions {
            Stmt::new(MARK_DECIDED_SEQ).bind(seq).bind(&decision.interrupt_id).execute(&mut tx).await?;
        }
        // The decisions' audit rows commit with them: no decision without its record.
        for entry in audit {
            insert_audit(&mut tx, entry).await?;
        }
        // The run that decides begins just before its decision event, recorded with it, so a
        // resume needs no round trip of its own to record its run.
        let run_recorded = match run {
            Some(run_id) => {
                Stmt::new(INSERT_RUN_OF_TURN).bind(run_id).bind(seq - 1).bind(at_ms).bind(turn).execute(&mut tx).await?
                    == 1
            }
            None => false,
        };
        let open: i64 = Stmt::new(OPEN_INTERRUPTS_LEFT).bind(turn).fetch_one(&mut tx).await?.get("open")?;
        let resumed = if open == 0 { run_again::<B>(&mut tx, RESUME_TURN, instance, turn).await? } else { None };
        tx.commit().await?;
        Ok(Decided::Recorded { seq, resumed, run_recorded })
    }

    async fn cancel_waiting_turn(
        &self,
        turn: i64,
        instance: &str,
        idle_before: Option<i64>,
    ) -> Result<Option<i64>, StoreError> {
        // Under the turn's lock, as a decision takes it: the two never both resume the turn.
        let Some(mut tx) = begin_on_waiting_turn(self, turn).await? else { return Ok(None) };
        if let Some(before) = idle_before {
            // The wait touched the thread's activity: a turn that began waiting after the
            // retention pass listed its thread shows it here.
            let activity: i64 = Stmt::new(THREAD_ACTIVITY_OF_TURN).bind(turn).fetch_one(&mut tx).await?.get("at")?;
            if activity >= before {
                tx.rollback().await?;
                return Ok(None);
            }
        }
        Stmt::new(WITHDRAW_INTERRUPTS).bind(turn).execute(&mut tx).await?;
        let epoch = run_again::<B>(&mut tx, RESUME_TO_CANCEL, instance, turn).await?;
        tx.commit().await?;
        Ok(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_statuses_read_back_as_written_and_an_unknown_one_is_corrupt() {
        for status in [
            InterruptStatus::Open,
            InterruptStatus::Decided,
            InterruptStatus::Expired,
            InterruptStatus::Superseded,
            InterruptStatus::Withdrawn,
        ] {
            assert_eq!(InterruptStatus::parse(status.as_str()).ok(), Some(status));
        }
        assert!(matches!(InterruptStatus::parse("approved"), Err(StoreError::Corrupt(_))));
    }
}
