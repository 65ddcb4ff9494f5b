//! Who runs a turn: instance leases, takeover of lapsed turns, hand-over and cancellation —
//! [`LeaseStore`].
//!
//! An instance holds **one** lease, its row in `instances`, renewed by one `UPDATE` per
//! heartbeat however many turns it runs; a running turn names its owner instance
//! (`turns.owner_instance`) and its ownership epoch. A turn is lapsed when it names no owner
//! (released), or an owner whose lease lapsed or who has no row (a command-line engine, a
//! forgotten instance). Renewals touch no `turns` row: they never wait for the log writers'
//! batches, which lock turn rows, and never hold them up. Every claim gives the turn a new
//! ownership epoch, which fences off the writes of its previous runner (see `events.rs` and
//! docs/operations.md).
//!
//! `turns.lease_until_ms` (the per-turn lease of earlier versions) is no longer read. Claims set
//! it to [`HELD_BY_INSTANCE`], so an instance of an earlier version still running during an
//! upgrade never takes a turn this version holds; released and parked turns get 0, as before.

use async_trait::async_trait;

use super::backend::Backend;
use super::error::StoreError;
use super::rows::threads::TurnRow;
use super::sql::Stmt;
use super::threads::{turn_row, HELD_BY_INSTANCE, TURN_COLUMNS};

#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Registers `instance`, leased until `lease_until_ms` (its row is made, or taken up again
    /// when it lapsed or was forgotten).
    async fn register_instance(&self, instance: &str, now_ms: i64, lease_until_ms: i64) -> Result<(), StoreError>;
    /// Extends the lease of `instance` to `lease_until_ms` while it still holds at `now_ms`: one
    /// `UPDATE` of one row. False when it had lapsed (or its row is gone): other instances may
    /// have claimed any of its turns since, and the lease is not extended.
    async fn renew_instance(&self, instance: &str, now_ms: i64, lease_until_ms: i64) -> Result<bool, StoreError>;
    /// Gives the lease of `instance` up (its row goes): a turn still naming it is lapsed at once.
    async fn retire_instance(&self, instance: &str) -> Result<(), StoreError>;
    /// Deletes the rows of instances whose lease lapsed before `lapsed_before_ms` and that own no
    /// running turn; returns how many went.
    async fn forget_instances(&self, lapsed_before_ms: i64) -> Result<u64, StoreError>;
    /// The running turns whose row names `instance`, each `(turn, epoch)`: what it holds by the
    /// database's account (read through the owner index, only that instance's turns).
    async fn owned_turns(&self, instance: &str) -> Result<Vec<(i64, i64)>, StoreError>;
    /// Takes over one lapsed running turn (its owner's lease lapsed, its owner has no row, or it
    /// was released) for `instance`, with a new ownership epoch (in the returned row), judged by
    /// `now_ms`. Of instances racing for a turn exactly one gets it. `include_own`: also a turn
    /// naming `instance` (false at start-up, where every lease counts as lapsed).
    async fn claim_lapsed_turn(
        &self,
        instance: &str,
        now_ms: i64,
        include_own: bool,
    ) -> Result<Option<TurnRow>, StoreError>;
    /// Gives a turn up at once (owner NULL), so another instance takes it without waiting; only
    /// while `epoch` is still the turn's.
    async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError>;
    /// Marks a turn for cancellation; false when it is not running.
    async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError>;
    /// Whether a cancel of the turn was asked for (false for no such turn).
    async fn cancel_requested(&self, turn: i64) -> Result<bool, StoreError>;
}

const REGISTER_INSTANCE: &str = "INSERT INTO instances (id, lease_until_ms, started_at_ms) VALUES ($1, $2, $3) \
     ON CONFLICT (id) DO UPDATE SET lease_until_ms = excluded.lease_until_ms";
