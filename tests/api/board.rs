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
