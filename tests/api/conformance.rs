//! The official client as the judge: `@ag-ui/client` 1.0 with verification on, and every event
//! validated by `@ag-ui/core/schemas` (via `tests/clients/agui-check.mjs`, `--strict`).

use serde_json::json;

use crate::helpers::*;
use crate::on_both_stores;

async fn assert_passes(url: &str, input: &serde_json::Value) {
    let (passed, report) = agui_check(url, input).await;
    assert!(passed, "the official client rejected the stream:\n{report}");
}

#[tokio::test]
async fn the_demo_run_passes_the_official_client_on_sqlite_and_postgres() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDatabase::new(backend).await;
        let app = TestApp::start(&db.url).await;
        let input = first_run(&unique("th-check"), "run-check", "hello client");
        assert_passes(&app.run_url("demo"), &input).await;
        // The same run again is a replay from the log: it must pass too.
        assert_passes(&app.run_url("demo"), &input).await;
        // And a second turn on the thread, with the history as the gateway records it.
        let thread = input["threadId"].as_str().expect("thread").to_string();
        let messages: serde_json::Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
        let mut history = messages["messages"].as_array().expect("messages").clone();
        history.push(json!({"id": "u2", "role": "user", "content": "again"}));
        assert_passes(&app.run_url("slow"), &json!({"threadId": thread, "runId": "run-2", "messages": history})).await;
    }
}

// One store: the official client judges the wire, which no store changes.
#[tokio::test]
async fn failed_refused_and_burst_runs_pass_the_official_client() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    assert_passes(&app.run_url("failing"), &first_run("th-check-fail", "r", "x")).await;
    assert_passes(&app.run_url("burst"), &first_run("th-check-burst", "r", "x")).await;
    app.run_to_end("demo", &first_run("th-check-refused", "r1", "x")).await;
    let mismatch = json!({"threadId": "th-check-refused", "runId": "r2", "messages": [
        {"id": "a", "role": "user", "content": "not what was said"}, {"id": "b", "role": "user", "content": "x"}]});
    assert_passes(&app.run_url("demo"), &mismatch).await;
}

#[tokio::test]
async fn a_resumed_stream_joined_to_its_head_passes_the_official_client() {
    let (a, b, _db) = two_apps().await;
    let input = first_run("th-check-join", "run-join", "join me");
    let head = read_events(a.post_run("slow", &input).await, Some(11)).await;
    let last_id = head.last().and_then(|e| e.id.clone()).expect("id");
    let tail = read_events(b.post_run_with("slow", &input, &[("last-event-id", &last_id)]).await, None).await;
    let mut joined = head;
    joined.extend(tail);
    let (url, server) = serve_recorded_stream(sse_body(&joined)).await;
    assert_passes(&url, &input).await;
    server.abort();
}

async fn a_cancelled_run_passes_the_official_client(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-check-cancel", "run-c", "x");
    let stream = open_until_waiting(&app, "waiter", &input).await;
    let reader = tokio::spawn(stream.rest_frames());
    let cancel = app.client.post(app.url("/v1/threads/th-check-cancel/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let (events, raw, _) = reader.await.expect("reader");
    assert_eq!(events.last().expect("events").data["outcome"]["type"], "cancelled");
    let (url, server) = serve_recorded_stream(raw).await;
    assert_passes(&url, &input).await;
    server.abort();
}
on_both_stores!(a_cancelled_run_passes_the_official_client);

#[tokio::test]
async fn the_official_client_answers_an_interrupt_and_its_continued_run_passes() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDatabase::new(backend).await;
        let app = TestApp::start(&db.url).await;
        let clients = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
        let output = tokio::process::Command::new("node")
            .arg(clients.join("interrupt-flow.mjs"))
            .arg(app.run_url("approver"))
            .current_dir(&clients)
            .output()
            .await
            .expect("node runs");
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{report}{}", String::from_utf8_lossy(&output.stderr));
    }
}

async fn an_interrupted_run_passes_the_official_client(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    assert_passes(&app.run_url("approver"), &first_run("th-check-interrupt", "r", "x")).await;
    assert_passes(&app.run_url("pair"), &first_run("th-check-pair", "r", "x")).await;
}
on_both_stores!(an_interrupted_run_passes_the_official_client);