const RENEW_INSTANCE: &str = "UPDATE instances SET lease_until_ms = $1 WHERE id = $2 AND lease_until_ms >= $3";
const RETIRE_INSTANCE: &str = "DELETE FROM instances WHERE id = $1";
const FORGET_INSTANCES: &str = "DELETE FROM instances WHERE lease_until_ms < $1 AND NOT EXISTS \
     (SELECT 1 FROM turns WHERE status = 'running' AND owner_instance = instances.id)";
const OWNED_TURNS: &str = "SELECT id, epoch FROM turns WHERE status = 'running' AND owner_instance = $1";
const RELEASE_TURN: &str = "UPDATE turns SET owner_instance = NULL, lease_until_ms = 0 \
     WHERE id = $1 AND owner_instance = $2 AND epoch = $3";
const CANCEL_REQUESTED: &str = "SELECT cancel_requested FROM turns WHERE id = $1";
const REQUEST_CANCEL: &str = "UPDATE turns SET cancel_requested = TRUE WHERE id = $1 AND status = 'running'";

/// The owners named by running turns whose lease does not hold at `$1`: a loose index scan
/// over `turns_running_by_owner` (one index probe per distinct owner, never one per turn), each
/// owner looked up by key in `instances`. With 50,000 running turns on three instances this
/// reads a handful of index entries.
const LAPSED_OWNERS: &str = "WITH RECURSIVE owners(id) AS ( \
       SELECT (SELECT owner_instance FROM turns WHERE status = 'running' AND owner_instance IS NOT NULL \
               ORDER BY owner_instance LIMIT 1) \
       UNION ALL \
       SELECT (SELECT t.owner_instance FROM turns t WHERE t.status = 'running' AND t.owner_instance > owners.id \
               ORDER BY t.owner_instance LIMIT 1) \
       FROM owners WHERE owners.id IS NOT NULL) \
     SELECT id FROM owners WHERE id IS NOT NULL \
       AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = owners.id AND i.lease_until_ms >= $1)";
/// Whether a released running turn (owner NULL) waits for someone.
const ANY_RELEASED: &str = "SELECT id FROM turns WHERE status = 'running' AND owner_instance IS NULL LIMIT 1";
const INSTANCE_LEASE: &str = "SELECT lease_until_ms FROM instances WHERE id = $1";
/// The compare-and-swap of a claim: only the epoch that was seen, only while the turn runs.
const CLAIM_TURN: &str = "UPDATE turns SET owner_instance = $1, lease_until_ms = $2, epoch = epoch + 1 \
     WHERE id = $3 AND epoch = $4 AND status = 'running'";

/// The first running turn of one owner (`$1`), or a released one, in id order, locked for the
/// claim (`FOR UPDATE SKIP LOCKED` where the database has it: racing claimers, and batches
/// writing the turn, are passed over).
fn pick_turn(released: bool, skip_locked: &str) -> String {
    let whose = if released { "owner_instance IS NULL" } else { "owner_instance = $1" };
    format!("SELECT id, epoch FROM turns WHERE status = 'running' AND {whose} ORDER BY id LIMIT 1 {skip_locked}")
}

#[async_trait]
impl<B: Backend> LeaseStore for B {
    async fn register_instance(&self, instance: &str, now_ms: i64, lease_until_ms: i64) -> Result<(), StoreError> {
        Stmt::new(REGISTER_INSTANCE)
            .bind(instance)
            .bind(lease_until_ms)
            .bind(now_ms)
            .execute(self.write_pool())
            .await?;
        Ok(())
    }

    async fn renew_instance(&self, instance: &str, now_ms: i64, lease_until_ms: i64) -> Result<bool, StoreError> {
        let renewed = Stmt::new(RENEW_INSTANCE)
            .bind(lease_until_ms)
            .bind(instance)
            .bind(now_ms)
            .execute(self.write_pool())
            .await?;
        Ok(renewed == 1)
    }

    async fn retire_instance(&self, instance: &str) -> Result<(), StoreError> {
        Stmt::new(RETIRE_INSTANCE).bind(instance).execute(self.write_pool()).await?;
        Ok(())
    }

