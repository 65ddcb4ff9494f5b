//! The log's partitions (PostgreSQL): `event_segments` is partitioned by turn, the partitions
//! are made ahead of the turns that need them, a batch whose turn has none makes them and is
//! written all the same, and a partition is dropped whole once no turn of its range is left.

use sqlx::Connection;

use crate::helpers::*;

/// A gateway on `url` with `span` turn ids per partition of the log, whose lease upkeep (which
/// keeps the partitions ahead every ten heartbeats) does not come round during a test: the
/// partitions it has are those made at its start and by the test's own upkeeps.
async fn gateway_with_partitions_of(url: &str, span: u64) -> TestApp {
    let mut config = test_config(url);
    config.event_log.partition_turns = span;
    config.turns.heartbeat_ms = 60_000;
    config.turns.lease_ms = 180_000;
    TestApp::start_with(config).await
}

async fn connect(url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(url).await.expect("postgres")
}

/// The partitions as the gateway recorded them: (name, lower, upper), by range.
async fn partitions(connection: &mut sqlx::PgConnection) -> Vec<(String, i64, i64)> {
    sqlx::query_as("SELECT name, lower, upper FROM log_partitions ORDER BY lower")
        .fetch_all(connection)
        .await
        .expect("log_partitions")
}

/// Where each stored segment is: (the table holding it, its turn, its events).
async fn placement(connection: &mut sqlx::PgConnection) -> Vec<(String, i64, i32)> {
    sqlx::query_as("SELECT tableoid::regclass::text, turn, events FROM event_segments ORDER BY turn, last_seq")
        .fetch_all(connection)
        .await
        .expect("segments")
}

/// The partitions PostgreSQL itself has attached to `event_segments`.
async fn attached(connection: &mut sqlx::PgConnection) -> Vec<String> {
    let mut names: Vec<(String,)> =
        sqlx::query_as("SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'event_segments'::regclass")
            .fetch_all(connection)
            .await
            .expect("pg_inherits");
    names.sort();
    names.into_iter().map(|(name,)| name).collect()
}

fn thread_run(thread: &str) -> serde_json::Value {
    first_run(thread, "run-1", "hello")
}

/// The events after a turn's first one, read back with `Last-Event-ID`.
async fn replay_after_first(app: &TestApp, input: &serde_json::Value, events: &[SseEvent]) -> Vec<SseEvent> {
    let first = events.first().and_then(|event| event.id.clone()).expect("the first event's id");
    let response = app.post_run_with("demo", input, &[("last-event-id", &first)]).await;
    assert_eq!(response.status(), 200);
    read_events(response, None).await
}

async fn delete_thread(app: &TestApp, thread: &str) {
    let response =
        app.client.delete(app.url(&format!("/v1/threads/{thread}?tenant=default"))).send().await.expect("delete");
    assert_eq!(response.status(), 204, "thread {thread} erased");
}

/// Each turn's segments are in the partition whose range holds the turn, the partitions made
/// ahead by the upkeep (at start, then as turns come), each recorded as PostgreSQL attached it.
// One store: the log is partitioned on PostgreSQL only (SQLite's table is one B-tree).
#[tokio::test]
async fn each_turn_is_logged_in_the_partition_of_its_range_made_ahead_of_it() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let app = gateway_with_partitions_of(&db.url, 2).await;
    let mut connection = connect(&db.url).await;
    let made_at_start = partitions(&mut connection).await;
    assert_eq!(
        made_at_start,
        vec![("event_segments_first".to_string(), i64::MIN, 1), ("event_segments_1".to_string(), 1, 3)],
        "the migration's partition, then one made ahead of the first turns"
    );
    let mut streamed = 0;
    for index in 0..5 {
        let events = app.run_to_end("demo", &thread_run(&format!("th-part-{index}"))).await;
        assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
        streamed += events.len();
        let upkeep = app.store.keep_log_partitions(2, now_ms()).await.expect("an upkeep");
        assert!(upkeep.dropped.is_empty(), "nothing is dropped while its turns are there");
    }
    let recorded = partitions(&mut connection).await;
    let (newest_turn,): (i64,) =
        sqlx::query_as("SELECT MAX(id) FROM turns").fetch_one(&mut connection).await.expect("turns");
    let newest_upper = recorded.last().expect("partitions").2;
    assert!(newest_upper > newest_turn + 1, "a partition is ready ahead of the next turn: {recorded:?}");
    for pair in recorded.windows(2) {
        assert_eq!(pair[0].2, pair[1].1, "the ranges follow each other without a gap: {recorded:?}");
    }
    let mut names: Vec<String> = recorded.iter().map(|p| p.0.clone()).collect();
    names.sort();
    assert_eq!(attached(&mut connection).await, names, "what is recorded is what is attached");
    let placed = placement(&mut connection).await;
    assert!(!placed.is_empty());
    for (table, turn, _) in &placed {
        let home = recorded.iter().find(|(_, lower, upper)| lower <= turn && turn < upper).expect("a range");
        assert_eq!(table, &home.0, "turn {turn}'s segment is in the partition of its range");
    }
    let stored: i32 = placed.iter().map(|p| p.2).sum();
    assert_eq!(stored as usize, streamed, "every event streamed is stored once");
}

