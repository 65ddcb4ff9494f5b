//! Reconnecting with `Last-Event-ID` (§4.2): the pieces of a dropped stream join into exactly
//! the uninterrupted stream, on one instance and across instances.

use serde_json::json;

use crate::helpers::*;
use crate::on_both_stores;

/// Reads `k` events of a live run, drops the connection, reconnects with the k-th id on
/// `second`, and checks the joined stream equals the uninterrupted stream of the same run.
async fn drop_and_resume(first: &TestApp, second: &TestApp, agent: &str, k: usize) {
    let thread = unique("th-resume");
    let input = first_run(&thread, "run-1", "resume me");
    let head = read_events(first.post_run(agent, &input).await, Some(k)).await;
    assert_eq!(head.len(), k);
    let last_id = head.last().and_then(|e| e.id.clone()).expect("the k-th event has an id");
    let resumed = second.post_run_with(agent, &input, &[("last-event-id", &last_id)]).await;
    assert_eq!(resumed.status(), 200);
    let tail = read_events(resumed, None).await;
    let mut joined = head.clone();
    joined.extend(tail);
    let whole = first.run_to_end(agent, &input).await;
    assert_eq!(kinds(&whole).last(), Some(&"RUN_FINISHED"));
    assert_eq!(joined.len(), whole.len(), "k={k}: no gap and no duplicate");
    assert_eq!(joined, whole, "k={k}: the joined stream is the stream");
}

async fn a_dropped_stream_resumes_after_its_last_event_for_several_k(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    for k in [1, 2, 3, 7, 12, 20, 30] {
        drop_and_resume(&app, &app, "slow", k).await;
    }
}
on_both_stores!(a_dropped_stream_resumes_after_its_last_event_for_several_k);

async fn a_stream_dropped_in_the_middle_of_a_burst_resumes_exactly(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    for k in [5, 150, 390] {
        drop_and_resume(&app, &app, "burst", k).await;
    }
}
on_both_stores!(a_stream_dropped_in_the_middle_of_a_burst_resumes_exactly);

#[tokio::test]
async fn a_stream_dropped_on_one_instance_resumes_on_another() {
    let (a, b, _db) = two_apps().await;
    for k in [1, 4, 9, 16, 25] {
        drop_and_resume(&a, &b, "slow", k).await;
    }
    drop_and_resume(&a, &b, "burst", 200).await;
}

async fn a_last_event_id_from_elsewhere_is_refused_and_changes_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let other = app.run_to_end("demo", &first_run("th-other", "run-1", "x")).await;
    let foreign_id = other[3].id.clone().expect("id");
    let mine = first_run("th-mine", "run-1", "y");
    let own = app.run_to_end("demo", &mine).await;
    let own_turn = own[0].id.as_deref().and_then(|id| id.split('.').next()).expect("turn").to_string();
    let before = app.counts().await;
    for bad in [foreign_id.as_str(), "garbage", "t00.1", &format!("{own_turn}.99999")] {
        let response = app.post_run_with("demo", &mine, &[("last-event-id", bad)]).await;
        assert_eq!(response.status(), 400, "Last-Event-ID {bad}");
        let body: serde_json::Value = response.json().await.expect("error body");
        assert_eq!(body["error"]["code"], "bad_last_event_id", "{bad}");
    }
    // An id on a brand-new run cannot be from it either.
    let fresh = first_run("th-fresh", "run-1", "z");
    let response = app.post_run_with("demo", &fresh, &[("last-event-id", &format!("{own_turn}.2"))]).await;
    assert_eq!(response.status(), 400);
    assert_eq!(app.counts().await, before, "refused requests change nothing");
    let _ = json!({});
}
on_both_stores!(a_last_event_id_from_elsewhere_is_refused_and_changes_nothing);

/// A resume run opens with several SSE events rendered from one logged decision
/// (`RUN_STARTED`, the board's `STATE_SNAPSHOT`, `gateway.resume`), and a pre-1.0 caller's
/// interrupt ending is three events from one wait. A reconnect after any of them continues
/// exactly after it: each gets its own id.
async fn a_reconnect_after_any_event_of_a_resume_run_misses_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let first = app.run_to_end("approver", &first_run("th-parts", "run-1", "mail it")).await;
    let interrupt = first.last().expect("end").data["outcome"]["interrupts"][0]["id"].clone();
    let resume = json!({
        "threadId": "th-parts", "runId": "run-2", "messages": [],
        "resume": [{ "interruptId": interrupt, "status": "resolved", "payload": { "approved": true } }],
    });
    let whole = app.run_to_end("approver", &resume).await;
    assert_eq!(&kinds(&whole)[..3], ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM"], "{whole:?}");
    let ids: Vec<String> = whole.iter().map(|e| e.id.clone().expect("every event has an id")).collect();
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "two events share an id: {ids:?}");
    for k in 1..whole.len() {
        let tail =
            read_events(app.post_run_with("approver", &resume, &[("last-event-id", &ids[k - 1])]).await, None).await;
        assert_eq!(tail, whole[k..], "after event {k} ({})", ids[k - 1]);
    }

    // Pre-1.0 (no protocolVersion): MESSAGES_SNAPSHOT, on_interrupt, RUN_FINISHED from one wait.
    let old = json!({ "threadId": "th-parts-old", "runId": "run-1",
        "messages": [{ "id": "u1", "role": "user", "content": "mail it" }] });
    let whole = app.run_to_end("approver", &old).await;
    let n = whole.len();
    assert_eq!(&kinds(&whole)[n - 3..], ["MESSAGES_SNAPSHOT", "CUSTOM", "RUN_FINISHED"]);
    for k in n - 3..n {
        let last_id = whole[k - 1].id.clone().expect("id");
        let tail = read_events(app.post_run_with("approver", &old, &[("last-event-id", &last_id)]).await, None).await;
        assert_eq!(tail, whole[k..], "pre-1.0, after event {k} ({last_id})");
    }
}
on_both_stores!(a_reconnect_after_any_event_of_a_resume_run_misses_nothing);
