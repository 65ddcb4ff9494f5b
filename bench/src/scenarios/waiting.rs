//! Scenario *waiting*: many running turns waiting on one instance, each with its own stream
//! (like *idle*'s own-turn shape): the gateway's RSS per turn and per stream, how long opening
//! them took, and the lease writes per second they cost, counted in the database.
//!
//! The count: after the gateway's migrations (`agui-gateway migrate`) and before it serves,
//! the tool installs an AFTER UPDATE trigger on `turns` and on `instances` (each only when the
//! table exists; `instances` comes with per-instance leases) that appends (table, rows) to a
//! table of its own. On PostgreSQL it is a statement-level trigger with a transition table (one
//! row per UPDATE statement, the rows it changed); SQLite has no statement-level triggers, so
//! there it is a row trigger appending one row per changed row (which adds a little to the
//! gateway's write transactions). The sums are read at the start and end of a window opening
//! once every stream is open and the RSS settled, so each table's figure is rows (and, on
//! PostgreSQL, statements) updated per second while the turns only wait.
//!
//! Two sizes: `waiting_turns` over plain HTTP/1.1 (a connection per stream), and
//! `waiting_turns_max` over HTTP/2 with TLS: the open-file hard limit here is 20,000 per
//! process, so 50,000 streams cannot each have a socket; at the gateway's 200 streams per
//! connection they take 250. Each turn has exactly one stream, so RSS per turn is also RSS per
//! stream (turn and stream together); the stream's own share is what *idle*'s shared-turn shape
//! measures. (Closing the streams and reading RSS again does not separate them: the allocator
//! keeps the freed memory, measured: the same figure to 0.1 KiB.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt, TryStreamExt};
use sqlx::Connection;

use super::{count, unique, warm_up, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Context, Error, Result};
use crate::gateway::{agent_toml, Gateway, GatewaySettings};
use crate::http::Transport;
use crate::procfs::rss_kib;
use crate::report::{Report, Unit};
use crate::sse::{self, EventStream, ReadOptions, Received};
use crate::target::{gateway_name, Script};

/// Streams being opened at once.
const OPENING: usize = 128;
/// How long a turn waits: longer than any repetition lasts.
const WAIT_MS: u64 = 600_000;
/// The tables whose updates are counted (`instances` only where it exists).
const COUNTED: [&str; 2] = ["turns", "instances"];

/// One repetition: a fresh database with the counting triggers, a gateway on it, `turns`
/// waiting turns measured, the gateway stopped (its last log lines in a failure).
async fn measure_once(
    gateways: &GatewaySettings,
    store: Store,
    transport: Transport,
    turns: u64,
    settings: &Settings,
) -> Result<Measured> {
    let database = Database::create(store, &gateways.postgres).await?;
    let prepared = async {
        Gateway::migrate(gateways, &database).await?;
        install_counters(&database).await
    }
    .await;
    if let Err(error) = prepared {
        let _ = database.drop_database().await;
        return Err(error);
    }
    let bench = agent_toml("bench", &Script::Wait { ms: WAIT_MS });
    let gateway = Gateway::start_on(gateways, database, transport, &bench).await?;
    let outcome = measure(&gateway, turns, settings).await;
    let log = gateway.log_tail();
    gateway.stop().await?;
    outcome.map_err(|e| Error::msg(format!("{e}\n--- gateway log ---\n{log}")))
}

/// Per counted table: its rows and (PostgreSQL) statements updated per second, one sample per
/// repetition.
type Lease = Vec<(String, Vec<f64>, Vec<f64>)>;

