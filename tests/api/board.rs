//! The board (§7) as each caller sees it: a note whose label the caller lacks is redacted in
//! snapshots, deltas and the thread route (its text and tags appear nowhere in the bytes); a
//! superseding note is a `replace`; reading notes' text is a `board.read` audit row. (A caller
//! without `threads:content` may not start a run at all, §2.2; that it would get no state event
//! is a unit test of `engine::board`.)

use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, rsa_provider};
use crate::helpers::*;
use crate::on_both_stores;

fn person(sub: &str, clearance: &[&str]) -> String {
    let mut claims = claims("default", sub);
    claims["clearance"] = json!(clearance);
    app_token(&claims)
}

/// The run's raw SSE body and the thread route's raw body, as `token` gets them.
async fn raw_run_and_thread(app: &TestApp, token: &str, thread: &str) -> (String, String) {
    let response = app
        .client
        .post(app.run_url("secretary"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(first_run(thread, "run-1", "Dana").to_string())
        .send()
        .await
        .expect("run");
    if response.status() != 200 {
        panic!("{thread}: {}: {}", response.status(), response.text().await.unwrap_or_default());
    }
    let stream = response.text().await.expect("stream");
    let shown = app.client.get(app.url(&format!("/v1/threads/{thread}"))).bearer_auth(token).send().await.expect("get");
    (stream, shown.text().await.expect("body"))
}

async fn a_label_the_caller_lacks_hides_the_note_everywhere(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;

    // Alice lacks `hr`: the note is there, redacted, and its words are nowhere.
    let (stream, thread) = raw_run_and_thread(&app, &person("alice", &["sales"]), "th-board-alice").await;
    for bytes in [&stream, &thread] {
        assert!(!bytes.contains("Salary band") && !bytes.contains("salary-secret-tag"), "{bytes}");
        assert!(bytes.contains(r#""redacted":true"#) && bytes.contains(r#""label":"hr""#), "{bytes}");
        assert!(bytes.contains("Status: filed"), "unlabelled notes are shown: {bytes}");
    }
    let board: Value = serde_json::from_str::<Value>(&thread).expect("json")["board"]["notes"].clone();
    assert_eq!(
        board[0],
        json!({ "id": "1", "kind": "hr", "agent": "secretary", "createdAt": board[0]["createdAt"],
                                 "redacted": true, "label": "hr" })
    );
    // The superseding status note took the old one's place: a `replace` at its index.
    assert!(stream.contains(r#""op":"replace","path":"/board/notes/1""#), "{stream}");
    assert_eq!(board.as_array().expect("notes").len(), 2);
    assert_eq!(board[1]["supersedes"], "2");

    // Hana holds `hr`: she reads it, and her reading is audited.
    let (stream, thread) = raw_run_and_thread(&app, &person("hana", &["hr"]), "th-board-hana").await;
    assert!(stream.contains("Salary band for Dana: E5") && thread.contains("salary-secret-tag"));
    assert!(!stream.contains(r#""redacted":true"#));
    let audit = app.store.audit_rows(Some("default"), 0, 1000).await.expect("audit");
    let reads: Vec<Value> = audit
        .iter()
        .filter(|row| row.entry.action == "board.read" && row.entry.actor == "person:hana")
        .map(|row| serde_json::from_str(&row.entry.detail).expect("detail"))
        .collect();
    assert!(reads.iter().any(|d| d["thread"] == "th-board-hana" && d["notes"] == json!(["1", "3"])), "{reads:?}");
}
on_both_stores!(a_label_the_caller_lacks_hides_the_note_everywhere);

/// Editable state (§7): a run's `state` writes the keys the agent lists (checked against their
/// schemas; a bad value is 400 naming the key and changes nothing), everything else in it is
/// ignored; the next snapshot and the thread route carry what was written.
async fn a_runs_state_writes_only_the_agents_editable_keys(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let mut input = first_run("th-edit", "run-1", "a letter");
    input["state"] = json!({ "tone": "casual", "other": 1, "board": { "notes": [{ "text": "forged" }] } });
    let events = app.run_to_end("editor", &input).await;
    let snapshot = &events.iter().find(|e| e.kind() == "STATE_SNAPSHOT").expect("snapshot").data["snapshot"];
    assert_eq!(snapshot, &json!({ "tone": "casual", "board": { "notes": [] } }), "only the editable key is taken");
    let thread: Value = app.get_json("/v1/threads/th-edit").await;
    assert_eq!(thread["state"], json!({ "tone": "casual" }));

    let before = app.counts().await;
    let mut bad = first_run("th-edit-2", "run-1", "x");
    bad["state"] = json!({ "tone": "shouting" });
    let response = app.post_run("editor", &bad).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.starts_with("state.tone")), "{body}");
    assert_eq!(app.counts().await, before, "nothing stored");
}
on_both_stores!(a_runs_state_writes_only_the_agents_editable_keys);

/// §8: every stream that opens on notes' text is audited — one `board.read` row per opening (a
/// follow of the same run, a reconnect, a connect stream) and per `GET`, never one per event.
async fn every_stream_opening_on_the_board_is_one_board_read(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let reads = || async {
        let rows = app.store.audit_rows(Some("default"), 0, 1000).await.expect("audit");
        rows.iter().filter(|row| row.entry.action == "board.read").count()
    };
    let input = first_run("th-reads", "run-1", "pin it");
    let events = app.run_to_end("demo", &input).await;
    assert!(events.iter().any(|e| e.kind() == "STATE_DELTA"), "the demo pins a note");
    assert_eq!(reads().await, 0, "the run opened on an empty board");
    // The same run again (a reload): it replays the note's text.
    app.run_to_end("demo", &input).await;
    assert_eq!(reads().await, 1, "a replay is a reading");
    // A reconnect from the middle.
    let middle = events[events.len() / 2].id.clone().expect("id");
    let response = app.post_run_with("demo", &input, &[("last-event-id", &middle)]).await;
    read_events(response, None).await;
    assert_eq!(reads().await, 2, "a reconnect is one reading, whatever it shows");
    // A connect stream on the thread.
    let connect = app
        .client
        .post(app.url("/v1/agui/agents/demo/connect"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(json!({ "threadId": "th-reads", "runId": "watch-1" }).to_string())
        .send()
        .await
        .expect("connect");
    assert_eq!(connect.status(), 200);
    let mut stream = EventStream::new(connect);
    stream.until_kind("STATE_SNAPSHOT").await;
    assert_eq!(reads().await, 3, "a connect stream is one reading");
    drop(stream);
    app.client.get(app.url("/v1/threads/th-reads")).send().await.expect("get");
    assert_eq!(reads().await, 4, "and a GET of the thread");
}
on_both_stores!(every_stream_opening_on_the_board_is_one_board_read);
