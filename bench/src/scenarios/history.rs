//! Scenario *history*: the same three measurements on a database that already holds a long
//! history and on an empty one, in the same invocation, and their ratio full ÷ empty: does a
//! big log slow the paths a client feels?
//!
//! - start a run: `history_starts` fresh runs (each a new thread) one after another, the time
//!   from sending the POST to receiving `RUN_STARTED`, p50 and p99;
//! - replay: as the *replay* scenario (a finished turn read back with `Last-Event-ID`);
//! - ticking: as the *ticking* scenario.
//!
//! The history is written before the gateway starts, after `agui-gateway migrate`, with
//! set-based SQL (`INSERT … SELECT` from `generate_series` on PostgreSQL, from a recursive
//! `WITH` on SQLite, a chunk of threads per statement):
//! `history_events` events over `history_threads` threads, one finished turn per thread, rows
//! as the gateway writes them for a `script` agent's text burst — a `threads` row (owner the
//! local person), a `turns` row (`succeeded`, released lease), a `runs` row, and the turn's
//! events: RUN_STARTED, STATE_SNAPSHOT, TEXT_MESSAGE_START, content deltas of `bytes`
//! characters, TEXT_MESSAGE_END, RUN_FINISHED, with the ids and kinds the gateway stores. Then
//! on PostgreSQL the id sequences are moved past the rows written and `VACUUM (ANALYZE)` runs:
//! the planner sees the table's real size, and autovacuum (whose insert threshold the fill
//! crosses) does not start in the middle of a measurement; on SQLite `ANALYZE` runs and the WAL
//! is checkpointed. No `audit` rows are written.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::Connection;

use super::{count, ticking, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Context, Error, Result};
use crate::gateway::{agent_toml, Gateway, GatewaySettings};
use crate::http::Transport;
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::sse::{self, Received};
use crate::stats::percentile;
use crate::target::{Script, Target};

/// Threads written per INSERT statement.
const CHUNK_THREADS: u64 = 2_000;
/// Events of a filled turn around its deltas: RUN_STARTED, STATE_SNAPSHOT, TEXT_MESSAGE_START,
/// TEXT_MESSAGE_END, RUN_FINISHED.
const FRAME_EVENTS: u64 = 5;
/// What a fresh run streams (the start measurement reads only its first event).
const START: Script = Script::Burst { events: 1, bytes: 16 };

/// The figures compared full ÷ empty: key suffix under the target's name, and what it is.
const COMPARED: [(&str, &str); 6] = [
    ("start/p50", "start a run p50"),
    ("start/p99", "start a run p99"),
    ("replay/first", "replay first event"),
    ("replay/last", "replay last event"),
    ("ticking/p50", "ticking p50"),
    ("ticking/p99", "ticking p99"),
];