/// Adds the figures of `turns` waiting turns on `name` (RSS per turn, time to open, rows
/// updated per second, and each table's lease writes) to the report.
fn add_figures(report: &mut Report, name: &str, turns: u64, figures: [Vec<f64>; 3], lease: Lease) {
    let key = format!("{name}/waiting-{turns}");
    let label = format!("waiting {} turns, a stream each, {name}", count(turns));
    let [with_stream, open_ms, rows] = figures;
    report.add(
        format!("{key}/rss-per-turn"),
        format!("{label}: RSS per turn = per stream (one each)"),
        Unit::KiB,
        with_stream,
        None,
    );
    report.add(format!("{key}/open"), format!("{label}: time to open them all"), Unit::Ms, open_ms, None);
    report.add(
        format!("{key}/updates"),
        format!("{label}: rows updated per second, all counted tables (lease writes)"),
        Unit::PerSec,
        rows,
        None,
    );
    for (table, rows, statements) in lease {
        report.add(
            format!("{key}/updates/{table}"),
            format!("{label}: `{table}` rows updated per second"),
            Unit::PerSec,
            rows,
            None,
        );
        if !statements.is_empty() {
            report.add(
                format!("{key}/updates/{table}/statements"),
                format!("{label}: UPDATE statements on `{table}` per second"),
                Unit::PerSec,
                statements,
                None,
            );
        }
    }
}

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    settings: &Settings,
    with_max: bool,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let sizes = &settings.sizes;
    let max = if with_max { sizes.waiting_turns_max } else { 0 };
    for (turns, transport) in [(sizes.waiting_turns, Transport::Plain), (max, Transport::TlsH2)] {
        if turns == 0 {
            continue;
        }
        let name = gateway_name(store, transport);
        let mut figures: [Vec<f64>; 3] = Default::default();
        let mut lease: Lease = Vec::new();
        for repetition in 1..=settings.repeats {
            quiet.wait().await?;
            let m = measure_once(gateways, store, transport, turns, settings).await?;
            let writes: Vec<String> = m
                .writes
                .iter()
                .map(|w| match w.statements {
                    Some(statements) => format!("{} {:.0} rows/s in {:.1} statements/s", w.table, w.rows, statements),
                    None => format!("{} {:.0} rows/s", w.table, w.rows),
                })
                .collect();
            eprintln!(
                "  {name} waiting {repetition}/{}: {turns} turns opened in {:.1} s ({:.0}/s); RSS {:.1} MiB: {:.1} KiB per turn with its stream; updates over {} s: {}",
                settings.repeats,
                m.open_secs,
                turns as f64 / m.open_secs.max(1e-9),
                m.rss_kib as f64 / 1024.0,
                m.per_turn_with_stream,
                sizes.waiting_window_secs,
                if writes.is_empty() { "none".to_string() } else { writes.join(", ") }
            );
            for (figure, value) in figures.iter_mut().zip([
                m.per_turn_with_stream,
                m.open_secs * 1000.0,
                m.writes.iter().map(|w| w.rows).sum(),
            ]) {
                figure.push(value);
            }
            for w in m.writes {
                match lease.iter_mut().find(|(table, _, _)| *table == w.table) {
                    Some((_, rows, statements)) => {
                        rows.push(w.rows);
                        statements.extend(w.statements);
                    }
                    None => lease.push((w.table, vec![w.rows], w.statements.into_iter().collect())),
                }
            }
        }
        add_figures(report, &name, turns, figures, lease);
    }
    Ok(())
}

/// Updates of one table over the window, per second.
struct Writes {
    table: String,
    rows: f64,
    /// PostgreSQL only (statement-level trigger).
    statements: Option<f64>,
}

struct Measured {
    open_secs: f64,
    rss_kib: u64,
    per_turn_with_stream: f64,
    writes: Vec<Writes>,
}

