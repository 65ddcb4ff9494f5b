//! Corrupt state is an error, not a default: what the gateway stored itself and cannot read
//! back fails the turn (or the decision) with an `internal` error. It never restarts an agent
//! at its first step, and never lets an unreadable list of deciders mean "anyone".

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

async fn wait_for_approval(app: &TestApp, thread: &str) -> String {
    let events = app.run_to_end("approver", &first_run(thread, "run-1", "send it")).await;
    let last = events.last().expect("events");
    assert_eq!(last.data["outcome"]["type"], "interrupt", "{:?}", kinds(&events));
    last.data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string()
}

fn approve(thread: &str, run: &str, interrupt: &str) -> Value {
    json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": [],
           "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]})
}

async fn an_unreadable_checkpoint_fails_the_turn_instead_of_starting_it_over(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let interrupt = wait_for_approval(&app, "th-bad-checkpoint").await;
    execute_sql(&db.url, "UPDATE turns SET checkpoint = '{\"step\": \"not a number\"'").await;
    let resumed = app.run_to_end("approver", &approve("th-bad-checkpoint", "run-2", &interrupt)).await;
    let last = resumed.last().expect("events");
    assert_eq!(last.kind(), "RUN_ERROR", "{:?}", kinds(&resumed));
    assert_eq!(last.data["code"], "internal");
    assert!(!last.data["message"].as_str().unwrap_or("").contains("not a number"), "the cause stays in the log");
    // Starting over would have said the first step's words again and run the call.
    assert!(!kinds(&resumed).contains(&"TOOL_CALL_RESULT"), "nothing ran");
    assert!(!kinds(&resumed).contains(&"TEXT_MESSAGE_START"), "the agent did not start again: {:?}", kinds(&resumed));
    let thread = app.store.find_thread("default", "th-bad-checkpoint").await.expect("query").expect("thread");
    let turn = app.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    assert_eq!(turn.status.as_str(), "failed");
}
on_both_stores!(an_unreadable_checkpoint_fails_the_turn_instead_of_starting_it_over);

async fn unreadable_deciders_refuse_the_decision_and_change_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let interrupt = wait_for_approval(&app, "th-bad-deciders").await;
    execute_sql(&db.url, "UPDATE interrupts SET deciders = '{\"persons\": ['").await;
    let before = app.counts().await;
    let refused = app.run_to_end("approver", &approve("th-bad-deciders", "run-2", &interrupt)).await;
    assert_eq!(kinds(&refused), vec!["RUN_ERROR"]);
    assert_eq!(refused[0].data["code"], "invalid_resume");
    // Out of band too: an internal error, never a decision by someone the record does not name.
    let route = app
        .client
        .post(app.url(&format!("/v1/interrupts/{interrupt}/decision")))
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("decision route");
    assert_eq!(route.status(), 500);
    let body: Value = route.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "internal", "{body}");
    let after = app.counts().await;
    assert_eq!((after.events, after.audit), (before.events, before.audit), "nothing was recorded");
    let interrupts = app.store.find_interrupt("default", &interrupt).await.expect("query").expect("row");
    assert_eq!(interrupts.status.as_str(), "open");
}
on_both_stores!(unreadable_deciders_refuse_the_decision_and_change_nothing);
