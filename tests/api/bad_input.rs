//! Every bad input of §2 gets its documented status and code, and leaves the store untouched.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

struct Case {
    name: &'static str,
    agent: &'static str,
    body: String,
    headers: Vec<(&'static str, String)>,
    status: u16,
    code: &'static str,
    /// A word the error message must contain (the field it names).
    names: &'static str,
}

fn case(name: &'static str, body: Value, status: u16, code: &'static str, names: &'static str) -> Case {
    Case { name, agent: "demo", body: body.to_string(), headers: vec![], status, code, names }
}

fn cases() -> Vec<Case> {
    let valid = first_run("th-bad", "run-bad", "hello");
    let mut cases = vec![
        Case { body: "{not json".into(), ..case("non-JSON body", json!(null), 400, "bad_request", "JSON") },
        case("threadId of the wrong type", json!({"threadId": 5, "runId": "r", "messages": []}), 400, "bad_request", "threadId"),
        case("messages of the wrong type", json!({"threadId": "t", "runId": "r", "messages": "hi"}), 400, "bad_request", "messages"),
        case("a message with an unknown role", json!({"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "robot", "content": "x"}]}), 400, "bad_request", "messages[0]"),
        case("user content of the wrong type", json!({"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": 7}]}), 400, "bad_request", "messages[0]"),
        case("a missing runId", json!({"threadId": "t", "messages": []}), 400, "bad_request", "runId"),
        case("a bad threadId", first_run("has spaces!", "r", "x"), 400, "bad_request", "threadId"),
        case("an over-long threadId", first_run(&"t".repeat(201), "r", "x"), 400, "bad_request", "threadId"),
        case("a bad runId", first_run("t-ok", "r/1", "x"), 400, "bad_request", "runId"),
        case("no user message", json!({"threadId": "t-empty", "runId": "r", "messages": []}), 400, "bad_request", "messages"),
        case(
            "an image part",
            json!({"threadId": "t-img", "runId": "r", "messages": [{"id": "u", "role": "user", "content": [
                {"type": "text", "text": "look"}, {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}}]}]}),
            400, "unsupported_content", "image",
        ),
        case(
            "an undeclared frontend tool",
            {
                let mut body = first_run("t-tool", "r", "x");
                body["tools"] = json!([{"name": "delete_everything", "description": "", "parameters": {}}]);
                body
            },
            400, "tool_not_admitted", "delete_everything",
        ),
        Case {
            body: json!({"threadId": "t-big", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "x".repeat(70_000)}]}).to_string(),
            ..case("an over-limit body", json!(null), 413, "payload_too_large", "65536")
        },
        Case { headers: vec![("content-type", "text/plain".into())], ..case("a wrong Content-Type", valid.clone(), 415, "unsupported_media_type", "application/json") },
        Case { headers: vec![("accept", "application/json".into())], ..case("an Accept naming neither SSE nor the binary transport", valid.clone(), 406, "not_acceptable", "application/vnd.ag-ui.event+proto") },
        Case { headers: vec![("last-event-id", "not-an-id".into())], ..case("a malformed Last-Event-ID", valid.clone(), 400, "bad_last_event_id", "Last-Event-ID") },
        Case { agent: "nobody", ..case("an unknown agent", valid.clone(), 404, "not_found", "nobody") },
    ];
    cases.push(Case { agent: "demo?tenant=initech", ..case("an unknown tenant", valid, 404, "not_found", "initech") });
    cases
}

async fn each_bad_input_gets_its_status_and_code_and_changes_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    // A thread with history, so "unchanged" is checked against a store that holds something.
    app.run_to_end("demo", &first_run("th-bad", "run-good", "hello")).await;
    let before = app.counts().await;
    for case in cases() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().expect("header"));
        headers.insert("accept", "text/event-stream".parse().expect("header"));
        for (name, value) in &case.headers {
            headers.insert(*name, value.parse().expect("header"));
        }
        let request = app.client.post(app.run_url(case.agent)).headers(headers).body(case.body.clone());
        let response = request.send().await.expect("sent");
        assert_eq!(response.status().as_u16(), case.status, "{}", case.name);
        let body: Value = response.json().await.unwrap_or_else(|e| panic!("{}: JSON error body: {e}", case.name));
        assert_eq!(body["error"]["code"], case.code, "{}: {body}", case.name);
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(case.names), "{}: message '{message}' names '{}'", case.name, case.names);
        assert_eq!(app.counts().await, before, "{} changed the store", case.name);
    }
}
on_both_stores!(each_bad_input_gets_its_status_and_code_and_changes_nothing);

// One store: the Accept header is answered before any store is read.
#[tokio::test]
async fn accept_headers_that_admit_sse_are_served() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let accepts = [
        "*/*",
        "text/event-stream",
        "application/json, text/event-stream;q=0.5",
        // Parameter names are case-insensitive: `Q=0` refuses the binary transport too.
        "application/vnd.ag-ui.event+proto;Q=0, text/event-stream",
    ];
    for (n, accept) in accepts.iter().enumerate() {
        // The one Accept header sent is this one (post_run_with would add its own first).
        let response = app
            .client
            .post(app.run_url("demo"))
            .header("content-type", "application/json")
            .header("accept", *accept)
            .body(first_run(&format!("th-acc-{n}"), "r", "x").to_string())
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200, "{accept}");
        assert_eq!(response.headers()["content-type"], "text/event-stream", "{accept}");
    }
}

// One store: the body is parsed before any store is read.
#[tokio::test]
async fn unknown_members_of_the_input_are_ignored() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let mut input = first_run("th-extra", "r", "x");
    input["futureField"] = json!({"a": 1});
    input["messages"][0]["surprise"] = json!(true);
    let events = app.run_to_end("demo", &input).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
}
