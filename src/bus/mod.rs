//! The wake-up bus: how instances sharing one database tell each other what happened — a
//! turn's log grew (with its new events when they fit), a cancel was asked for, a turn started.
//!
//! The database stays the log and the only truth: a bus only spares instances from reading it
//! to find out. Whatever a bus loses (a dropped connection, a message never sent because its
//! sender died between its commit and the send) is caught up from the table by the instance
//! that follows the turn (`engine/stream/followers.rs`). PostgreSQL's own notifications
//! (`postgres.rs`, the default) are sent after a batch commits, only for turns someone follows;
//! NATS (`[bus] kind = "nats"`) takes that traffic off the database.

mod nats;
mod postgres;

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::BusConfig;
pub use crate::store::WakeUp;
use crate::store::{Store, StoreError};
pub use nats::NatsBus;
pub use postgres::PgBus;

/// The wake-ups other instances send, a message's worth at a time.
pub type Wakeups = tokio::sync::mpsc::Receiver<Vec<WakeUp>>;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the NATS bus: {0}")]
    Nats(String),
}

#[async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Whether the log writer announces only the turns a batch's fence found followed
    /// (PostgreSQL, where every listener hears every notice), or every batch (a bus that
    /// delivers a turn's messages only to the instances that follow it).
    fn announces_followed_turns_only(&self) -> bool;
    /// Streams here follow `turns` (run elsewhere), until `until_ms` unless renewed: their
    /// commits are to reach this instance.
    async fn follow(&self, turns: &[i64], until_ms: i64) -> Result<(), BusError>;
    /// No stream here follows `turns` any more.
    async fn unfollow(&self, turns: &[i64]);
    /// Tells the other instances (those that listen for it) what happened here.
    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), BusError>;
    /// What the other instances tell this one; `None` where no other instance can be (SQLite).
    async fn listen(&self) -> Result<Option<Wakeups>, BusError>;
}

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
