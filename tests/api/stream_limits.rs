//! Open streams per caller and per thread on one instance (`limits.max_streams_per_*`): past
//! either, a run is refused with 429 `too_many_streams` before anything starts, and a stream's
//! place is given back however it ends.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

async fn app_with_limits(db: &TestDatabase, per_caller: usize, per_thread: usize) -> TestApp {
    let mut config = test_config(&db.url);
    config.limits.max_streams_per_caller = per_caller;
    config.limits.max_streams_per_thread = per_thread;
    TestApp::start_with(config).await
}

/// Expects the run refused with 429 `too_many_streams`, naming `limit`, and nothing stored.
async fn expect_too_many(app: &TestApp, agent: &str, input: &Value, limit: &str) {
    let before = app.counts().await;
    let response = app.post_run(agent, input).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains(limit), "{body}");
    assert_eq!(app.counts().await, before, "a refused stream starts nothing: no thread, turn, run or event");
}

/// Opens a `waiter` run and reads it until the turn has said its word and waits (its log
/// stays as it is for a minute), keeping the stream open.
async fn open_waiting(app: &TestApp, input: &Value) -> reqwest::Response {
    let mut response = app.post_run("waiter", input).await;
    assert_eq!(response.status(), 200);
    let mut raw = String::new();
    while !raw.contains("TEXT_MESSAGE_END") {
        let chunk = response.chunk().await.expect("reads").expect("the stream goes on");
        raw.push_str(&String::from_utf8_lossy(&chunk));
    }
    response
}

/// Posts `input` until it is accepted (a closed stream's place is given back once the server
/// notices the client left, at its next write: a keepalive within a second here).
async fn accepted_soon(app: &TestApp, agent: &str, input: &Value) -> reqwest::Response {
    wait_for(PATIENCE, "the stream's place to be given back", || async {
        let response = app.post_run(agent, input).await;
        if response.status() == 200 {
            return Some(response);
        }
        assert_eq!(response.status(), 429);
        None
    })
    .await
}

async fn a_caller_holds_at_most_its_limit_of_streams(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = app_with_limits(&db, 3, 1000).await;
    let mut open = Vec::new();
    for n in 0..3 {
        open.push(open_waiting(&app, &first_run(&format!("th-cap-{n}"), "run-1", "x")).await);
    }
    // A new thread: accepted, it would have started a turn.
    expect_too_many(&app, "waiter", &first_run("th-cap-extra", "run-1", "x"), "max_streams_per_caller").await;
    // Following a turn that runs already is a stream too.
    expect_too_many(&app, "waiter", &first_run("th-cap-0", "run-1", "x"), "max_streams_per_caller").await;

    drop(open.pop());
    let mut again = accepted_soon(&app, "waiter", &first_run("th-cap-extra", "run-1", "x")).await;
    let first = again.chunk().await.expect("reads").expect("a first chunk");
    assert!(String::from_utf8_lossy(&first).contains("RUN_STARTED"));
    assert_eq!(app.counts().await.turns, 4, "the accepted run started its turn");
}
on_both_stores!(a_caller_holds_at_most_its_limit_of_streams);

async fn a_thread_holds_at_most_its_limit_of_streams(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = app_with_limits(&db, 100, 2).await;
    let input = first_run("th-crowd", "run-1", "x");
    let started = open_waiting(&app, &input).await;
    let follower = open_waiting(&app, &input).await;
    expect_too_many(&app, "waiter", &input, "max_streams_per_thread").await;
    // Other threads are not crowded.
    let elsewhere = app.post_run("waiter", &first_run("th-quiet", "run-1", "x")).await;
    assert_eq!(elsewhere.status(), 200);
    drop(follower);
    let _back = accepted_soon(&app, "waiter", &input).await;
    drop(started);
}
on_both_stores!(a_thread_holds_at_most_its_limit_of_streams);

