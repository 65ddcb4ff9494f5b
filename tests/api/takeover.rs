//! Turns outlive the instance that ran them (§4.4–§4.6): a stopped instance hands its turns
//! over, another (or the same database reopened) continues them from their checkpoint, and a
//! client that resumes with `Last-Event-ID` sees one valid, complete run.

use std::time::Duration;

use crate::helpers::*;
use crate::on_both_stores;

/// Checks a joined stream: ids strictly increasing without gaps, one terminal at the end,
/// every message opened is closed, and the whole answer appears as a message after the cut.
fn assert_valid_continuation(joined: &[SseEvent]) {
    let seqs: Vec<i64> = joined.iter().filter_map(|e| e.id.as_deref()?.rsplit('.').next()?.parse().ok()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gap, no duplicate");
    assert_eq!(kinds(joined).last(), Some(&"RUN_FINISHED"));
    let mut open = std::collections::HashSet::new();
    for event in joined {
        let id = event.data["messageId"].as_str().unwrap_or("").to_string();
        match event.kind() {
            "TEXT_MESSAGE_START" => assert!(open.insert(id), "a message opened twice"),
            "TEXT_MESSAGE_CONTENT" => assert!(open.contains(&id), "content outside its message"),
            "TEXT_MESSAGE_END" => assert!(open.remove(&id), "an end without a start"),
            _ => {}
        }
    }
    assert!(open.is_empty(), "messages left open: {open:?}");
}

fn message_texts(events: &[SseEvent]) -> Vec<String> {
    let mut texts: Vec<(String, String)> = Vec::new();
    for event in events {
        let id = event.data["messageId"].as_str().unwrap_or("").to_string();
        match event.kind() {
            "TEXT_MESSAGE_START" => texts.push((id, String::new())),
            "TEXT_MESSAGE_CONTENT" => {
                if let Some((_, text)) = texts.iter_mut().find(|(m, _)| *m == id) {
                    text.push_str(event.data["delta"].as_str().unwrap_or(""));
                }
            }
            _ => {}
        }
    }
    texts.into_iter().map(|(_, text)| text).collect()
}

// One store: it is SQLite's restart (one instance on its file); PostgreSQL's takeovers are below.
#[tokio::test]
async fn a_sqlite_gateway_restarted_mid_turn_finishes_the_turn_and_the_client_resumes() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let first = TestApp::start(&db.url).await;
    let input = first_run("th-restart", "run-1", "survive a restart");
    // Stop while the first answer is still streaming.
    let head = read_events(first.post_run("slow", &input).await, Some(6)).await;
    first.shut_down().await;
    let second = TestApp::start(&db.url).await;
    let last_id = head.last().and_then(|e| e.id.clone()).expect("id");
    let tail = read_events(second.post_run_with("slow", &input, &[("last-event-id", &last_id)]).await, None).await;
    let mut joined = head;
    joined.extend(tail);
    assert_valid_continuation(&joined);
    let texts = message_texts(&joined);
    let whole = "Streaming slowly so a client can drop mid-message: survive a restart";
    assert!(texts.iter().any(|t| t == whole), "the cut answer is given whole afterwards: {texts:?}");
    assert!(texts.first().is_some_and(|t| t.len() < whole.len()), "the first message was cut: {texts:?}");
    let tool_calls = joined.iter().filter(|e| e.kind() == "TOOL_CALL_START").count();
    assert_eq!(tool_calls, 1, "the tool ran once");
    assert_eq!(joined, second.run_to_end("slow", &input).await, "the joined stream is the log");
}