/// Fills `database` with `threads` × `per_thread` events and reports how long that took.
async fn fill_timed(
    gateways: &GatewaySettings,
    database: &Database,
    store: Store,
    threads: u64,
    per_thread: u64,
    bytes: usize,
    report: &mut Report,
) -> Result<()> {
    let started = Instant::now();
    fill(gateways, database, threads, per_thread, bytes).await?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "  history on {store}: filled {} events over {} threads in {secs:.1} s ({:.0} events/s, ANALYZE included)",
        count(threads * per_thread),
        count(threads),
        (threads * per_thread) as f64 / secs.max(1e-9)
    );
    report.add(
        format!("gateway/{store}/history/fill"),
        format!("history on {store}: filling {} events over {} threads", count(threads * per_thread), count(threads)),
        Unit::Ms,
        vec![secs * 1000.0],
        None,
    );
    Ok(())
}

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let sizes = &settings.sizes;
    let per_thread = (sizes.history_events / sizes.history_threads.max(1)).max(FRAME_EVENTS + 1);
    let threads = sizes.history_threads.max(1);
    let mut names = Vec::new();
    for full in [false, true] {
        let name = format!("gateway/{store}/history-{}", if full { "full" } else { "empty" });
        let database = Database::create(store, &gateways.postgres).await?;
        let prepared = async {
            Gateway::migrate(gateways, &database).await?;
            if full {
                fill_timed(gateways, &database, store, threads, per_thread, sizes.bytes, report).await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        if let Err(error) = prepared {
            let _ = database.drop_database().await;
            return Err(error);
        }
        let gateway = Gateway::start_on(gateways, database, Transport::Plain, &agents(settings)).await?;
        let outcome = measure(&gateway, &name, settings, quiet, report).await;
        let outcome = match outcome {
            Ok(streamed) if settings.strict => {
                let filled = if full { (threads * per_thread) as i64 } else { 0 };
                let stored = gateway.database.event_count().await;
                match stored {
                    Ok(stored) if stored == filled + streamed as i64 => Ok(()),
                    Ok(stored) => Err(Error::msg(format!(
                        "{name}: the events table holds {stored} events, {filled} filled + {streamed} streamed"
                    ))),
                    Err(error) => Err(error),
                }
            }
            other => other.map(|_| ()),
        };
        let log = gateway.log_tail();
        gateway.stop().await?;
        outcome.map_err(|error| Error::msg(format!("{error}\n--- gateway log ---\n{log}")))?;
        names.push(name);
    }
    let median = |key: &str| report.figures.iter().find(|f| f.key == key).and_then(|f| f.summary).map(|s| s.median);
    let mut ratios = Vec::new();
    for (suffix, what) in COMPARED {
        if let (Some(empty), Some(full)) =
            (median(&format!("{}/{suffix}", names[0])), median(&format!("{}/{suffix}", names[1])))
        {
            eprintln!(
                "  history on {store}: {what}: full {full:.2} ms ÷ empty {empty:.2} ms = {:.2}",
                full / empty.max(1e-9)
            );
            ratios.push((suffix, what, full / empty.max(1e-9)));
        }
    }
    for (suffix, what, ratio) in ratios {
        report.add(
            format!("gateway/{store}/history/ratio/{suffix}"),
            format!(
                "history on {store}: {what}, {} events over {} threads ÷ empty database",
                count(threads * per_thread),
                count(threads)
            ),
            Unit::Times,
            vec![ratio],
            None,
        );
    }
    Ok(())
}

/// `bench` replays (the replay scenario's turn), `tick` ticks, `start` is a run to start.
fn agents(settings: &Settings) -> String {
    format!(
        "{}{}{}",
        agent_toml("bench", &super::replay::script(settings)),
        agent_toml("tick", &ticking::script(settings)),
        agent_toml("start", &START)
    )
}

/// The three measurements on one gateway; returns the events streamed (and so stored).
async fn measure(
    gateway: &Gateway,
    name: &str,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<u64> {
    let mut target = gateway.target();
    target.name = name.to_string();
    quiet.wait().await?;
    let mut streamed = start_runs(gateway, &target, settings, report).await?;
    quiet.wait().await?;
    streamed += super::replay::run(&target, settings, report).await?;
    quiet.wait().await?;
    let mut tick = target.clone();
    tick.run_url = gateway.url("/v1/agui/agents/tick");
    streamed += ticking::run(&tick, settings, report).await?;
    Ok(streamed)
}

/// Fresh runs one after another: POST → RUN_STARTED, p50 and p99 per repetition.
async fn start_runs(gateway: &Gateway, target: &Target, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let mut streamed = warm_up(&client, target, settings).await?;
    let url = gateway.url("/v1/agui/agents/start");
    let props = START.peer_props();
    let runs = settings.sizes.history_starts.max(1);
    let (mut p50s, mut p99s) = (Vec::new(), Vec::new());
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let before = CpuSnapshot::take(target.pid)?;
        let mut times_us = Vec::with_capacity(runs as usize);
        for _ in 0..runs {
            let body = sse::run_body(&unique("start"), "run-1", &props);
            let sent = Instant::now();
            let work = async {
                let response = sse::open(&client, &url, body, None).await?;
                let mut received = Received::default();
                sse::read(response, &mut received, settings.read_options()).await?;
                Ok::<_, Error>(received)
            };
            let received = tokio::time::timeout(settings.timeout, work)
                .await
                .map_err(|_| Error::msg(format!("a fresh run took over {:?}", settings.timeout)))??;
            received.expect_finished(&format!("{}: a fresh run", target.name))?;
            let Some(first) = received.first_at else { bail!("{}: a fresh run streamed nothing", target.name) };
            times_us.push(first.duration_since(sent).as_micros() as u64);
            streamed += received.events;
        }
        let cpu = before.until(&CpuSnapshot::take(target.pid)?);
        times_us.sort_unstable();
        let ms = |q: f64| percentile(&times_us, q).map_or(0.0, |us| us as f64 / 1000.0);
        eprintln!(
            "  {} start a run {repetition}/{}: {runs} fresh runs, POST → RUN_STARTED p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; CPU: server {:.0} %, postgres {:.0} %, other {:.0} %",
            target.name,
            settings.repeats,
            ms(0.5),
            ms(0.99),
            ms(1.0),
            cpu.server,
            cpu.postgres,
            cpu.other
        );
        if !repetitions.keep(cpu.other) {
            continue;
        }
        p50s.push(ms(0.5));
        p99s.push(ms(0.99));
    }
    let label = format!("{}: start a run ({} fresh runs, POST → RUN_STARTED)", target.name, count(runs));
    report.add(format!("{}/start/p50", target.name), format!("{label} p50"), Unit::Ms, p50s, None);
    report.add(format!("{}/start/p99", target.name), format!("{label} p99"), Unit::Ms, p99s, None);
    Ok(streamed)
}

/// A connection to fill through, of either store.
enum Filler {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Filler {
    async fn open(database: &Database) -> Result<Filler> {
        match database.store {
            Store::Postgres => {
                let mut conn =
                    sqlx::PgConnection::connect(&database.url).await.context("connecting to fill the history")?;
                // Bulk work, not the gateway's commits: no wait for the WAL flush per statement.
                sqlx::query("SET synchronous_commit = off")
                    .execute(&mut conn)
                    .await
                    .context("setting synchronous_commit")?;
                Ok(Filler::Postgres(conn))
            }
            Store::Sqlite => {
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(&database.url)
                    .context("SQLite URL")?
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Off);
                let conn =
                    sqlx::SqliteConnection::connect_with(&options).await.context("opening the database to fill it")?;
                Ok(Filler::Sqlite(conn))
            }
        }
    }

    async fn execute(&mut self, statement: &str) -> Result<()> {
        let outcome = match self {
            Filler::Postgres(conn) => sqlx::query(statement).execute(conn).await.map(|_| ()),
            Filler::Sqlite(conn) => sqlx::query(statement).execute(conn).await.map(|_| ()),
        };
        outcome.with_context(|| format!("running {}", statement.chars().take(120).collect::<String>()))
    }

    async fn close(self) {
        let _ = match self {
            Filler::Postgres(conn) => conn.close().await,
            Filler::Sqlite(conn) => conn.close().await,
        };
    }
}

/// Writes the history: `threads` threads of one finished turn of `per_thread` events each. On
/// PostgreSQL the events are written as the gateway logs them, in segments, once `agui-gateway
/// migrate` made the log's partitions for the turns written (a serving gateway makes them ahead
/// of its turns); on SQLite as rows of the log before segments (`events`), which the gateway
/// still reads.
async fn fill(
    gateways: &GatewaySettings,
    database: &Database,
    threads: u64,
    per_thread: u64,
    bytes: usize,
) -> Result<()> {
    let store = database.store;
    let mut conn = Filler::open(database).await?;
    // Older than anything the measurements write.
    let base_ms: i64 = 1_700_000_000_000;
    let delta = "x".repeat(bytes.max(1));
    let started = Instant::now();
    let mut told = Instant::now();
    let chunks = || {
        (1..=threads).step_by(CHUNK_THREADS as usize).map(move |from| (from, (from + CHUNK_THREADS - 1).min(threads)))
    };
    for (from, to) in chunks() {
        for statement in fill_statements(store, from, to, per_thread, base_ms, &delta) {
            conn.execute(&statement).await.with_context(|| format!("filling threads {from}..={to}"))?;
        }
        if told.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "    history: {} of {} threads written ({:.0} s)",
                count(to),
                count(threads),
                started.elapsed().as_secs_f64()
            );
            told = Instant::now();
        }
    }
    if store == Store::Postgres {
        // Explicit ids do not move a BIGSERIAL's sequence.
        conn.execute("SELECT setval('threads_id_seq', (SELECT max(id) FROM threads))").await?;
        conn.execute("SELECT setval('turns_id_seq', (SELECT max(id) FROM turns))").await?;
        Gateway::migrate(gateways, database).await?;
        for statement in SEGMENT_FUNCTIONS {
            conn.execute(statement).await?;
        }
        for (from, to) in chunks() {
            let statement = segments_statement(from, to, per_thread, base_ms, &delta, bytes);
            conn.execute(&statement).await.with_context(|| format!("filling the log of threads {from}..={to}"))?;
        }
    }
    let finish: &[&str] = match store {
        Store::Postgres => &["VACUUM (ANALYZE) threads, turns, runs, event_segments"],
        // SQLite's AUTOINCREMENT follows explicit ids.
        Store::Sqlite => &["ANALYZE", "PRAGMA wal_checkpoint(TRUNCATE)"],
    };
    for statement in finish {
        conn.execute(statement).await?;
    }
    conn.close().await;
    Ok(())
}

