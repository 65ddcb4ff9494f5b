//! The default bus: the database's own notifications (`LISTEN`/`NOTIFY` on PostgreSQL; on
//! SQLite, one instance, nothing to tell). A batch's notice to the instances following its
//! turns is sent by the store inside the batch's transaction (`store/postgres.rs`); this side
//! marks the turns followed and carries the rest (cancels, turn starts, appends committed
//! outside the log writer).

use std::sync::Arc;

use async_trait::async_trait;

use super::{Bus, BusError, WakeUp, Wakeups};
use crate::store::Store;

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
    fn batches_tell_followers(&self) -> bool {
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

    async fn listen(&self) -> Result<Option<Wakeups>, BusError> {
        Ok(self.store.listen_for_appends().await?)
    }
}
