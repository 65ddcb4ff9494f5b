//! What every bus answers: the [`Bus`] trait the engine holds, its error and what listening
//! yields. The buses themselves (`postgres.rs`, `nats.rs`) implement it; `mod.rs` picks one.

use async_trait::async_trait;

use crate::store::{StoreError, WakeUp};

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
    /// The least time between two announcements of appends: what commits meanwhile goes in
    /// the next one. Zero where an announcement costs the database nothing.
    fn announce_every(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// What the other instances tell this one; `None` where no other instance can be (SQLite).
    async fn listen(&self) -> Result<Option<Wakeups>, BusError>;
}