#[tokio::test]
async fn a_turn_handed_over_on_shutdown_is_taken_over_by_another_instance_at_once() {
    let (a, b, _db) = two_apps().await;
    let input = first_run("th-handover", "run-1", "move me");
    let head = read_events(a.post_run("slow", &input).await, Some(25)).await;
    let stopped_at = std::time::Instant::now();
    a.shut_down().await;
    let last_id = head.last().and_then(|e| e.id.clone()).expect("id");
    let tail = read_events(b.post_run_with("slow", &input, &[("last-event-id", &last_id)]).await, None).await;
    let took = stopped_at.elapsed();
    let mut joined = head;
    joined.extend(tail);
    assert_valid_continuation(&joined);
    assert_eq!(joined.iter().filter(|e| e.kind() == "TOOL_CALL_START").count(), 1, "no tool call repeated");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(joined, b.run_to_end("slow", &input).await);
}

// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn a_turn_left_by_a_stopped_instance_is_taken_over_by_one_started_later() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start(&db.url).await;
    let input = first_run("th-later", "run-1", "later");
    let head = read_events(a.post_run("slow", &input).await, Some(8)).await;
    a.shut_down().await;
    // Nobody runs the turn now; an instance that starts later finds it by its lapsed lease.
    let thread_turns = |app: &TestApp| {
        let store = app.store.clone();
        async move {
            let thread = store.find_thread("default", "th-later").await.expect("query").expect("thread");
            store.thread_turns(thread.pk).await.expect("turns")
        }
    };
    let b = TestApp::start(&db.url).await;
    let last_id = head.last().and_then(|e| e.id.clone()).expect("id");
    let tail = tokio::time::timeout(
        Duration::from_secs(20),
        read_events(b.post_run_with("slow", &input, &[("last-event-id", &last_id)]).await, None),
    )
    .await
    .expect("taken over");
    let mut joined = head;
    joined.extend(tail);
    assert_valid_continuation(&joined);
    assert!(thread_turns(&b).await[0].status.is_finished());
}