    async fn forget_instances(&self, lapsed_before_ms: i64) -> Result<u64, StoreError> {
        Stmt::new(FORGET_INSTANCES).bind(lapsed_before_ms).execute(self.write_pool()).await
    }

    async fn owned_turns(&self, instance: &str) -> Result<Vec<(i64, i64)>, StoreError> {
        Stmt::new(OWNED_TURNS)
            .bind(instance)
            .fetch_all(self.read_pool())
            .await?
            .iter()
            .map(|row| Ok((row.get("id")?, row.get("epoch")?)))
            .collect()
    }

    /// Reads who is lapsed without a write lock (a sweep that finds nobody writes nothing), then
    /// in one write transaction, owner by owner: locks a candidate turn, re-checks its owner's
    /// lease under a shared lock of the owner's row (PostgreSQL; SQLite's write lock covers
    /// it) and swaps the turn's epoch. The shared lock orders the claim with the owner's
    /// renewal: a renewal that committed first is seen here (no claim), and one that comes
    /// later waits for this claim, finds its lease lapsed and makes the owner check which
    /// turns it still holds.
    async fn claim_lapsed_turn(
        &self,
        instance: &str,
        now_ms: i64,
        include_own: bool,
    ) -> Result<Option<TurnRow>, StoreError> {
        let mut owners: Vec<Option<String>> = Vec::new();
        if Stmt::new(ANY_RELEASED).fetch_optional(self.read_pool()).await?.is_some() {
            owners.push(None);
        }
        for row in Stmt::new(LAPSED_OWNERS).bind(now_ms).fetch_all(self.read_pool()).await? {
            let owner: String = row.get("id")?;
            if include_own || owner != instance {
                owners.push(Some(owner));
            }
        }
        if owners.is_empty() {
            return Ok(None);
        }
        let pick_owned = pick_turn(false, B::SKIP_LOCKED);
        let pick_released = pick_turn(true, B::SKIP_LOCKED);
        let owner_lease = format!("{INSTANCE_LEASE} {}", B::LOCK_SHARED);
        let claim = format!("{CLAIM_TURN} RETURNING {TURN_COLUMNS}");
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        for owner in &owners {
            let picked = match owner {
                Some(owner) => Stmt::new(&pick_owned).bind(owner.as_str()).fetch_optional(&mut tx).await?,
                None => Stmt::new(&pick_released).fetch_optional(&mut tx).await?,
            };
            let Some(picked) = picked else { continue };
            let (turn, seen): (i64, i64) = (picked.get("id")?, picked.get("epoch")?);
            if let Some(owner) = owner {
                let lease = Stmt::new(&owner_lease).bind(owner.as_str()).fetch_optional(&mut tx).await?;
                let lease: Option<i64> = lease.map(|row| row.get("lease_until_ms")).transpose()?;
                if lease.is_some_and(|until| until >= now_ms) {
                    // The owner renewed since the first read: its turns are its own again.
                    continue;
                }
            }
            let claimed = Stmt::new(&claim)
                .bind(instance)
                .bind(HELD_BY_INSTANCE)
                .bind(turn)
                .bind(seen)
                .fetch_optional(&mut tx)
                .await?;
            if let Some(row) = claimed {
                let turn = turn_row(&row)?;
                tx.commit().await?;
                return Ok(Some(turn));
            }
        }
        tx.rollback().await?;
        Ok(None)
    }

    async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError> {
        Stmt::new(RELEASE_TURN).bind(turn).bind(instance).bind(epoch).execute(self.write_pool()).await?;
        Ok(())
    }

    async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError> {
        Ok(Stmt::new(REQUEST_CANCEL).bind(turn).execute(self.write_pool()).await? == 1)
    }

    async fn cancel_requested(&self, turn: i64) -> Result<bool, StoreError> {
        match Stmt::new(CANCEL_REQUESTED).bind(turn).fetch_optional(self.read_pool()).await? {
            Some(row) => row.get("cancel_requested"),
            None => Ok(false),
        }
    }
}
