//! Instance leases (§4.6): a heartbeat renews one row per instance, however many turns it runs,
//! and never a `turns` row. Counted in the database itself: triggers the test installs record
//! every row UPDATE of `turns` and of `instances` into a table of their own, while N turns wait
//! and then while 10 × N do. And the claims at the store, step by step.

use std::time::{Duration, Instant};

use agui_gateway::store;

use crate::helpers::*;

/// How often the instances renew in this test: short, so several heartbeats fit in a second.
const HEARTBEAT_MS: u64 = 50;
/// Heartbeats counted per window.
const BEATS: i64 = 8;

const SQLITE_COUNTERS: &[&str] = &[
    "CREATE TABLE lease_writes (tbl TEXT NOT NULL, row_id TEXT NOT NULL)",
    "CREATE TRIGGER count_turn_updates AFTER UPDATE ON turns \
     BEGIN INSERT INTO lease_writes VALUES ('turns', CAST(NEW.id AS TEXT)); END",
    "CREATE TRIGGER count_instance_updates AFTER UPDATE ON instances \
     BEGIN INSERT INTO lease_writes VALUES ('instances', NEW.id); END",
];

const POSTGRES_COUNTERS: &[&str] = &[
    "CREATE TABLE lease_writes (tbl TEXT NOT NULL, row_id TEXT NOT NULL)",
    "CREATE FUNCTION count_lease_write() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN INSERT INTO lease_writes VALUES (TG_TABLE_NAME, NEW.id::text); RETURN NULL; END $$",
    "CREATE TRIGGER count_turn_updates AFTER UPDATE ON turns FOR EACH ROW EXECUTE FUNCTION count_lease_write()",
    "CREATE TRIGGER count_instance_updates AFTER UPDATE ON instances \
     FOR EACH ROW EXECUTE FUNCTION count_lease_write()",
];

/// Reads one count from the test database.
async fn count(database_url: &str, query: &str) -> i64 {
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        sqlx::query_scalar(query).fetch_one(&mut connection).await.expect("count")
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        sqlx::query_scalar(query).fetch_one(&mut connection).await.expect("count")
    }
}

/// Row updates so far: of `turns`, and of each instance's row (by id).
async fn writes(database_url: &str, instances: &[String]) -> (i64, Vec<i64>) {
    let turns = count(database_url, "SELECT COUNT(*) FROM lease_writes WHERE tbl = 'turns'").await;
    let mut renewals = Vec::new();
    for id in instances {
        let query = format!("SELECT COUNT(*) FROM lease_writes WHERE tbl = 'instances' AND row_id = '{id}'");
        renewals.push(count(database_url, &query).await);
    }
    (turns, renewals)
}

/// Starts `n` waiting turns on `app` and waits until each has said its word and committed the
/// checkpoint after it: from then on the turn writes nothing for a minute.
async fn start_waiting_turns(app: &TestApp, database_url: &str, from: usize, n: usize) {
    for i in from..from + n {
        let response = app.post_run("waiter", &first_run(&format!("th-wait-{i}"), "run-1", "wait")).await;
        assert_eq!(response.status(), 200);
        // The turn runs on without its client.
        drop(response);
    }
    let expected = (from + n) as i64;
    wait_until(Duration::from_secs(60), "every turn to wait after its first step", || async {
        count(database_url, "SELECT COUNT(*) FROM turns WHERE status = 'running' AND checkpoint IS NOT NULL").await
            == expected
    })
    .await;
}