/// A stream that ends (its run over, or its lifetime up) gives its place back at once.
async fn an_ended_stream_gives_its_place_back(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.limits.max_streams_per_caller = 1;
    config.limits.stream_max_secs = 1;
    let app = TestApp::start_with(config).await;
    for n in 0..3 {
        let events = app.run_to_end("demo", &first_run(&format!("th-done-{n}"), "run-1", "x")).await;
        assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
    }
    // Cut at stream_max_secs, the turn still running.
    let cut = app.run_to_end("waiter", &first_run("th-long", "run-1", "x")).await;
    assert!(!kinds(&cut).contains(&"RUN_FINISHED"));
    let next = app.post_run("demo", &first_run("th-after", "run-1", "x")).await;
    assert_eq!(next.status(), 200, "the cut stream's place is free again");
}
on_both_stores!(an_ended_stream_gives_its_place_back);

/// Every reload brings a new runId; following the latest turn records none, so reloads do not
/// grow `runs` (each is one `board.read` row, as it shows the note), and a reload's stream is
/// still resumable with Last-Event-ID.
async fn reloading_a_page_adds_no_run(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let original = app.run_to_end("demo", &first_run("th-reloads", "run-1", "hello")).await;
    let turn = original[0].id.as_deref().and_then(|id| id.split('.').next()).expect("turn id").to_string();
    // A page reloaded after the end loaded the thread: the user message and its answer (§4.3).
    let mut held = app.get_json("/v1/threads/th-reloads/messages?tenant=default").await["messages"].clone();
    held[0]["id"] = json!(format!("{turn}:in"));
    let reload = |n: usize| json!({"threadId": "th-reloads", "runId": format!("reload-{n}"), "messages": held.clone()});
    let before = app.counts().await;
    for n in 0..5 {
        let followed = app.run_to_end("demo", &reload(n)).await;
        assert_eq!(followed.len(), original.len(), "reload {n} follows the whole turn");
        assert_eq!(followed.last().expect("end").data["runId"], format!("reload-{n}"));
    }
    // Nothing but their reading of the board, one audit row each (§8).
    let after = app.counts().await;
    assert_eq!(agui_gateway::store::RowCounts { audit: before.audit, ..after }, before, "reloads record no run");
    assert_eq!(after.audit, before.audit + 5, "each reload's showing of the note is one board.read");

    let whole = app.run_to_end("demo", &reload(9)).await;
    let head = read_events(app.post_run("demo", &reload(9)).await, Some(4)).await;
    let last_id = head.last().and_then(|e| e.id.clone()).expect("id");
    let tail = read_events(app.post_run_with("demo", &reload(9), &[("last-event-id", &last_id)]).await, None).await;
    assert_eq!(tail, whole[4..], "a reload's stream resumes after its last event");
    let end = app.counts().await;
    assert_eq!(agui_gateway::store::RowCounts { audit: before.audit, ..end }, before);
    assert_eq!(end.audit, after.audit + 3, "three more openings, three more readings");
}
on_both_stores!(reloading_a_page_adds_no_run);

/// A reload that follows a turn waiting for a decision, then reconnects after the decision was
/// made elsewhere, still resumes from where it was.
async fn a_reload_reconnects_across_a_decision(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let first = app.run_to_end("approver", &first_run("th-rd", "run-1", "mail it")).await;
    let interrupt = first.last().expect("end").data["outcome"]["interrupts"][0]["id"].clone();
    let reload = json!({"threadId": "th-rd", "runId": "reload-1", "messages": [
        {"id": "run-1-user", "role": "user", "content": "mail it"}]});
    let waiting = app.run_to_end("approver", &reload).await;
    let last_id = waiting.last().and_then(|e| e.id.clone()).expect("id");
    let resume = json!({"threadId": "th-rd", "runId": "run-2", "messages": [],
        "resume": [{ "interruptId": interrupt, "status": "resolved", "payload": { "approved": true } }]});
    let resumed = app.run_to_end("approver", &resume).await;
    assert_eq!(kinds(&resumed).last(), Some(&"RUN_FINISHED"));
    // The reload's run ended at the wait: reconnecting after its end sends nothing more.
    let response = app.post_run_with("approver", &reload, &[("last-event-id", &last_id)]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(read_events(response, None).await, Vec::new());
}
on_both_stores!(a_reload_reconnects_across_a_decision);
