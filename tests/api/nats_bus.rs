//! Two instances on one PostgreSQL database whose wake-ups travel over NATS (`[bus] kind =
//! "nats"`): the scenarios of `followers.rs`, `instances.rs` and `connect.rs` again, with the
//! database notifying nobody, and a NATS server killed and started again mid-turn. The
//! database stays the only truth: whatever NATS loses is read from the table, and every
//! stream still gets every event once, in order.

use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::postgres::PgPool;

use crate::connect::{connect, next_input, until_runs_ended};
use crate::followers::{
    agents, config_with, every_follower_got_the_whole_log, first_event_id, followed_on_b, median_lag_behind_the_runner,
    reads_over_a_window, FOLLOWERS,
};
use crate::helpers::*;
use crate::nats_server::{self, NatsServer};

/// More agents than `followers.rs` has: `huge` says 16 chunks of 70,000 characters, one every
/// 300 ms (each event over a NATS message's 64 KiB), and `long_ticker` ticks for 12 s (through a NATS restart).
fn more_agents() -> String {
    let huge = "h".repeat(70_000 * 16);
    format!(
        r#"
[[agents]]
name = "huge"
kind = "script"
chunk_chars = 70000
chunk_delay_ms = 300
steps = [{{ say = "{huge}" }}]

[[agents]]
name = "long_ticker"
kind = "script"
steps = [{{ tick = 300, every_ms = 40 }}]
"#
    )
}

/// A gateway on `database_url` whose bus is the NATS server at `nats_url`, under `prefix`
/// (each test its own: turn ids of the tests' databases overlap on a shared server).
fn nats_config(database_url: &str, nats_url: &str, prefix: &str) -> agui_gateway::config::Config {
    let bus = format!("\n[bus]\nkind = \"nats\"\nnats_url = \"{nats_url}\"\nnats_subject_prefix = \"{prefix}\"\n");
    config_with(database_url, &format!("{}{}{bus}", agents(), more_agents()))
}

/// Two instances on a fresh database and the NATS server at `nats_url`.
// One store: two instances share one database, which is PostgreSQL's part.
async fn two_nats_apps(nats_url: &str) -> (TestApp, TestApp, TestDatabase) {
    let db = TestDatabase::new(Backend::Postgres).await;
    let prefix = unique("agui-test");
    let a = TestApp::start_with(nats_config(&db.url, nats_url, &prefix)).await;
    let b = TestApp::start_with(nats_config(&db.url, nats_url, &prefix)).await;
    (a, b, db)
}

