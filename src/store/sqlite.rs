//! The SQLite store: the zero-setup default for one instance (a file, WAL mode, fsync on
//! commit). Writes go through a one-connection pool so transactions never fight over SQLite's
//! single write lock; reads use a pool of their own and never wait for the writer.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Row, Sqlite};

use super::rows::{self, sql};
use super::*;

/// Rows per multi-row INSERT (5 parameters each, well under SQLite's parameter limit).
const ROWS_PER_INSERT: usize = 500;

pub struct SqliteStore {
    reads: SqlitePool,
    writes: SqlitePool,
}

impl SqliteStore {
    /// SQLite has no row locks; its single writer connection already serialises claims.
    const SKIP_LOCKED: &'static str = "";
    /// How a transaction that writes decisions begins.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const LOCK_ROW: &'static str = "";
    /// A SQLite file serves one instance.
    const SHARED: bool = false;

    pub async fn connect(url: &str) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writes = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
        let reads = SqlitePoolOptions::new().max_connections(8).connect_with(options.read_only(false)).await?;
        Ok(SqliteStore { reads, writes })
    }

    fn read_pool(&self) -> &SqlitePool {
        &self.reads
    }

    fn write_pool(&self) -> &SqlitePool {
        &self.writes
    }

    async fn migrate_impl(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/sqlite").run(&self.writes).await?;
        Ok(())
    }

    async fn commit_batch_impl(&self, batch: &[TurnWrites]) -> Result<BatchOutcome, StoreError> {
        // IMMEDIATE takes the database's write lock first, so the epochs read below cannot
        // change before this commit (a second process on the same file waits or fails).
        let mut tx = self.writes.begin_with("BEGIN IMMEDIATE").await?;
        let ids = serde_json::to_string(&batch_turns(batch))
            .map_err(|e| StoreError::Corrupt(format!("turn ids could not be encoded: {e}")))?;
        let current: Vec<(i64, i64, String)> =
            sqlx::query_as("SELECT id, epoch, status FROM turns WHERE id IN (SELECT value FROM json_each($1))")
                .bind(ids)
                .fetch_all(&mut *tx)
                .await?;
        let outcome = fence_batch(batch, &current);
        let ops = outcome.admitted(batch);
        let events: Vec<(i64, &StoredEvent)> = ops
            .iter()
            .filter_map(|op| match op {
                WriteOp::Event { turn, event } => Some((*turn, event)),
                _ => None,
            })
            .collect();
        for chunk in events.chunks(ROWS_PER_INSERT) {
            let mut insert: QueryBuilder<Sqlite> =
                QueryBuilder::new("INSERT INTO events (turn, seq, kind, body, at_ms) ");
            let mut failed_utf8 = false;
            insert.push_values(chunk, |mut row, (turn, event)| {
                let body = std::str::from_utf8(&event.body).unwrap_or_else(|_| {
                    failed_utf8 = true;
                    ""
                });
                row.push_bind(*turn)
                    .push_bind(event.seq)
                    .push_bind(event.kind as i16)
                    .push_bind(body)
                    .push_bind(event.at_ms);
            });
            if failed_utf8 {
                return Err(StoreError::Corrupt("event body is not UTF-8".into()));
            }
            insert.build().execute(&mut *tx).await?;
        }
        apply_side_ops!(tx, ops);
        tx.commit().await?;
        Ok(outcome)
    }

    /// One instance writes: a statement per held turn in one transaction costs nothing here.
    async fn renew_impl(
        &self,
        instance: &str,
        lease_until_ms: i64,
        held: &[(i64, i64)],
    ) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.writes.begin().await?;
        let mut renewed = Vec::with_capacity(held.len());
        for (turn, epoch) in held {
            let row = sqlx::query(sql::RENEW_LEASE)
                .bind(lease_until_ms)
                .bind(turn)
                .bind(epoch)
                .bind(instance)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(row) = row {
                renewed.push(row.try_get("id")?);
            }
        }
        tx.commit().await?;
        Ok(renewed)
    }

    /// One instance only: there is nobody else to hear from.
    async fn listen_impl(&self) -> Result<Option<tokio::sync::mpsc::Receiver<Vec<(i64, i64)>>>, StoreError> {
        Ok(None)
    }

    async fn announce_impl(&self, _appended: &[(i64, i64)]) -> Result<(), StoreError> {
        Ok(())
    }
}

impl_store!(SqliteStore);
