//! Streams on an instance that does not run their turn (§4.6 "any instance serves any
//! stream"): that instance follows the turn once, whatever the number of its streams, and reads
//! the log at most once per committed batch (none when the runner's notice carries the events),
//! counted in the database itself; a notice that is lost or never sent is caught up from the
//! table, and every stream still gets every event once, in order.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::postgres::PgPool;

use crate::helpers::*;

/// Streams on B that follow the one turn A runs.
pub(crate) const FOLLOWERS: usize = 20;

/// The agents of these tests: `ticker` ticks 150 times, every 40 ms, and `wide` says 24
/// chunks of 8,000 characters, one every 150 ms (each event too big for a notice to carry).
pub(crate) fn agents() -> String {
    let wide = "w".repeat(8_000 * 24);
    format!(
        r#"
[[agents]]
name = "ticker"
kind = "script"
steps = [{{ tick = 150, every_ms = 40 }}]

[[agents]]
name = "wide"
kind = "script"
chunk_chars = 8000
chunk_delay_ms = 150
steps = [{{ say = "{wide}" }}]
"#
    )
}

/// The test configuration with `extra` (TOML) after it, on `database_url`.
pub(crate) fn config_with(database_url: &str, extra: &str) -> agui_gateway::config::Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!("{TEST_CONFIG}{extra}")).expect("write config");
    let mut config = agui_gateway::config::Config::load(Some(&path), std::iter::empty()).expect("config loads");
    config.database.url = database_url.to_string();
    config
}

/// A gateway with [`agents`].
fn config(database_url: &str) -> agui_gateway::config::Config {
    config_with(database_url, &agents())
}

/// Reads of the log (`event_segments`) so far, as the database counts them (index and table
/// scans; each read of the log scans it once).
/// The server publishes a backend's counts once it is idle and a second has passed, so the
/// caller waits that long around a window.
pub(crate) async fn log_reads(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(idx_scan, 0) + COALESCE(seq_scan, 0) FROM pg_stat_user_tables WHERE relname = 'event_segments'",
    )
    .fetch_one(pool)
    .await
    .expect("table statistics")
}

/// Segments of the turn begun in `[from_ms, to_ms]`: its batches there (a segment is a turn's
/// events of one batch).
async fn batches_between(pool: &PgPool, from_ms: i64, to_ms: i64) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM event_segments WHERE at_ms BETWEEN $1 AND $2")
        .bind(from_ms)
        .bind(to_ms)
        .fetch_one(pool)
        .await
        .expect("count")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The turn started on A (its first event read, the connection dropped), then [`FOLLOWERS`]
/// streams resuming after that event on B, read to their ends in the background.
pub(crate) async fn followed_on_b(
    a: &TestApp,
    b: &TestApp,
    agent: &str,
    input: &Value,
) -> Vec<tokio::task::JoinHandle<Vec<SseEvent>>> {
    let head = read_events(a.post_run(agent, input).await, Some(1)).await;
    let first = head.first().and_then(|e| e.id.clone()).expect("the first event has an id");
    let mut readers = Vec::new();
    for _ in 0..FOLLOWERS {
        let response = b.post_run_with(agent, input, &[("last-event-id", first.as_str())]).await;
        assert_eq!(response.status(), 200);
        readers.push(tokio::spawn(read_events(response, None)));
    }
    readers
}

/// Every stream on B got exactly the log after the first event, in order, to its end.
pub(crate) async fn every_follower_got_the_whole_log(
    a: &TestApp,
    agent: &str,
    input: &Value,
    readers: Vec<tokio::task::JoinHandle<Vec<SseEvent>>>,
) {
    let whole = a.run_to_end(agent, input).await;
    assert_eq!(whole.last().map(SseEvent::kind), Some("RUN_FINISHED"));
    for reader in readers {
        let events = tokio::time::timeout(Duration::from_secs(60), reader).await.expect("stream ends").expect("reader");
        assert_eq!(events, whole[1..], "a follower on B got every event after its Last-Event-ID once, in order");
    }
}

/// Counts B's reads of the log over a window while the turn runs on A; returns (reads, events
/// committed in the window).
pub(crate) async fn reads_over_a_window(pool: &PgPool) -> (i64, i64) {
    // Every stream on B has caught up and the turn is followed; the counts are published.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let from = now_ms();
    let before = log_reads(pool).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = log_reads(pool).await;
    let to = now_ms();
    // A backend publishes its counts up to a second late, so the reads counted reach from a
    // second before the first count to the second one: the batches of that whole span are the
    // ones whose reads can be counted (their segments). The count query itself reads after the
    // second count.
    let events = batches_between(pool, from - 1_000, to).await;
    (after - before, events)
}

/// When each event of `response` arrived, by id, read to its end.
pub(crate) async fn arrivals(response: reqwest::Response) -> HashMap<String, Instant> {
    let mut stream = EventStream::new(response);
    let mut arrived = HashMap::new();
    let mut seen = 0;
    while stream.read_chunk().await {
        let now = Instant::now();
        for event in &stream.events[seen..] {
            arrived.insert(event.id.clone().unwrap_or_default(), now);
        }
        seen = stream.events.len();
    }
    arrived
}