// One store: the cap is the stream's, not the store's.
#[tokio::test]
async fn a_stream_closes_cleanly_at_its_lifetime_cap_and_resumes() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.limits.stream_max_secs = 1;
    let app = TestApp::start_with(config).await;
    let input = first_run("th-cap", "run-1", "x");
    let started = std::time::Instant::now();
    let first = read_events(app.post_run("waiter", &input).await, None).await;
    assert!(started.elapsed() < Duration::from_secs(5), "closed at the cap");
    assert!(!first.is_empty());
    assert!(!matches!(kinds(&first).last(), Some(&"RUN_FINISHED") | Some(&"RUN_ERROR")), "the run is not over");
    let last_id = first.last().and_then(|e| e.id.clone()).expect("id");
    let cancel = app.client.post(app.url("/v1/threads/th-cap/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let rest = read_events(app.post_run_with("waiter", &input, &[("last-event-id", &last_id)]).await, None).await;
    assert_eq!(rest.last().expect("events").data["outcome"]["type"], "cancelled");
}

/// A log cut right after its `RUN_STARTED` (its `STATE_SNAPSHOT` never committed) is continued
/// with the snapshot first: the run still opens with the board, as the official client needs
/// before the board's first `STATE_DELTA`.
async fn a_turn_taken_over_before_its_snapshot_committed_still_opens_with_the_board(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let first = TestApp::start(&db.url).await;
    let input = first_run("th-cut-open", "run-1", "cut at the start");
    let head = read_events(first.post_run("slow", &input).await, Some(4)).await;
    assert_eq!(kinds(&head)[..2], ["RUN_STARTED", "STATE_SNAPSHOT"]);
    first.shut_down().await;
    // What a crash between the two opening writes left: the first event alone.
    cut_logs_after(&db.url, 1).await;
    execute_sql(&db.url, "UPDATE turns SET checkpoint = NULL").await;
    let second = TestApp::start(&db.url).await;
    let whole = second.run_to_end("slow", &input).await;
    assert_eq!(kinds(&whole)[..2], ["RUN_STARTED", "STATE_SNAPSHOT"], "{:?}", kinds(&whole));
    assert_eq!(whole[1].data["snapshot"]["board"]["notes"], serde_json::json!([]));
    assert_valid_continuation(&whole);
    let (ok, report) = agui_check(&second.run_url("slow"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_turn_taken_over_before_its_snapshot_committed_still_opens_with_the_board);

/// §4.1: a cancel asked for while no instance runs the turn (its instance gone, the wake-up
/// heard by nobody) is kept in the turn's row, and the instance that takes the turn over ends
/// it `cancelled` instead of running its agent on.
// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn a_cancel_asked_while_nobody_runs_the_turn_is_honoured_by_the_instance_that_takes_it_over() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start(&db.url).await;
    let input = first_run("th-cancel-later", "run-1", "wait");
    let head = open_until_waiting(&a, "waiter", &input).await;
    let last_id = head.events.last().and_then(|e| e.id.clone()).expect("id");
    let store = a.store.clone();
    a.shut_down().await;
    let thread = store.find_thread("default", "th-cancel-later").await.expect("q").expect("thread");
    let turn = store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    assert!(store.request_cancel(turn.pk).await.expect("cancel"), "the turn is still running, owned by nobody");
    let b = TestApp::start(&db.url).await;
    let tail = tokio::time::timeout(
        PATIENCE,
        read_events(b.post_run_with("waiter", &input, &[("last-event-id", &last_id)]).await, None),
    )
    .await
    .expect("the turn ends");
    assert_eq!(tail.last().expect("events").data["outcome"]["type"], "cancelled", "{:?}", kinds(&tail));
    let ended = b.store.turn_by_pk(turn.pk).await.expect("q").expect("turn");
    assert_eq!(ended.status.as_str(), "cancelled");
}

/// A taken-over turn learns its tenant from its thread: while the thread cannot be read, the
/// turn is not run (under no tenant it would have no token budget and charge no one); it is
/// tried again with backoff, and runs to its end under its tenant once the thread reads.
async fn a_takeover_that_cannot_read_its_thread_waits_for_it_and_never_runs_without_a_tenant(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let a = TestApp::start(&db.url).await;
    let input = first_run("th-no-tenant", "run-1", "wait for my thread");
    read_events(a.post_run("slow", &input).await, Some(8)).await;
    let thread = a.store.find_thread("default", "th-no-tenant").await.expect("query").expect("thread");
    let turn = a.store.thread_turns(thread.pk).await.expect("turns").remove(0);
    let logged = |app: &TestApp| {
        let store = app.store.clone();
        async move { store.events_after(turn.pk, 0, 10_000).await.expect("the log").len() }
    };
    a.shut_down().await;

    // The thread's table is away while another instance takes the turn over.
    execute_sql(&db.url, "ALTER TABLE threads RENAME TO threads_away").await;
    let b = TestApp::start(&db.url).await;
    let before = logged(&b).await;
    wait_until(PATIENCE, "the turn to be claimed", || async {
        b.store.turn_by_pk(turn.pk).await.expect("the turn").is_some_and(|row| row.epoch > turn.epoch)
    })
    .await;
    holds_throughout(Duration::from_millis(1500), "the turn is not run without its tenant", || async {
        logged(&b).await == before
    })
    .await;

    execute_sql(&db.url, "ALTER TABLE threads_away RENAME TO threads").await;
    wait_until(PATIENCE, "the turn to finish under its tenant", || async {
        b.store.turn_by_pk(turn.pk).await.expect("the turn").is_some_and(|row| row.status.is_finished())
    })
    .await;
    let row = b.store.turn_by_pk(turn.pk).await.expect("the turn").expect("the turn");
    assert_eq!(row.status, agui_gateway::store::TurnStatus::Succeeded);
    let tail = read_events(b.post_run("slow", &input).await, None).await;
    assert_valid_continuation(&tail);
}
crate::on_both_stores!(a_takeover_that_cannot_read_its_thread_waits_for_it_and_never_runs_without_a_tenant);
