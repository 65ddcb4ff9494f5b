//! Who runs a turn: leases, takeover of lapsed turns, hand-over and cancellation —
//! [`LeaseStore`]. Every claim gives the turn a new ownership epoch, which fences off the
//! writes of its previous runner (see `events.rs` and docs/operations.md).

use async_trait::async_trait;

use super::backend::Backend;
use super::sql::Stmt;
use super::threads::{turn_row, TURN_COLUMNS};
use super::{StoreError, TurnRow};

#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes over one running turn whose lease lapsed before `now_ms`, for `instance` until
    /// `lease_until_ms`, with a new ownership epoch (in the returned row). Of instances racing
    /// for a turn exactly one gets it. `include_own`: also a lapsed turn whose row names
    /// `instance` (false at start-up, where every lease counts as lapsed).
    async fn claim_lapsed_turn(
        &self,
        instance: &str,
        now_ms: i64,
        lease_until_ms: i64,
        include_own: bool,
    ) -> Result<Option<TurnRow>, StoreError>;
    /// Extends the leases of the turns `instance` runs, each `(turn, epoch)` only while that
    /// epoch is current; returns the turns renewed (one missing from the answer was lost).
    async fn renew_leases(
        &self,
        instance: &str,
        lease_until_ms: i64,
        held: &[(i64, i64)],
    ) -> Result<Vec<i64>, StoreError>;
    /// Gives a turn's lease up at once, so another instance takes it without waiting; only
    /// while `epoch` is still the turn's.
    async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError>;
    /// Marks a turn for cancellation; false when it is not running.
    async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError>;
}

const RELEASE_TURN: &str = "UPDATE turns SET owner_instance = NULL, lease_until_ms = 0 \
     WHERE id = $1 AND owner_instance = $2 AND epoch = $3";
const REQUEST_CANCEL: &str = "UPDATE turns SET cancel_requested = TRUE WHERE id = $1 AND status = 'running'";

/// One conditional update: the lapsed turn is locked while claimed (`FOR UPDATE SKIP LOCKED`
/// where the database has it) and re-checked, so two instances never both win. Never a turn
/// the claiming instance holds: at start-up every lease counts as lapsed, and a turn just
/// claimed must not be found again.
///
/// The claim gives the turn a new epoch, which fences off every write of its previous runner
/// that commits after the claim.
fn claim_lapsed_turn(skip_locked: &str, include_own: bool) -> String {
    let whose = if include_own { "" } else { "AND (owner_instance IS NULL OR owner_instance <> $1)" };
    format!(
        "UPDATE turns SET owner_instance = $1, lease_until_ms = $2, epoch = epoch + 1 \
         WHERE status = 'running' AND lease_until_ms < $3 AND id = \
         (SELECT id FROM turns WHERE status = 'running' AND lease_until_ms < $3 \
          {whose} ORDER BY id LIMIT 1 {skip_locked}) \
         RETURNING {TURN_COLUMNS}"
    )
}

#[async_trait]
impl<B: Backend> LeaseStore for B {
    async fn claim_lapsed_turn(
        &self,
        instance: &str,
        now_ms: i64,
        lease_until_ms: i64,
        include_own: bool,
    ) -> Result<Option<TurnRow>, StoreError> {
        Stmt::new(&claim_lapsed_turn(B::SKIP_LOCKED, include_own))
            .bind(instance)
            .bind(lease_until_ms)
            .bind(now_ms)
            .fetch_optional(self.write_pool())
            .await?
            .as_ref()
            .map(turn_row)
            .transpose()
    }

    async fn renew_leases(
        &self,
        instance: &str,
        lease_until_ms: i64,
        held: &[(i64, i64)],
    ) -> Result<Vec<i64>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        self.renew_held(instance, lease_until_ms, held).await
    }

    async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError> {
        Stmt::new(RELEASE_TURN).bind(turn).bind(instance).bind(epoch).execute(self.write_pool()).await?;
        Ok(())
    }

    async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError> {
        Ok(Stmt::new(REQUEST_CANCEL).bind(turn).execute(self.write_pool()).await? == 1)
    }
}