/// Reads the turn on A (its runner) and on B at once, after `from`; returns the median of how
/// much later B got each event that reached A after `since`. Woken by the runner's notices or
/// messages it is milliseconds; a follower left to the 2-second check for lost ones would lag
/// about a second.
pub(crate) async fn median_lag_behind_the_runner(
    a: &TestApp,
    b: &TestApp,
    agent: &str,
    input: &Value,
    from: &str,
    since: Instant,
) -> tokio::task::JoinHandle<Duration> {
    let on_a = a.post_run_with(agent, input, &[("last-event-id", from)]).await;
    let on_b = b.post_run_with(agent, input, &[("last-event-id", from)]).await;
    tokio::spawn(async move {
        let (on_a, on_b) = tokio::join!(arrivals(on_a), arrivals(on_b));
        let mut lags: Vec<Duration> = on_a
            .iter()
            .filter(|(_, at_a)| **at_a > since)
            .filter_map(|(id, at_a)| Some(on_b.get(id)?.saturating_duration_since(*at_a)))
            .collect();
        assert!(lags.len() >= 20, "both streams got the turn's events ({} compared)", lags.len());
        lags.sort();
        lags[lags.len() / 2]
    })
}

/// The id of the turn's first event, as a stream on A saw it.
pub(crate) async fn first_event_id(a: &TestApp, agent: &str, input: &Value) -> String {
    let head = read_events(a.post_run_with(agent, input, &[]).await, Some(1)).await;
    head.first().and_then(|e| e.id.clone()).expect("the first event has an id")
}

// One store: following on another instance needs a shared database, which is PostgreSQL's part.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_instance_reads_the_log_at_most_once_per_batch_whatever_its_streams() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start_with(config(&db.url)).await;
    let b = TestApp::start_with(config(&db.url)).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-follow"), "run-1", "tick");
    let readers = followed_on_b(&a, &b, "ticker", &input).await;
    let first = first_event_id(&a, "ticker", &input).await;
    let lag = median_lag_behind_the_runner(&a, &b, "ticker", &input, &first, Instant::now()).await;
    let (reads, events) = reads_over_a_window(&pool).await;
    let lag = lag.await.expect("lag");
    println!(
        "{FOLLOWERS} streams on B: {reads} reads of the log for {events} events committed; B {lag:?} behind A (median)"
    );
    // Woken by the runner's notices, not by the check for lost ones (a second late).
    assert!(lag < Duration::from_millis(400), "B got the events {lag:?} after A (median): not from the notices");
    assert!(events >= 20, "the turn ticked through the window ({events} events)");
    assert!(reads <= events, "B read the log {reads} times for at most {events} batches: more than once per batch");
    // The notices carried the (small) events: only the check for lost notices reads.
    assert!(reads <= 4, "B read the log {reads} times although every notice carried its events");
    every_follower_got_the_whole_log(&a, "ticker", &input, readers).await;
}

// One store: notices are PostgreSQL's `NOTIFY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_too_big_for_a_notice_are_read_once_per_batch_for_all_streams() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start_with(config(&db.url)).await;
    let b = TestApp::start_with(config(&db.url)).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-wide"), "run-1", "wide");
    let readers = followed_on_b(&a, &b, "wide", &input).await;
    let (reads, events) = reads_over_a_window(&pool).await;
    println!("{FOLLOWERS} streams on B: {reads} reads of the log for {events} events committed (8 KB each)");
    assert!(events >= 8, "the turn streamed through the window ({events} events)");
    // One read per notice (and the check for lost ones), never one per stream.
    assert!(reads <= events + 3, "B read the log {reads} times for {events} batches");
    every_follower_got_the_whole_log(&a, "wide", &input, readers).await;
}

// One store: the listening connection is PostgreSQL's `LISTEN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_listening_connection_drops_catches_up_from_the_table() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start_with(config(&db.url)).await;
    let b = TestApp::start_with(config(&db.url)).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-lost"), "run-1", "tick");
    let readers = followed_on_b(&a, &b, "ticker", &input).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Every listening connection is cut: notices sent meanwhile are lost to their instance.
    let cut: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&pool)
    .await
    .expect("cut the listeners");
    assert!(!cut.is_empty(), "the instances listen");
    every_follower_got_the_whole_log(&a, "ticker", &input, readers).await;
}

// One store: notices are PostgreSQL's `NOTIFY`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn notices_never_sent_are_caught_up_from_the_table() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start_with(config(&db.url)).await;
    let b = TestApp::start_with(config(&db.url)).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-unsent"), "run-1", "tick");
    let readers = followed_on_b(&a, &b, "ticker", &input).await;
    // The follow mark erased again and again: the runner tells B of nothing from now on.
    let started = Instant::now();
    let erase = {
        let pool = pool.clone();
        tokio::spawn(async move {
            while started.elapsed() < Duration::from_secs(30) {
                let _ = sqlx::query("UPDATE turns SET followed_until_ms = 0").execute(&pool).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    every_follower_got_the_whole_log(&a, "ticker", &input, readers).await;
    erase.abort();
}