/// Counts the writes while each instance renews `BEATS` times (or a deadline passes, as on a
/// gateway that renews no instance row): no `turns` row is updated, and each instance's row
/// is updated once per heartbeat.
async fn assert_one_write_per_heartbeat(database_url: &str, instances: &[String], turns_running: usize) {
    let (turns_before, renewals_before) = writes(database_url, instances).await;
    let started = Instant::now();
    // Generous for a loaded machine; only a gateway that renews no instance row waits it out.
    let deadline = started + Duration::from_millis(BEATS as u64 * HEARTBEAT_MS * 20);
    let (turns_after, renewals_after) = loop {
        let (turns, renewals) = writes(database_url, instances).await;
        let done = !renewals.is_empty()
            && renewals.iter().zip(&renewals_before).all(|(after, before)| after - before >= BEATS);
        if done || Instant::now() >= deadline {
            break (turns, renewals);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed = started.elapsed();
    assert_eq!(
        turns_after - turns_before,
        0,
        "turn rows updated while {turns_running} turns waited, over {elapsed:?} ({HEARTBEAT_MS} ms heartbeats)"
    );
    let most = elapsed.as_millis() as i64 / HEARTBEAT_MS as i64 + 2;
    for (id, (after, before)) in instances.iter().zip(renewals_after.iter().zip(&renewals_before)) {
        let renewals = after - before;
        assert!(renewals >= BEATS, "instance {id} renewed its lease {renewals} times in {elapsed:?}");
        assert!(
            renewals <= most,
            "instance {id} wrote its row {renewals} times in {elapsed:?}: more than once per heartbeat"
        );
    }
}

async fn a_heartbeat_writes_one_row_per_instance_however_many_turns_run(backend: Backend) {
    const N: usize = 5;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.turns.heartbeat_ms = HEARTBEAT_MS;
    config.turns.lease_ms = 1500;
    config.limits.max_streams_per_caller = 1000;
    // Two instances share a PostgreSQL database; a SQLite file serves one.
    let apps = match backend {
        Backend::Sqlite => vec![TestApp::start_with(config).await],
        Backend::Postgres => vec![TestApp::start_with(config.clone()).await, TestApp::start_with(config).await],
    };
    let counters = match backend {
        Backend::Sqlite => SQLITE_COUNTERS,
        Backend::Postgres => POSTGRES_COUNTERS,
    };
    for statement in counters {
        execute_sql(&db.url, statement).await;
    }
    let instances = instance_ids(&db.url).await;
    start_waiting_turns(&apps[0], &db.url, 0, N).await;
    assert_one_write_per_heartbeat(&db.url, &instances, N).await;
    assert_eq!(instances.len(), apps.len(), "each instance holds one lease row: {instances:?}");
    // Ten times the turns (spread over the instances): the same writes per heartbeat.
    for (i, app) in apps.iter().enumerate() {
        let from = N + i * (9 * N / apps.len());
        let n = if i + 1 == apps.len() { 10 * N - from } else { 9 * N / apps.len() };
        start_waiting_turns(app, &db.url, from, n).await;
    }
    assert_one_write_per_heartbeat(&db.url, &instances, 10 * N).await;
}

/// The ids of the instance rows.
async fn instance_ids(database_url: &str) -> Vec<String> {
    let query = "SELECT id FROM instances ORDER BY id";
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        sqlx::query_scalar(query).fetch_all(&mut connection).await.expect("instances")
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        sqlx::query_scalar(query).fetch_all(&mut connection).await.expect("instances")
    }
}

crate::on_both_stores!(a_heartbeat_writes_one_row_per_instance_however_many_turns_run);

/// Claims at the store, step by step: an instance whose lease lapsed loses all its turns at
/// once and others claim them one at a time (each with a new epoch); a turn naming an owner
/// without a lease, or none, is lapsed at once; a retired instance's turns too; a long-lapsed
/// instance owning no running turn is forgotten.
async fn claims_follow_the_owners_lease(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let store = store::connect(&db.url, 4).await.expect("store opens");
    store.migrate().await.expect("migrations");
    store.register_instance("a", 0, 100).await.expect("a's lease");
    store.register_instance("b", 0, 10_000).await.expect("b's lease");
    let mut of_a = Vec::new();
    for i in 0..3 {
        of_a.push(new_turn(store.as_ref(), &format!("th-a-{i}"), "a").await.pk);
    }
    let of_b = new_turn(store.as_ref(), "th-b", "b").await.pk;

    assert_eq!(store.claim_lapsed_turn("b", 50, true).await.expect("claim"), None, "a's lease holds");
    let mut claimed = Vec::new();
    while let Some(turn) = store.claim_lapsed_turn("b", 200, false).await.expect("claim") {
        assert_eq!(turn.epoch, 2, "each claim gives the turn its next epoch");
        claimed.push(turn.pk);
        assert!(claimed.len() <= 3, "only a's turns are lapsed: {claimed:?}");
    }
    assert_eq!(claimed, of_a, "a's turns, one claim each");
    assert_eq!(store.owned_turns("a").await.expect("owned"), Vec::<(i64, i64)>::new());
    let mut owned = store.owned_turns("b").await.expect("owned");
    owned.sort();
    let mut expected: Vec<(i64, i64)> = of_a.iter().map(|pk| (*pk, 2)).collect();
    expected.push((of_b, 1));
    expected.sort();
    assert_eq!(owned, expected);

    // A turn naming an owner that holds no lease (a command's engine) is lapsed at once.
    let ghost = new_turn(store.as_ref(), "th-ghost", "ghost").await.pk;
    let taken = store.claim_lapsed_turn("b", 200, false).await.expect("claim").expect("the ghost's turn");
    assert_eq!((taken.pk, taken.epoch), (ghost, 2));
    // A turn given back (owner NULL) is lapsed at once, for its former owner too.
    store.release_turn(of_b, "b", 1).await.expect("release");
    let back = store.claim_lapsed_turn("b", 200, false).await.expect("claim").expect("the released turn");
    assert_eq!((back.pk, back.epoch), (of_b, 2));
    assert_eq!(store.claim_lapsed_turn("c", 200, true).await.expect("claim"), None, "b holds the rest");

    // A renewal after the lease lapsed is refused (the owner then checks what it still holds).
    assert!(!store.renew_instance("a", 200, 300).await.expect("renew"));
    assert!(store.renew_instance("b", 200, 10_000).await.expect("renew"));
    // Long lapsed and owning nothing: a is forgotten; b (live, owning turns) is kept.
    assert_eq!(store.forget_instances(150).await.expect("forget"), 1);
    assert!(!store.renew_instance("a", 0, 300).await.expect("renew"), "a's row is gone");
    // b gives its lease up: its turns are lapsed at once, long before its lease would end.
    store.retire_instance("b").await.expect("retire");
    assert!(store.claim_lapsed_turn("c", 300, false).await.expect("claim").is_some());
}

crate::on_both_stores!(claims_follow_the_owners_lease);
