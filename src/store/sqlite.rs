//! The SQLite store: the zero-setup default for one instance (a file, WAL mode, fsync on
//! commit). Writes go through a one-connection pool so transactions never fight over SQLite's
//! single write lock; reads use a pool of their own and never wait for the writer.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Sqlite, Transaction};

use super::backend::{fence_rows, Backend, Fence, WakeUp, Wakeups};
use super::error::StoreError;
use super::segments::Segment;

/// Rows per multi-row INSERT (6 parameters each, well under SQLite's parameter limit).
const ROWS_PER_INSERT: usize = 150;

pub struct SqliteStore {
    reads: SqlitePool,
    writes: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        // No ping before each use: the connection is a file handle in this process, nothing can
        // hang up on it, and each ping is one more round trip to its thread on the way to
        // every log batch.
        let writes = SqlitePoolOptions::new().max_connections(1).test_before_acquire(false);
        let reads = SqlitePoolOptions::new().max_connections(8).test_before_acquire(false);
        // The crate's own tests count the round trips of a request (`round_trips.rs`).
        #[cfg(test)]
        let (writes, reads) = (super::round_trips::counting(writes), super::round_trips::counting(reads));
        let writes = writes.connect_with(options.clone()).await?;
        let reads = reads.connect_with(options.read_only(false)).await?;
        Ok(SqliteStore { reads, writes })
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Db = Sqlite;

    /// A SQLite file serves one instance.
    const SHARED: bool = false;
    /// SQLite has no row locks; its single writer connection already serialises claims.
    const SKIP_LOCKED: &'static str = "";
    /// IMMEDIATE takes the database's write lock first, so what the transaction reads cannot
    /// change before it commits (a second process on the same file waits or fails).
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const LOCK_ROW: &'static str = "";
    /// One write connection: a second batch could not even begin before the first commits.
    const MAX_PIPELINE_DEPTH: usize = 1;
    const LOCK_SHARED: &'static str = "";
    /// `BEGIN IMMEDIATE` holds the one write lock: a turn's start counts every turn committed.
    const LOCK_TENANT: &'static str = "";

    fn read_pool(&self) -> &SqlitePool {
        &self.reads
    }

    fn write_pool(&self) -> &SqlitePool {
        &self.writes
    }

    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/sqlite").run(&self.writes).await?;
        Ok(())
    }

    /// The write lock taken at `BEGIN IMMEDIATE` covers every row: this only reads.
    async fn lock_turns(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        turns: &[i64],
        _now_ms: i64,
    ) -> Result<Fence, StoreError> {
        let ids = serde_json::to_string(turns)
            .map_err(|e| StoreError::Corrupt(format!("turn ids could not be encoded: {e}")))?;
        let rows: Vec<(i64, i64, String, bool)> = sqlx::query_as(
            "SELECT id, epoch, status, cancel_requested FROM turns WHERE id IN (SELECT value FROM json_each($1))",
        )
        .bind(ids)
        .fetch_all(&mut **tx)
        .await?;
        let cancelling = rows.iter().filter(|row| row.3).map(|row| row.0).collect();
        // One instance per file: nobody follows from elsewhere.
        let mut fence = fence_rows(rows.into_iter().map(|(id, epoch, status, _)| (id, epoch, status, false)));
        fence.cancelling = cancelling;
        Ok(fence)
    }

    /// Multi-row INSERTs of up to [`ROWS_PER_INSERT`] segments.
    async fn insert_segments(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        segments: &[Segment],
    ) -> Result<(), StoreError> {
        for chunk in segments.chunks(ROWS_PER_INSERT) {
            let mut insert: QueryBuilder<Sqlite> =
                QueryBuilder::new("INSERT INTO event_segments (turn, last_seq, first_seq, events, at_ms, body) ");
            insert.push_values(chunk, |mut row, segment| {
                row.push_bind(segment.turn)
                    .push_bind(segment.last_seq)
                    .push_bind(segment.first_seq)
                    .push_bind(segment.events)
                    .push_bind(segment.at_ms)
                    .push_bind(segment.body.as_slice());
            });
            insert.build().execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// One instance only: there is nobody else to hear from.
    async fn listen(&self) -> Result<Option<Wakeups>, StoreError> {
        Ok(None)
    }

    async fn announce(&self, _wakeups: &[WakeUp]) -> Result<(), StoreError> {
        Ok(())
    }
}