/// Little-endian integers as bytes, for the segment encoding (`src/store/segments.rs`: a format
/// byte, then per event `seq i64 | kind u8 | at_ms i64 | length u32 | JSON`), on the filling
/// connection only.
const SEGMENT_FUNCTIONS: [&str; 2] = [
    "CREATE FUNCTION pg_temp.le8(x bigint) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$ \
     SELECT set_byte(set_byte(set_byte(set_byte(set_byte(set_byte(set_byte(set_byte( \
     '\\x0000000000000000'::bytea, 0, (x & 255)::int), 1, ((x >> 8) & 255)::int), \
     2, ((x >> 16) & 255)::int), 3, ((x >> 24) & 255)::int), 4, ((x >> 32) & 255)::int), \
     5, ((x >> 40) & 255)::int), 6, ((x >> 48) & 255)::int), 7, ((x >> 56) & 255)::int) $$",
    "CREATE FUNCTION pg_temp.le4(x int) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$ \
     SELECT set_byte(set_byte(set_byte(set_byte('\\x00000000'::bytea, 0, x & 255), 1, (x >> 8) & 255), \
     2, (x >> 16) & 255), 3, (x >> 24) & 255) $$",
];

/// Events per filled segment: a streaming answer's batches hold a few tokens each (a burst's
/// fill segments up to 8,000 bytes). Rows of a few events leave room in each page that a
/// vacuum records, as a real log's mix of sizes does; what a new turn's segments do with that
/// room is what the ticking measurement sees.
const SEGMENT_EVENTS: usize = 4;

