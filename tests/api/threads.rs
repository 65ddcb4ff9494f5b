//! The other routes: agents, threads, messages, health.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

async fn the_thread_and_its_messages_are_the_gateways_record(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let events = app.run_to_end("demo", &first_run("th-show", "run-1", "what is new?")).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("turn").to_string();

    let thread: Value = app.get_json("/v1/threads/th-show").await;
    assert_eq!(thread["turnCount"], 1);
    assert_eq!(thread["status"], "idle");
    assert_eq!(thread["latestTurn"]["id"], turn.as_str());
    assert_eq!(thread["board"]["notes"][0]["text"], "Asked about: what is new?");

    let body: Value = app.get_json("/v1/threads/th-show/messages").await;
    let messages = body["messages"].as_array().expect("messages").clone();
    // The user message keeps the client's id.
    assert_eq!(messages[0], json!({"role": "user", "id": "run-1-user", "content": "what is new?"}));
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], "Hello! You said: \"what is new?\".");
    assert_eq!(messages[1]["toolCalls"][0]["function"]["name"], "lookup");
    assert_eq!(messages[1]["toolCalls"][0]["function"]["arguments"], "{\"query\":\"what is new?\"}");
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["content"], "3 matching documents");
    assert_eq!(messages[3]["content"], "Done.");

    // A client that loaded the thread continues it with the gateway's ids.
    let mut history = messages.clone();
    history.push(json!({"id": "next", "role": "user", "content": "and then?"}));
    let next = app
        .run_to_end(
            "demo",
            &json!({"threadId": "th-show", "runId": "run-2", "protocolVersion": "1.0", "messages": history}),
        )
        .await;
    assert_eq!(kinds(&next).last(), Some(&"RUN_FINISHED"), "{:?}", next.last());
    assert_eq!(app.counts().await.turns, 2);
}
on_both_stores!(the_thread_and_its_messages_are_the_gateways_record);

// One store: what is checked is the answer's shape for a row that is absent on either store.
#[tokio::test]
async fn a_thread_that_does_not_exist_reveals_nothing() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    for path in ["/v1/threads/nope", "/v1/threads/nope/messages"] {
        let response = app.client.get(app.url(path)).send().await.expect("get");
        assert_eq!(response.status(), 403, "{path}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["error"]["code"], "permission_denied");
    }
    let response = app.client.post(app.url("/v1/threads/nope/cancel")).send().await.expect("post");
    assert_eq!(response.status(), 403);
}

// One store: the agents come from the configuration.
#[tokio::test]
async fn agents_are_listed_with_their_titles() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let body: Value = app.get_json("/v1/agents").await;
    let names: Vec<&str> =
        body["agents"].as_array().expect("agents").iter().filter_map(|a| a["name"].as_str()).collect();
    assert!(names.contains(&"demo") && names.contains(&"slow"), "{names:?}");
    assert_eq!(body["agents"][0]["title"], "Demo");
}

async fn health_routes_answer(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let live = app.client.get(app.url("/livez")).send().await.expect("get");
    assert_eq!(live.status(), 200);
    let ready: Value = app.get_json("/readyz").await;
    assert_eq!(ready["status"], "ready");
}
on_both_stores!(health_routes_answer);

// One store: the routes are the server's.
#[tokio::test]
async fn unknown_routes_and_methods_answer_with_the_json_error_body() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let missing = app.client.get(app.url("/v1/nothing-here")).send().await.expect("get");
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.expect("json");
    assert_eq!(body["error"]["code"], "not_found");
    let wrong = app.client.get(app.run_url("demo")).send().await.expect("get");
    assert_eq!(wrong.status(), 405);
    let body: Value = wrong.json().await.expect("json");
    assert_eq!(body["error"]["code"], "method_not_allowed");
}
