//! Generative UI that survives (SPEC §3): the activity an agent shows (`ACTIVITY_SNAPSHOT`,
//! `ACTIVITY_DELTA`) is kept in the thread as a `role: "activity"` message at its place, its
//! last state with the deltas folded, restored by `GET …/messages`, a run's `MESSAGES_SNAPSHOT`
//! and the connect stream's opening after a restart; for callers with `threads:content` only;
//! a branch shows its own; a client that sends it back is followed, and one it never showed is
//! ignored. Each on SQLite and PostgreSQL, the streams judged by the official client.

use serde_json::{json, Value};

use crate::auth::{auth_config, scoped_token};
use crate::connect::connect;
use crate::helpers::*;
use crate::on_both_stores;

/// What the `painter` agent's plan holds at the end of a turn asked `title`: its snapshot with
/// both deltas applied.
fn folded_plan(title: &str) -> Value {
    json!({ "title": title, "done": 1, "note": "on track" })
}

async fn messages_of(app: &TestApp, thread: &str, turn: Option<&str>) -> Vec<Value> {
    let query = turn.map_or(String::new(), |turn| format!("?turn={turn}"));
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages{query}")).await;
    body["messages"].as_array().cloned().expect("messages")
}

fn roles(messages: &[Value]) -> Vec<&str> {
    messages.iter().map(|m| m["role"].as_str().unwrap_or("")).collect()
}

fn activities(messages: &[Value]) -> Vec<&Value> {
    messages.iter().filter(|m| m["role"] == "activity").collect()
}

/// The id the turn's `ACTIVITY_SNAPSHOT` gave its activity.
fn shown_activity_id(events: &[SseEvent]) -> String {
    let snapshot = events.iter().find(|e| e.kind() == "ACTIVITY_SNAPSHOT").expect("an activity shown");
    snapshot.data["messageId"].as_str().expect("its id").to_string()
}

/// The official client's verdict on a recorded stream.
async fn official_client_accepts(events: &[SseEvent], input: &Value) {
    let (url, server) = serve_recorded_stream(sse_body(events)).await;
    let (passed, report) = agui_check(&url, input).await;
    server.abort();
    assert!(passed, "the official client refused the stream:\n{report}");
}

async fn activity_is_restored_after_a_restart_with_its_deltas_folded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-paint", "run-1", "the launch");
    let first = app.run_to_end("painter", &input).await;
    assert_eq!(first.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&first));
    assert_eq!(kinds(&first).iter().filter(|k| k.starts_with("ACTIVITY_")).count(), 3);
    let id = shown_activity_id(&first);
    let (passed, report) = agui_check(&app.run_url("painter"), &input).await;
    assert!(passed, "{report}");
    app.shut_down().await;

    // A page loaded after a restart: the activity is in the conversation at its place, between
    // the two answers, with its last state.
    let app = TestApp::start(&db.url).await;
    let messages = messages_of(&app, "th-paint", None).await;
    assert_eq!(roles(&messages), ["user", "assistant", "activity", "assistant"], "{messages:?}");
    assert_eq!(
        messages[2],
        json!({ "id": id, "role": "activity", "activityType": "plan", "content": folded_plan("the launch") })
    );

    // The next run restates it in its MESSAGES_SNAPSHOT, the client's copy held it (sent back
    // whole, as a client that keeps activity messages sends them) and was followed.
    let mut history = messages.clone();
    history.push(json!({ "id": "run-2-user", "role": "user", "content": "the party" }));
    let next = json!({ "threadId": "th-paint", "runId": "run-2", "protocolVersion": "1.0", "messages": history });
    let second = app.run_to_end("painter", &next).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&second));
    let snapshot = second.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    let restated = snapshot.data["messages"].as_array().expect("messages");
    assert_eq!(restated[..4], messages[..], "the snapshot restates the activity where it stood");
    let (passed, report) = agui_check(&app.run_url("painter"), &next).await;
    assert!(passed, "{report}");

    // The connect stream opens with both turns' activity, each at its place.
    let opening = read_events(connect(&app, "th-paint", "watch", &[]).await, Some(4)).await;
    assert_eq!(kinds(&opening), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    let watched = opening[1].data["messages"].as_array().expect("messages").clone();
    assert_eq!(
        roles(&watched),
        ["user", "assistant", "activity", "assistant", "user", "assistant", "activity", "assistant"]
    );
    let plans: Vec<&Value> = activities(&watched).into_iter().map(|m| &m["content"]).collect();
    assert_eq!(plans, [&folded_plan("the launch"), &folded_plan("the party")]);
    assert_eq!(watched, messages_of(&app, "th-paint", None).await, "the same conversation as GET …/messages");
    let watch_input = json!({ "threadId": "th-paint", "runId": "watch", "protocolVersion": "1.0", "messages": [] });
    official_client_accepts(&opening, &watch_input).await;
}
on_both_stores!(activity_is_restored_after_a_restart_with_its_deltas_folded);