/// A turn numbered past every partition (the upkeep fell behind): its first batch finds no
/// partition, the store makes them, and the batch is written on its retry: the turn runs to
/// its end with nothing lost, and replays whole.
// One store: the log is partitioned on PostgreSQL only (SQLite's table is one B-tree).
#[tokio::test]
async fn a_batch_whose_turn_has_no_partition_makes_them_and_is_written() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let app = gateway_with_partitions_of(&db.url, 100).await;
    let mut connection = connect(&db.url).await;
    sqlx::query("SELECT setval('turns_id_seq', 5000)").execute(&mut connection).await.expect("setval");
    assert!(partitions(&mut connection).await.iter().all(|p| p.2 <= 5001), "no partition holds turn 5001 yet");
    // (Without the store making them, the batch would be retried until the lease upkeep came
    // round, which it does not in this test.)
    let input = thread_run("th-far");
    let run = app.run_to_end("demo", &input);
    let events = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the turn is written although no partition held it");
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&events));
    assert!(!kinds(&events).contains(&"RUN_ERROR"));
    let recorded = partitions(&mut connection).await;
    assert!(
        recorded.iter().any(|(_, lower, upper)| *lower <= 5001 && 5001 < *upper),
        "a partition holds turn 5001: {recorded:?}"
    );
    let placed = placement(&mut connection).await;
    let stored: i32 = placed.iter().filter(|p| p.1 == 5001).map(|p| p.2).sum();
    assert_eq!(stored as usize, events.len(), "every event of the turn is stored once");
    assert_eq!(replay_after_first(&app, &input, &events).await, events[1..], "the turn replays whole");
}

/// A partition is dropped whole once no turn of its range is left and new turns were numbered
/// past it a while ago; never while one of its turns is there, never at once.
// One store: the log is partitioned on PostgreSQL only (SQLite's table is one B-tree).
#[tokio::test]
async fn a_partition_no_turn_is_left_in_is_dropped_whole_and_only_then() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let app = gateway_with_partitions_of(&db.url, 2).await;
    let mut connection = connect(&db.url).await;
    let mut th_c = Vec::new();
    for thread in ["th-a", "th-b", "th-c"] {
        th_c = app.run_to_end("demo", &thread_run(thread)).await;
        app.store.keep_log_partitions(2, now_ms()).await.expect("an upkeep");
    }
    let later = now_ms() + 11 * 60 * 1000;
    // Turns 1 and 2 (th-a, th-b) are in `event_segments_1`; the migration's partition holds none.
    delete_thread(&app, "th-a").await;
    let upkeep = app.store.keep_log_partitions(2, now_ms()).await.expect("an upkeep");
    assert!(upkeep.dropped.is_empty(), "not at once: {upkeep:?}");
    let upkeep = app.store.keep_log_partitions(2, later).await.expect("an upkeep");
    assert_eq!(upkeep.dropped, vec!["event_segments_first".to_string()], "th-b is still in event_segments_1");
    assert!(attached(&mut connection).await.contains(&"event_segments_1".to_string()));
    delete_thread(&app, "th-b").await;
    let upkeep = app.store.keep_log_partitions(2, later).await.expect("an upkeep");
    assert_eq!(upkeep.dropped, vec!["event_segments_1".to_string()]);
    let left = attached(&mut connection).await;
    assert!(!left.contains(&"event_segments_1".to_string()), "{left:?}");
    assert!(partitions(&mut connection).await.iter().all(|p| p.0 != "event_segments_1"));
    // th-c, in a later partition, is untouched: it replays whole, and a new turn is logged.
    let replayed = replay_after_first(&app, &thread_run("th-c"), &th_c).await;
    assert_eq!(replayed, th_c[1..], "th-c replays whole");
    let next = app.run_to_end("demo", &thread_run("th-d")).await;
    assert_eq!(kinds(&next).last(), Some(&"RUN_FINISHED"));
}