/// Whether the database was asked to notify anyone: with the NATS bus nobody listens there.
async fn database_listeners(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_one(pool)
    .await
    .expect("activity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_nats_twenty_streams_on_b_get_every_event_of_a_turn_on_a_reading_the_log_at_most_once_per_batch() {
    let (a, b, db) = two_nats_apps(&nats_server::server_url()).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-nats-follow"), "run-1", "tick");
    let readers = followed_on_b(&a, &b, "ticker", &input).await;
    let first = first_event_id(&a, "ticker", &input).await;
    let lag = median_lag_behind_the_runner(&a, &b, "ticker", &input, &first, Instant::now()).await;
    let (reads, events) = reads_over_a_window(&pool).await;
    let lag = lag.await.expect("lag");
    println!("{FOLLOWERS} streams on B over NATS: {reads} reads of the log for {events} events committed; B {lag:?} behind A (median)");
    assert!(lag < Duration::from_millis(400), "B got the events {lag:?} after A (median): not from NATS");
    assert!(events >= 20, "the turn ticked through the window ({events} events)");
    assert!(reads <= events, "B read the log {reads} times for at most {events} batches: more than once per batch");
    // The messages carried the events: only the check for lost ones reads.
    assert!(reads <= 4, "B read the log {reads} times although every message carried its events");
    assert_eq!(database_listeners(&pool).await, 0, "nobody listens on the database");
    every_follower_got_the_whole_log(&a, "ticker", &input, readers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_nats_events_too_big_for_a_message_are_read_once_per_batch_for_all_streams() {
    let (a, b, db) = two_nats_apps(&nats_server::server_url()).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-nats-huge"), "run-1", "huge");
    let readers = followed_on_b(&a, &b, "huge", &input).await;
    let (reads, events) = reads_over_a_window(&pool).await;
    println!("{FOLLOWERS} streams on B over NATS: {reads} reads of the log for {events} events committed (70 KB each)");
    assert!(events >= 4, "the turn streamed through the window ({events} events)");
    // At most one read per message naming the newest seq (and the check for lost ones), never
    // one per stream (that would be 20 a batch).
    assert!(reads <= events + 3, "B read the log {reads} times for {events} batches");
    every_follower_got_the_whole_log(&a, "huge", &input, readers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_nats_a_cancel_sent_to_another_instance_reaches_the_turn() {
    let (a, b, _db) = two_nats_apps(&nats_server::server_url()).await;
    let stream = open_until_waiting(&a, "waiter", &first_run("th-nats-cancel", "run-1", "x")).await;
    let reader = tokio::spawn(stream.rest());
    let cancel = b.client.post(b.url("/v1/threads/th-nats-cancel/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    // Well under the lease and sweep timings: the cancel came over the bus.
    let events = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("ends").expect("reader");
    assert_eq!(events.last().expect("events").data["outcome"]["type"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_nats_a_connect_stream_on_b_sees_the_turns_started_on_a() {
    let (a, b, _db) = two_nats_apps(&nats_server::server_url()).await;
    let input = first_run("th-nats-watch", "run-1", "watch me");
    let mut on_a = EventStream::new(a.post_run("slow", &input).await);
    on_a.until_kind("TEXT_MESSAGE_CONTENT").await;

    // B connects while A runs the turn: it streams the turn live from its start.
    let response = connect(&b, "th-nats-watch", "watch-b", &[]).await;
    assert_eq!(response.status(), 200);
    let mut watching = EventStream::new(response);
    watching.until_kind("RUN_FINISHED").await;
    let whole = on_a.rest().await;
    let first_run_seen = watching.events.clone();
    let without_snapshot: Vec<&str> =
        kinds(&first_run_seen).into_iter().filter(|k| *k != "MESSAGES_SNAPSHOT").collect();
    assert_eq!(without_snapshot, kinds(&whole), "B streamed the turn A ran");

    // The next turn, started on A, reaches B's connect stream too.
    let next = a.run_to_end("demo", &next_input(&a, "th-nats-watch", "run-2", "and more").await).await;
    until_runs_ended(&mut watching, 2).await;
    let events = watching.events.clone();
    assert_eq!(kinds(&events[first_run_seen.len()..]), kinds(&next));
    let data = |events: &[SseEvent]| -> Vec<Value> {
        events.iter().filter(|e| !matches!(e.kind(), "RUN_STARTED" | "RUN_FINISHED")).map(|e| e.data.clone()).collect()
    };
    assert_eq!(data(&events[first_run_seen.len()..]), data(&next), "the next turn's events, as A sent them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_server_restarted_mid_turn_loses_nothing() {
    let mut nats = NatsServer::start();
    let (a, b, db) = two_nats_apps(&nats.url).await;
    let pool = PgPool::connect(&db.url).await.expect("pool");
    let input = first_run(&unique("th-nats-restart"), "run-1", "tick");
    let readers = followed_on_b(&a, &b, "long_ticker", &input).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Every connection drops at once; what is published meanwhile reaches nobody.
    nats.kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    nats.start_again();
    // Once both instances are back on NATS, B is fed from its messages again.
    let first = first_event_id(&a, "long_ticker", &input).await;
    let lag =
        median_lag_behind_the_runner(&a, &b, "long_ticker", &input, &first, Instant::now() + Duration::from_secs(2))
            .await;
    let (reads, events) = reads_over_a_window(&pool).await;
    println!("after the NATS restart: {reads} reads of the log for {events} events committed");
    assert!(events >= 20, "the turn ticked through the window ({events} events)");
    assert!(reads <= 4, "B read the log {reads} times: it did not follow over NATS again");
    let lag = lag.await.expect("lag");
    println!("after the NATS restart: B {lag:?} behind A (median)");
    assert!(lag < Duration::from_millis(400), "B got the events {lag:?} after A (median): not from NATS again");
    every_follower_got_the_whole_log(&a, "long_ticker", &input, readers).await;
}

// One store: the bus stands beside a PostgreSQL database (NATS is for several instances).
#[tokio::test]
async fn an_instance_whose_nats_server_does_not_answer_does_not_start() {
    let mut nats = NatsServer::start();
    // Its port answers nobody now.
    nats.kill();
    let db = TestDatabase::new(Backend::Postgres).await;
    let refused = agui_gateway::server::Server::start(nats_config(&db.url, &nats.url, "agui-test")).await;
    let message = refused.err().expect("the gateway does not start").to_string();
    assert!(message.starts_with(&format!("the NATS bus: cannot reach the NATS server at {}", nats.url)), "{message}");
    // Noticed before the migrations: the database is as it was, empty.
    let pool = PgPool::connect(&db.url).await.expect("connect");
    let tables: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'")
            .fetch_one(&pool)
            .await
            .expect("tables");
    assert_eq!(tables, 0, "no migration ran for an instance that does not start");
}