/// The segments of threads `from..=to` (PostgreSQL): each turn's events cut into rows of
/// [`SEGMENT_EVENTS`] events (fewer when they would pass the gateway's 8,000 bytes).
fn segments_statement(from: u64, to: u64, per_thread: u64, base_ms: i64, delta: &str, bytes: usize) -> String {
    // An event of the burst takes its JSON (≈ 105 bytes around the delta) and a 21-byte header.
    let per_segment = (7_990 / (bytes + 130)).clamp(1, SEGMENT_EVENTS);
    let events = events_select(Store::Postgres, from, to, per_thread, base_ms, delta);
    format!(
        "INSERT INTO event_segments (turn, last_seq, first_seq, events, at_ms, body) \
         SELECT g, max(s), min(s), count(*), min(at_ms), '\\x01'::bytea || string_agg( \
             pg_temp.le8(s) || set_byte('\\x00'::bytea, 0, kind) || pg_temp.le8(at_ms) \
             || pg_temp.le4(octet_length(convert_to(body, 'UTF8'))) || convert_to(body, 'UTF8'), \
             '\\x'::bytea ORDER BY s) \
         FROM ({events}) AS e GROUP BY g, (s - 1) / {per_segment}"
    )
}

/// The INSERTs of threads `from..=to`, in the gateway's row shapes: threads, turns and runs,
/// and on SQLite the events (on PostgreSQL they are written in segments, [`segments_statement`]).
fn fill_statements(store: Store, from: u64, to: u64, per_thread: u64, base_ms: i64, delta: &str) -> Vec<String> {
    let (threads, public) = thread_numbers(store, from, to);
    let mut statements = vec![
        format!(
            "INSERT INTO threads (id, tenant, thread_id, owner_kind, owner_id, created_at_ms, updated_at_ms) \
             {threads} SELECT g, 'default', 'history-' || g, 'person', 'local', {base_ms} + g, {base_ms} + g FROM g"
        ),
        format!(
            "INSERT INTO turns (id, public_id, thread, ordinal, agent, status, user_message_id, user_text, \
             started_by, created_at_ms, finished_at_ms, checkpoint, owner_instance, lease_until_ms, client_input) \
             {threads} SELECT g, {public}, g, 1, 'bench', 'succeeded', 'run-1-user', 'bench', 'person:local', \
             {base_ms} + g, {base_ms} + g, '{{\"step\":1}}', 'history', 9223372036854775807, \
             '{{\"context\":[],\"forwardedProps\":{{}}}}' FROM g"
        ),
        format!(
            "INSERT INTO runs (thread, run_id, turn, created_at_ms) {threads} SELECT g, 'run-1', g, {base_ms} + g FROM g"
        ),
    ];
    if store == Store::Sqlite {
        let events = events_select(store, from, to, per_thread, base_ms, delta);
        statements.push(format!(
            "INSERT INTO events (turn, seq, kind, body, at_ms) SELECT g, s, kind, body, at_ms FROM ({events})"
        ));
    }
    statements
}