/// Creates the counter table and a trigger on each counted table that exists.
async fn install_counters(database: &Database) -> Result<()> {
    match database.store {
        Store::Postgres => {
            let mut conn =
                sqlx::PgConnection::connect(&database.url).await.context("connecting to the benchmark database")?;
            let statements = [
                "CREATE TABLE bench_updates (tbl text NOT NULL, rows bigint NOT NULL)".to_string(),
                "CREATE FUNCTION bench_count_updates() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 INSERT INTO bench_updates (tbl, rows) SELECT TG_TABLE_NAME, count(*) FROM new_rows; \
                 RETURN NULL; END $$"
                    .to_string(),
            ];
            for statement in &statements {
                sqlx::query(statement).execute(&mut conn).await.context("creating the update counter")?;
            }
            for table in COUNTED {
                let (exists,): (bool,) = sqlx::query_as("SELECT to_regclass($1) IS NOT NULL")
                    .bind(table)
                    .fetch_one(&mut conn)
                    .await
                    .context("looking for a counted table")?;
                if !exists {
                    eprintln!("    (no `{table}` table in this gateway's schema: its updates are not counted)");
                    continue;
                }
                let trigger = format!(
                    "CREATE TRIGGER bench_count_{table} AFTER UPDATE ON {table} REFERENCING NEW TABLE AS new_rows \
                     FOR EACH STATEMENT EXECUTE FUNCTION bench_count_updates()"
                );
                sqlx::query(&trigger).execute(&mut conn).await.with_context(|| format!("a trigger on {table}"))?;
            }
            let _ = conn.close().await;
        }
        Store::Sqlite => {
            let mut conn = sqlite(database).await?;
            sqlx::query("CREATE TABLE bench_updates (tbl TEXT NOT NULL, rows INTEGER NOT NULL)")
                .execute(&mut conn)
                .await
                .context("creating the update counter")?;
            for table in COUNTED {
                let (exists,): (i64,) =
                    sqlx::query_as("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?")
                        .bind(table)
                        .fetch_one(&mut conn)
                        .await
                        .context("looking for a counted table")?;
                if exists == 0 {
                    eprintln!("    (no `{table}` table in this gateway's schema: its updates are not counted)");
                    continue;
                }
                let trigger = format!(
                    "CREATE TRIGGER bench_count_{table} AFTER UPDATE ON {table} \
                     BEGIN INSERT INTO bench_updates (tbl, rows) VALUES ('{table}', 1); END"
                );
                sqlx::query(&trigger).execute(&mut conn).await.with_context(|| format!("a trigger on {table}"))?;
            }
            let _ = conn.close().await;
        }
    }
    Ok(())
}

async fn sqlite(database: &Database) -> Result<sqlx::SqliteConnection> {
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(&database.url)
        .context("SQLite URL")?
        .busy_timeout(Duration::from_secs(10));
    sqlx::SqliteConnection::connect_with(&options).await.context("opening the benchmark database")
}

/// Per counted table: (UPDATE statements, rows) so far (statements: PostgreSQL only).
async fn counted(database: &Database) -> Result<Vec<(String, i64, i64)>> {
    let query = "SELECT tbl, count(*), CAST(COALESCE(sum(rows), 0) AS BIGINT) FROM bench_updates GROUP BY tbl";
    Ok(match database.store {
        Store::Postgres => {
            let mut conn =
                sqlx::PgConnection::connect(&database.url).await.context("connecting to the benchmark database")?;
            let rows = sqlx::query_as(query).fetch_all(&mut conn).await.context("reading the update counts")?;
            let _ = conn.close().await;
            rows
        }
        Store::Sqlite => {
            let mut conn = sqlite(database).await?;
            let rows = sqlx::query_as(query).fetch_all(&mut conn).await.context("reading the update counts")?;
            let _ = conn.close().await;
            rows
        }
    })
}

/// Turns the database says are running.
async fn running_turns(database: &Database) -> Result<i64> {
    let query = "SELECT count(*) FROM turns WHERE status = 'running'";
    let (n,): (i64,) = match database.store {
        Store::Postgres => {
            let mut conn =
                sqlx::PgConnection::connect(&database.url).await.context("connecting to the benchmark database")?;
            sqlx::query_as(query).fetch_one(&mut conn).await.context("counting running turns")?
        }
        Store::Sqlite => {
            let mut conn = sqlite(database).await?;
            sqlx::query_as(query).fetch_one(&mut conn).await.context("counting running turns")?
        }
    };
    Ok(n)
}

