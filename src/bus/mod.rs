//! The wake-up bus: how instances sharing one database tell each other what happened — a
//! turn's log grew (with its new events when they fit), a cancel was asked for, a turn started.
//!
//! The database stays the log and the only truth: a bus only spares instances from reading it
//! to find out. Whatever a bus loses (a dropped connection, a message never sent because its
//! sender died between its commit and the send) is caught up from the table by the instance
//! that follows the turn (`engine/stream/followers.rs`). PostgreSQL's own notifications
//! (`postgres.rs`, the default) are sent after a batch commits, only for turns someone follows;
//! NATS (`[bus] kind = "nats"`) takes that traffic off the database.

mod contract;
mod nats;
mod postgres;

use std::sync::Arc;

use crate::config::BusConfig;
use crate::store::Store;
pub use crate::store::WakeUp;
pub use contract::{Bus, BusError, Wakeups};
pub use nats::NatsBus;
pub use postgres::PgBus;

/// The bus `config` names, for instances sharing `store`.
pub async fn connect(config: &BusConfig, store: Arc<dyn Store>) -> Result<Arc<dyn Bus>, BusError> {
    match config.kind.as_str() {
        "postgres" => Ok(Arc::new(PgBus::new(store))),
        // One instance on its own database (SQLite): nobody to tell, over NATS or otherwise.
        "nats" if !store.is_shared() => Ok(Arc::new(PgBus::new(store))),
        "nats" => Ok(Arc::new(NatsBus::connect(config, store).await?)),
        other => Err(BusError::Nats(format!("bus kind '{other}' is not available in this build"))),
    }
}
