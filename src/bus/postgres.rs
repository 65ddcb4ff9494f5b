//! The default bus: the database's own notifications (`LISTEN`/`NOTIFY` on PostgreSQL; on
//! SQLite, one instance, nothing to tell). Every listener hears every notice, so the log
//! writer announces only the turns a batch's fence found followed (the follow mark is on the
//! turn's row, `store/postgres.rs`).

use std::sync::Arc;

use async_trait::async_trait;

use super::contract::{Bus, BusError, Wakeups};
use crate::store::{Store, WakeUp};

/// The least time between two notices of appends: a follower on another instance hears of a
/// commit up to this much later, and the database carries at most 250 notices a second.
const ANNOUNCE_EVERY: std::time::Duration = std::time::Duration::from_millis(4);

pub struct PgBus {
    store: Arc<dyn Store>,
}

impl PgBus {
    pub fn new(store: Arc<dyn Store>) -> PgBus {
        store.set_follower_notices(true);
        PgBus { store }
    }
}

#[async_trait]
impl Bus for PgBus {
    fn announces_followed_turns_only(&self) -> bool {
        true
    }

    async fn follow(&self, turns: &[i64], until_ms: i64) -> Result<(), BusError> {
        Ok(self.store.follow_turns(turns, until_ms).await?)
    }

    /// The marks lapse on their own (`until_ms`): clearing them would cost a write per turn.
    async fn unfollow(&self, _turns: &[i64]) {}

    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), BusError> {
        Ok(self.store.announce_appends(wakeups).await?)
    }

    /// Each announcement is a transaction of the database's, heard by every other instance;
    /// sent back to back, one per batch, they cost it more than the batches they announce
    /// (BENCHMARKS.md, "Following across instances, paced").
    fn announce_every(&self) -> std::time::Duration {
        ANNOUNCE_EVERY
    }

    async fn listen(&self) -> Result<Option<Wakeups>, BusError> {
        Ok(self.store.listen_for_appends().await?)
    }
}