/// The rows (and, on PostgreSQL, statements) per second each counted table takes over `window`
/// while the waiting turns sit: the lease heartbeats and nothing else.
async fn writes_over(database: &Database, window: Duration) -> Result<Vec<Writes>> {
    let counts_before = counted(database).await?;
    let window_started = Instant::now();
    tokio::time::sleep(window).await;
    let counts_after = counted(database).await?;
    let secs = window_started.elapsed().as_secs_f64();
    Ok(counts_after
        .iter()
        .map(|(table, statements, rows)| {
            let (s0, r0) = counts_before
                .iter()
                .find(|(t, _, _)| t == table)
                .map_or((0, 0), |(_, statements, rows)| (*statements, *rows));
            Writes {
                table: table.clone(),
                rows: (rows - r0) as f64 / secs,
                statements: (database.store == Store::Postgres).then(|| (statements - s0) as f64 / secs),
            }
        })
        .collect())
}

async fn measure(gateway: &Gateway, turns: u64, settings: &Settings) -> Result<Measured> {
    let target = gateway.target();
    let client = target.client();
    let mut stored = warm_up(&client, &target, settings).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(target.pid)?;
    let started = Instant::now();
    let opened = &AtomicU64::new(0);
    let open = |i: u64| {
        let client = client.clone();
        let url = target.run_url.clone();
        let options = ReadOptions { stop_after: Some(2), ..settings.read_options() };
        let timeout = settings.timeout;
        async move {
            let body = sse::run_body(&unique("waiting"), "run-1", &Script::Wait { ms: WAIT_MS }.peer_props());
            let work = async {
                let response = sse::open(&client, &url, body, None).await?;
                let mut received = Received::default();
                let stream = sse::read(response, &mut received, options).await?;
                if received.events < 2 || received.terminal.is_some() {
                    bail!(
                        "waiting stream {i}: expected RUN_STARTED and STATE_SNAPSHOT, then a wait; got {} events{}",
                        received.events,
                        received.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                    );
                }
                Ok::<EventStream, Error>(stream)
            };
            let stream = tokio::time::timeout(timeout, work).await.map_err(|_| {
                Error::msg(format!(
                    "waiting stream {i} got no RUN_STARTED and STATE_SNAPSHOT within {timeout:?} ({} of {turns} open)",
                    opened.load(Ordering::Relaxed)
                ))
            })??;
            opened.fetch_add(1, Ordering::Relaxed);
            Ok::<EventStream, Error>(stream)
        }
    };
    let open_streams: Vec<EventStream> =
        stream::iter(0..turns).map(open).buffer_unordered(OPENING).try_collect().await?;
    let open_secs = started.elapsed().as_secs_f64();
    // Long enough for the allocator and the gateway's timers to settle (shorter in smoke runs,
    // which assert nothing about memory).
    let settle = if settings.strict { Duration::from_millis(300) } else { Duration::from_secs(2) };
    tokio::time::sleep(settle).await;
    let with_streams = rss_kib(target.pid)?;
    let running = running_turns(&gateway.database).await?;
    if running < turns as i64 {
        bail!("waiting: {running} turns are running in the database, {turns} were started");
    }
    let window = Duration::from_secs(settings.sizes.waiting_window_secs.max(1));
    let writes = writes_over(&gateway.database, window).await?;
    if settings.strict {
        stored += 2 * turns;
        let in_table = gateway.database.event_count().await?;
        if in_table != stored as i64 {
            bail!("waiting: the events table holds {in_table} events, {stored} were streamed");
        }
    }
    drop(open_streams);
    let per_turn_with_stream = with_streams.saturating_sub(before) as f64 / turns.max(1) as f64;
    Ok(Measured { open_secs, rss_kib: with_streams, per_turn_with_stream, writes })
}