/// The thread numbers `g` of `from..=to` as a `WITH` clause, and a turn's public id: `t` and 24
/// hex digits, like the gateway's.
fn thread_numbers(store: Store, from: u64, to: u64) -> (String, &'static str) {
    match store {
        Store::Postgres => (
            format!("WITH g(g) AS (SELECT generate_series({from}::bigint, {to}::bigint))"),
            "'t' || lpad(to_hex(g), 24, '0')",
        ),
        Store::Sqlite => (
            format!("WITH RECURSIVE g(g) AS (SELECT {from} UNION ALL SELECT g + 1 FROM g WHERE g < {to})"),
            "printf('t%024x', g)",
        ),
    }
}

/// The events of threads `from..=to` as rows `(g, s, kind, body, at_ms)`: RUN_STARTED,
/// STATE_SNAPSHOT, TEXT_MESSAGE_START, the deltas, TEXT_MESSAGE_END, RUN_FINISHED, with the
/// kinds the gateway stores.
fn events_select(store: Store, from: u64, to: u64, per_thread: u64, base_ms: i64, delta: &str) -> String {
    let (threads, public) = thread_numbers(store, from, to);
    let seqs = match store {
        Store::Postgres => format!(", s(s) AS (SELECT generate_series(1, {per_thread}))"),
        Store::Sqlite => format!(", s(s) AS (SELECT 1 UNION ALL SELECT s + 1 FROM s WHERE s < {per_thread})"),
    };
    let message = format!("{public} || ':m1'");
    let last = per_thread;
    let end = last - 1;
    format!(
        "{threads}{seqs} \
         SELECT g, s, CASE s WHEN 1 THEN 1 WHEN 2 THEN 4 WHEN {last} THEN 2 ELSE 0 END AS kind, \
         CASE s \
           WHEN 1 THEN '{{\"type\":\"RUN_STARTED\",\"threadId\":\"history-' || g || '\",\"runId\":\"run-1\",\"protocolVersion\":\"1.0\",\"timestamp\":' || ({base_ms} + g) || '}}' \
           WHEN 2 THEN '{{\"type\":\"STATE_SNAPSHOT\",\"snapshot\":{{\"board\":{{\"notes\":[]}}}},\"timestamp\":' || ({base_ms} + g) || '}}' \
           WHEN 3 THEN '{{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"' || {message} || '\",\"role\":\"assistant\",\"timestamp\":' || ({base_ms} + g) || '}}' \
           WHEN {end} THEN '{{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"' || {message} || '\",\"timestamp\":' || ({base_ms} + g) || '}}' \
           WHEN {last} THEN '{{\"type\":\"RUN_FINISHED\",\"threadId\":\"\",\"runId\":\"\",\"outcome\":{{\"type\":\"success\"}},\"timestamp\":' || ({base_ms} + g) || '}}' \
           ELSE '{{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"' || {message} || '\",\"delta\":\"{delta}\",\"timestamp\":' || ({base_ms} + g) || '}}' \
         END AS body, {base_ms} + g AS at_ms \
         FROM g, s"
    )
}