async fn activity_a_client_sends_back_is_never_taken_as_recorded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    app.run_to_end("painter", &first_run("th-forge", "run-1", "the launch")).await;
    let mut history = messages_of(&app, "th-forge", None).await;
    // The client's copy: the recorded activity with content it changed, and one never shown.
    history[2]["content"] = json!({ "title": "changed by the page" });
    history.insert(
        3,
        json!({ "id": "forged", "role": "activity", "activityType": "plan", "content": { "title": "forged" } }),
    );
    history.push(json!({ "id": "run-2-user", "role": "user", "content": "the party" }));
    let next = json!({ "threadId": "th-forge", "runId": "run-2", "protocolVersion": "1.0", "messages": history });
    let response = app.post_run("painter", &next).await;
    assert_eq!(response.status(), 200, "a copy with activity in it is not a history mismatch");
    let events = read_events(response, None).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));

    // The gateway's record is the conversation: the forged message and the page's change are
    // not in it, the recorded activity is, as the agent left it.
    let messages = messages_of(&app, "th-forge", None).await;
    assert!(!serde_json::to_string(&messages).expect("json").contains("forged"), "{messages:?}");
    assert!(!serde_json::to_string(&messages).expect("json").contains("changed by the page"));
    assert_eq!(activities(&messages)[0]["content"], folded_plan("the launch"));
    let snapshot = events.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    assert!(!snapshot.data.to_string().contains("forged"), "{}", snapshot.data);
    assert_eq!(snapshot.data["messages"][2]["content"], folded_plan("the launch"));
}
on_both_stores!(activity_a_client_sends_back_is_never_taken_as_recorded);

async fn a_branch_shows_only_its_own_activity(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let first = app.run_to_end("painter", &first_run("th-paint-branch", "run-1", "alpha")).await;
    let alpha_turn = shown_activity_id(&first).split(':').next().expect("turn").to_string();
    // An edit of the first message: a branch beside it, with its own plan.
    let edit = json!({
        "threadId": "th-paint-branch", "runId": "run-2", "protocolVersion": "1.0",
        "messages": [{ "id": "run-1-user", "role": "user", "content": "beta" }],
    });
    let second = app.run_to_end("painter", &edit).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&second));
    let (passed, report) = agui_check(&app.run_url("painter"), &edit).await;
    assert!(passed, "{report}");

    let current = messages_of(&app, "th-paint-branch", None).await;
    let shown: Vec<&Value> = activities(&current).into_iter().map(|m| &m["content"]).collect();
    assert_eq!(shown, [&folded_plan("beta")], "the current branch: the edit's plan only");
    let other = messages_of(&app, "th-paint-branch", Some(&alpha_turn)).await;
    let shown: Vec<&Value> = activities(&other).into_iter().map(|m| &m["content"]).collect();
    assert_eq!(shown, [&folded_plan("alpha")], "the first branch: its own plan only");
}
on_both_stores!(a_branch_shows_only_its_own_activity);

async fn only_a_caller_with_content_permission_sees_activity(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, "")).await;
    let token = |scope: &str| format!("Bearer {}", scoped_token("default", "nina", scope));
    let full = token("threads:read threads:content agent:painter");
    let response = app
        .post_run_with("painter", &first_run("th-paint-thin", "run-1", "secret plan"), &[("authorization", &full)])
        .await;
    assert_eq!(kinds(&read_events(response, None).await).last(), Some(&"RUN_FINISHED"));
    let get = |path: &str, auth: &str| app.client.get(app.url(path)).header("authorization", auth.to_string()).send();
    let body: Value = get("/v1/threads/th-paint-thin/messages", &full).await.expect("sent").json().await.expect("json");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(activities(messages).len(), 1, "with threads:content: {messages:?}");

    // Without it: no conversation, no connect stream, and the thread's summary holds none of it.
    let thin = token("threads:read agent:*");
    let refused = get("/v1/threads/th-paint-thin/messages", &thin).await.expect("sent");
    assert_eq!(refused.status(), 403);
    let refused = connect(&app, "th-paint-thin", "w", &[("authorization", &thin)]).await;
    assert_eq!(refused.status(), 403);
    let summary = get("/v1/threads/th-paint-thin", &thin).await.expect("sent");
    assert_eq!(summary.status(), 200);
    let summary = summary.text().await.expect("body");
    assert!(!summary.contains("on track"), "{summary}");
}
on_both_stores!(only_a_caller_with_content_permission_sees_activity);
