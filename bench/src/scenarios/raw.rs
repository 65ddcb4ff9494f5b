//! Scenario 6, *raw*: the database's own limit for durable appends, measured in the same run
//! on a fresh database of the same server: multi-row INSERTs of rows like the gateway's events
//! (same table shape, same ≈ 300-byte JSON bodies), one commit per batch, batches of 100 and
//! 1000, on 1 and 8 connections. PostgreSQL uses `INSERT … SELECT * FROM UNNEST(…)` as the
//! gateway does; SQLite uses multi-row `INSERT … VALUES` of up to 500 rows in one transaction
//! per batch, in WAL mode with `synchronous = FULL`, as the gateway does.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::{Connection, QueryBuilder};

use super::{count, Repetitions, Settings};
use crate::database::{Database, Store};
use crate::error::{Context, Error, Result};
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};

const TABLE: &str = "CREATE TABLE IF NOT EXISTS raw_events (
    turn  BIGINT NOT NULL,
    seq   BIGINT NOT NULL,
    kind  SMALLINT NOT NULL,
    body  TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (turn, seq)
)";

/// The (batch, connections) pairs measured.
pub const SHAPES: [(usize, usize); 4] = [(100, 1), (100, 8), (1000, 1), (1000, 8)];

/// A body shaped like the gateway's stored TEXT_MESSAGE_CONTENT events.
pub fn event_body(bytes: usize) -> String {
    format!(
        r#"{{"type":"TEXT_MESSAGE_CONTENT","timestamp":1796000000000,"messageId":"t-0123456789abcdef:m1","delta":"{}"}}"#,
        "x".repeat(bytes.max(1))
    )
}

pub async fn run(store: Store, postgres: &str, settings: &Settings, report: &mut Report) -> Result<()> {
    let database = Database::create(store, postgres).await?;
    let outcome = measure_all(&database, settings, report).await;
    database.drop_database().await?;
    outcome
}

async fn measure_all(database: &Database, settings: &Settings, report: &mut Report) -> Result<()> {
    let body = event_body(settings.sizes.bytes);
    let duration = Duration::from_secs_f64(settings.sizes.raw_secs);
    setup(database).await?;
    for (batch, connections) in SHAPES {
        let mut rates = Vec::new();
        let mut repetitions = Repetitions::new(settings);
        while let Some(repetition) = repetitions.next() {
            truncate(database).await?;
            let before = CpuSnapshot::without_server()?;
            let rate = measure(database, &body, batch, connections, duration).await?;
            let other = before.until(&CpuSnapshot::without_server()?).other;
            eprintln!(
                "  {} raw batch {batch} × {connections} connection(s) {repetition}/{}: {rate:.0} rows/s ({}-byte rows)",
                database.store,
                settings.repeats,
                body.len()
            );
            if !repetitions.keep(other) {
                continue;
            }
            rates.push(rate);
        }
        report.add(
            format!("{}/raw/b{batch}/c{connections}", database.store),
            format!("raw {} INSERT, batch {}, {connections} conn.", database.store, count(batch as u64)),
            Unit::PerSec,
            rates,
            None,
        );
    }
    Ok(())
}

async fn setup(database: &Database) -> Result<()> {
    match database.store {
        Store::Postgres => {
            let mut conn =
                sqlx::PgConnection::connect(&database.url).await.context("connecting for the raw scenario")?;
            sqlx::query(TABLE).execute(&mut conn).await.context("creating raw_events")?;
        }
        Store::Sqlite => {
            let mut conn = sqlite(&database.url).await?;
            sqlx::query(TABLE).execute(&mut conn).await.context("creating raw_events")?;
        }
    }
    Ok(())
}

