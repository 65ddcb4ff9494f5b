//! Storage, split by role: one trait per concept, each in its own file with its row types and
//! its SQL, written once for both databases —
//!
//! | role | file | what |
//! |---|---|---|
//! | [`ThreadStore`] | `threads.rs` | threads, turns, runs, a thread's state and notes |
//! | [`EventLog`] | `events.rs` | the event log: group commit with its fence, reads, wake-ups |
//! | (segments) | `segments.rs` | the log's rows: a turn's events of one batch in one row |
//! | [`LeaseStore`] | `leases.rs` | instance leases, takeover of lapsed turns, hand-over, cancellation |
//! | [`InterruptStore`] | `interrupts.rs` | interrupts and their decisions |
//! | [`KeyStore`] | `keys.rs` | API and app keys, revocations |
//! | [`AuditStore`] | `audit.rs` | the audit trail |
//! | [`UsageStore`] | `usage.rs` | what a tenant used of its limits |
//! | [`ThreadTitleStore`] | `thread_titles.rs` | a thread's name and archived mark |
//! | [`LiveGrantStore`] | `live_grants.rs` | grants of the CopilotKit runtime's live thread list |
//! | [`RunIdStore`] | `run_ids.rs` | a thread's latest runId |
//!
//! [`Store`] is all of them plus what concerns the database as a whole; the gateway holds an
//! `Arc<dyn Store>`, opened by [`connect`] from the database URL's scheme. What differs between
//! PostgreSQL (`postgres.rs`) and SQLite (`sqlite.rs`) is the `Backend`
//! trait; the shared statements run through the checked bound in `sql.rs`. SQL lives only in
//! this folder.
//!
//! A lookup by an id a client supplies takes the tenant (a thread, an interrupt, a key): an id
//! of another tenant finds nothing. Lookups by primary key (`turn_by_pk`, `thread_by_pk`) serve
//! rows already found that way.

mod audit;
mod backend;
pub mod branches;
mod error;
mod events;
mod interrupts;
mod keys;
mod leases;
mod live_grants;
mod postgres;
#[cfg(test)]
pub(crate) mod round_trips;
mod rows;
mod run_ids;
pub mod segments;
mod sql;
mod sqlite;
mod thread_titles;
mod threads;
mod usage;

use std::sync::Arc;

use async_trait::async_trait;

pub use audit::AuditStore;
pub use backend::WakeUp;
pub use error::StoreError;
pub use events::{EventLog, OpenBatch, WrittenAhead, WrittenBatch};
pub use interrupts::{DecisionRound, InterruptStore};
pub use keys::{ApiKeyRow, KeyKind, KeyStore};
pub use leases::LeaseStore;
pub use live_grants::{LiveGrantRow, LiveGrantStore, GRANTS_PER_CALLER};
pub use postgres::PgStore;
pub use rows::audit::{AuditEntry, AuditRow};
pub use rows::events::{BatchOutcome, EventKind, PartitionUpkeep, StoredEvent, TurnWrites, WriteOp};
pub use rows::interrupts::{Decided, Decision, InterruptRow, InterruptStatus};
pub use rows::threads::{
    DeleteThread, NewRun, NewTurn, Owner, OwnerKind, StartTurn, StillIdle, ThreadQuery, ThreadRow, ThreadSummary,
    TurnLimits, TurnRow, TurnStatus, Visibility,
};
pub use rows::usage::TenantUsage;
pub use run_ids::RunIdStore;
pub use sqlite::SqliteStore;
pub use thread_titles::{ThreadTitle, ThreadTitleStore, TitleChange};
pub use threads::ThreadStore;
pub use usage::UsageStore;

use backend::Backend;
use sql::Stmt;

/// Counts of every table, for tests that check a refused request changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowCounts {
    pub threads: i64,
    pub turns: i64,
    pub runs: i64,
    pub events: i64,
    pub notes: i64,
    pub interrupts: i64,
    pub audit: i64,
}

/// The whole store: every role, and what concerns the database itself.
#[async_trait]
pub trait Store:
    ThreadStore
    + EventLog
    + LeaseStore
    + InterruptStore
    + KeyStore
    + AuditStore
    + UsageStore
    + ThreadTitleStore
    + LiveGrantStore
    + RunIdStore
    + Send
    + Sync
    + 'static
{
    /// Applies the migrations of this store's kind.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Checks the database answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
    /// Connections held by the pool, and how many of them are idle.
    fn pool_stats(&self) -> (u32, usize);
    /// Whether other instances may share this database (PostgreSQL), or this instance is its
    /// only user (SQLite): a shared store runs several log writers and hears other instances'
    /// wake-ups; an unshared one takes over every turn an earlier start left running.
    fn is_shared(&self) -> bool;
    async fn row_counts(&self) -> Result<RowCounts, StoreError>;
}

const ROW_COUNTS: &str = "SELECT (SELECT COUNT(*) FROM threads) AS threads, \
     (SELECT COUNT(*) FROM turns) AS turns, (SELECT COUNT(*) FROM runs) AS runs, \
     (SELECT COUNT(*) FROM events) + (SELECT COALESCE(SUM(events), 0) FROM event_segments) AS events, (SELECT COUNT(*) FROM notes) AS notes, \
     (SELECT COUNT(*) FROM interrupts) AS interrupts, (SELECT COUNT(*) FROM audit) AS audit";

#[async_trait]
impl<B: Backend> Store for B {
    async fn migrate(&self) -> Result<(), StoreError> {
        self.run_migrations().await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Stmt::new("SELECT 1").execute(self.read_pool()).await?;
        Ok(())
    }

    fn pool_stats(&self) -> (u32, usize) {
        (self.read_pool().size(), self.read_pool().num_idle())
    }

    fn is_shared(&self) -> bool {
        B::SHARED
    }

    async fn row_counts(&self) -> Result<RowCounts, StoreError> {
        let row = Stmt::new(ROW_COUNTS).fetch_one(self.read_pool()).await?;
        Ok(RowCounts {
            threads: row.get("threads")?,
            turns: row.get("turns")?,
            runs: row.get("runs")?,
            events: row.get("events")?,
            notes: row.get("notes")?,
            interrupts: row.get("interrupts")?,
            audit: row.get("audit")?,
        })
    }
}

/// Opens the store named by `url`'s scheme, with `max_connections` per pool.
pub async fn connect(url: &str, max_connections: u32) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::connect(url, max_connections).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else {
        Err(StoreError::UnsupportedUrl(crate::redact::redact_url(url)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sqlite_store_serves_one_instance() {
        let file = std::env::temp_dir().join(format!("agui-shared-{}.db", uuid::Uuid::new_v4().simple()));
        let store = connect(&format!("sqlite://{}?mode=rwc", file.display()), 1).await.expect("sqlite opens");
        assert!(!store.is_shared());
        let _ = std::fs::remove_file(file);
    }
}
