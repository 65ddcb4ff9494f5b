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
    const LOCK_ROW: &'static str = "";

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

    async fn commit_batch_impl(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        let events: Vec<(i64, &StoredEvent)> = ops
            .iter()
            .filter_map(|op| match op {
                WriteOp::Event { turn, event } => Some((*turn, event)),
                _ => None,
            })
            .collect();
        let mut tx = self.writes.begin().await?;
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
        Ok(())
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