async fn truncate(database: &Database) -> Result<()> {
    let sql = match database.store {
        Store::Postgres => "TRUNCATE raw_events",
        Store::Sqlite => "DELETE FROM raw_events",
    };
    match database.store {
        Store::Postgres => {
            let mut conn =
                sqlx::PgConnection::connect(&database.url).await.context("connecting for the raw scenario")?;
            sqlx::query(sql).execute(&mut conn).await.context("emptying raw_events")?;
        }
        Store::Sqlite => {
            let mut conn = sqlite(&database.url).await?;
            sqlx::query(sql).execute(&mut conn).await.context("emptying raw_events")?;
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await.context("checkpointing")?;
        }
    }
    Ok(())
}

/// A SQLite connection set up as the gateway sets up its own.
async fn sqlite(url: &str) -> Result<sqlx::SqliteConnection> {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .context("SQLite URL")?
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(30));
    sqlx::SqliteConnection::connect_with(&options).await.context("opening the SQLite database")
}

/// Rows per second committed by `connections` writers for `duration`.
async fn measure(database: &Database, body: &str, batch: usize, connections: usize, duration: Duration) -> Result<f64> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut writers = Vec::new();
    for writer in 0..connections {
        let url = database.url.clone();
        let store = database.store;
        let body = body.to_string();
        writers.push(tokio::spawn(async move {
            match store {
                Store::Postgres => write_postgres(&url, writer as i64, &body, batch, deadline).await,
                Store::Sqlite => write_sqlite(&url, writer as i64, &body, batch, deadline).await,
            }
        }));
    }
    let mut rows = 0;
    for writer in writers {
        rows += writer.await.map_err(|e| Error::msg(format!("a raw writer failed: {e}")))??;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

async fn write_postgres(url: &str, turn: i64, body: &str, batch: usize, deadline: Instant) -> Result<u64> {
    let mut conn = sqlx::PgConnection::connect(url).await.context("connecting a raw writer")?;
    let turns = vec![turn; batch];
    let kinds = vec![0i16; batch];
    let bodies = vec![body; batch];
    let mut seq = 0i64;
    let mut rows = 0u64;
    while Instant::now() < deadline {
        let seqs: Vec<i64> = (seq..seq + batch as i64).collect();
        let times = vec![1_796_000_000_000i64; batch];
        sqlx::query(
            "INSERT INTO raw_events (turn, seq, kind, body, at_ms) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::smallint[], $4::text[], $5::bigint[])",
        )
        .bind(&turns)
        .bind(&seqs)
        .bind(&kinds)
        .bind(&bodies)
        .bind(&times)
        .execute(&mut conn)
        .await
        .context("a raw PostgreSQL batch")?;
        seq += batch as i64;
        rows += batch as u64;
    }
    let _ = conn.close().await;
    Ok(rows)
}

/// Rows per multi-row INSERT, as the gateway's SQLite store writes them.
const SQLITE_ROWS_PER_INSERT: usize = 500;

async fn write_sqlite(url: &str, turn: i64, body: &str, batch: usize, deadline: Instant) -> Result<u64> {
    let mut conn = sqlite(url).await?;
    let mut seq = 0i64;
    let mut rows = 0u64;
    while Instant::now() < deadline {
        let mut tx = conn.begin().await.context("a raw SQLite transaction")?;
        let seqs: Vec<i64> = (seq..seq + batch as i64).collect();
        for chunk in seqs.chunks(SQLITE_ROWS_PER_INSERT) {
            let mut insert = QueryBuilder::new("INSERT INTO raw_events (turn, seq, kind, body, at_ms) ");
            insert.push_values(chunk, |mut row, seq| {
                row.push_bind(turn).push_bind(*seq).push_bind(0i16).push_bind(body).push_bind(1_796_000_000_000i64);
            });
            insert.build().execute(&mut *tx).await.context("a raw SQLite batch")?;
        }
        tx.commit().await.context("committing a raw SQLite batch")?;
        seq += batch as i64;
        rows += batch as u64;
    }
    let _ = conn.close().await;
    Ok(rows)
}
