//! Atomic audit: a decision's `interrupt.decide` row commits in the decision's own transaction,
//! and a board read's `board.read` row is in the trail before the notes are sent. Shown by
//! making the database refuse the audit row: the decision (or the read) must then not happen.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

/// Makes the database refuse audit rows of `action` (a trigger, as a failing disk or a full
/// table would refuse them).
async fn refuse_audit_rows(database_url: &str, action: &str) {
    if database_url.starts_with("sqlite:") {
        execute_sql(
            database_url,
            &format!(
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit WHEN NEW.action = '{action}' \
                 BEGIN SELECT RAISE(ABORT, 'audit refused'); END"
            ),
        )
        .await;
    } else {
        execute_sql(
            database_url,
            &format!(
                "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.action = '{action}' THEN RAISE EXCEPTION 'audit refused'; END IF; RETURN NEW; END $$"
            ),
        )
        .await;
        execute_sql(
            database_url,
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION refuse_audit()",
        )
        .await;
    }
}

async fn a_decision_whose_audit_row_cannot_be_written_is_not_recorded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let events = app.run_to_end("approver", &first_run("th-audit-decide", "run-1", "send it")).await;
    let interrupt =
        events.last().expect("end").data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string();
    refuse_audit_rows(&db.url, "interrupt.decide").await;
    let before = app.counts().await;
    let resume = json!({"threadId": "th-audit-decide", "runId": "run-2", "protocolVersion": "1.0", "messages": [],
        "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]});
    let response = app.post_run("approver", &resume).await;
    assert_eq!(response.status(), 500, "the decision fails whole");
    let body: Value = response.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "internal");
    let row = app.store.find_interrupt("default", &interrupt).await.expect("query").expect("row");
    assert_eq!((row.status.as_str(), row.decision.as_deref()), ("open", None), "nothing was decided");
    let after = app.counts().await;
    assert_eq!((after.events, after.runs, after.audit), (before.events, before.runs, before.audit));
}
on_both_stores!(a_decision_whose_audit_row_cannot_be_written_is_not_recorded);

async fn notes_are_not_shown_when_their_read_cannot_be_audited(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    // The demo agent pins a note; reading it later is a board read.
    let first = app.run_to_end("demo", &first_run("th-audit-read", "run-1", "pin something")).await;
    assert_eq!(first.last().expect("end").kind(), "RUN_FINISHED");
    refuse_audit_rows(&db.url, "board.read").await;
    let before = app.counts().await;
    let thread = app.client.get(app.url("/v1/threads/th-audit-read")).send().await.expect("thread route");
    assert_eq!(thread.status(), 500, "no notes without their audit row");
    let text = thread.text().await.expect("body");
    assert!(!text.contains("Asked about"), "the note's text was not sent: {text}");
    // A new run would open with the board: it does not start.
    let mut next = first_run("th-audit-read", "run-2", "again");
    let history = app.client.get(app.url("/v1/threads/th-audit-read/messages")).send().await.expect("messages");
    let mut messages: Vec<Value> =
        history.json::<Value>().await.expect("json")["messages"].as_array().cloned().unwrap_or_default();
    messages.push(json!({"id": "u2", "role": "user", "content": "again"}));
    next["messages"] = Value::Array(messages);
    let response = app.post_run("demo", &next).await;
    assert_eq!(response.status(), 500, "{}", response.text().await.unwrap_or_default());
    let after = app.counts().await;
    assert_eq!(
        (after.turns, after.runs, after.events, after.audit),
        (before.turns, before.runs, before.events, before.audit)
    );
}
on_both_stores!(notes_are_not_shown_when_their_read_cannot_be_audited);
