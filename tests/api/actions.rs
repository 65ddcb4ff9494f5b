//! A person's action on generative UI is a turn's input (SPEC §3, §6): an A2UI click, sent as
//! `@copilotkit/a2ui-renderer` sends it (`forwardedProps.a2uiAction`) or as the A2UI middleware
//! of a CopilotKit runtime in front gives it (a `log_a2ui_event` call and its result, no new
//! user message), starts the next turn with the action as its recorded input; the agent reads
//! it in the middleware's form (the script agent its words, an `agui` upstream and an `openai`
//! model the call and its result); an action on a surface the conversation never showed is `unknown_surface`, and one
//! by a caller who may not start the agent is refused, the stored state untouched either way.
//! Each on SQLite and PostgreSQL, the streams judged by the official client.

use serde_json::{json, Value};

use crate::auth::{auth_config, scoped_token};
use crate::helpers::*;
use crate::on_both_stores;
use crate::upstream::{gateway_in_front_of, upstream_of, Upstream};

/// The click the tests send: the `order` button of surface `order-form`.
fn click(surface: &str) -> Value {
    json!({
        "name": "order", "surfaceId": surface, "sourceComponentId": "root",
        "context": { "size": "large" }, "timestamp": "2026-12-04T12:00:00.000Z"
    })
}

/// What the A2UI middleware says of [`click`] in words.
fn click_words(surface: &str) -> String {
    format!(
        "User performed action \"order\" on surface \"{surface}\" (component: root). Context: {{\"size\":\"large\"}}"
    )
}

async fn messages_of(app: &TestApp, thread: &str) -> Vec<Value> {
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    body["messages"].as_array().cloned().expect("messages")
}

fn answer_text(events: &[SseEvent]) -> String {
    events
        .iter()
        .filter(|e| e.kind() == "TEXT_MESSAGE_CONTENT")
        .map(|e| e.data["delta"].as_str().unwrap_or(""))
        .collect()
}

fn run(thread: &str, run: &str, messages: Vec<Value>, forwarded: Value) -> Value {
    json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0", "state": {},
        "messages": messages, "tools": [], "context": [], "forwardedProps": forwarded,
    })
}

/// The renderer's form: the conversation as the page holds it, the click beside it.
fn renderer_form(thread: &str, run_id: &str, history: Vec<Value>, surface: &str) -> Value {
    run(thread, run_id, history, json!({ "a2uiAction": { "userAction": click(surface) } }))
}

/// The form a CopilotKit runtime in front gives it: the middleware's call and result appended
/// under its own new ids, and `forwardedProps` left as the page sent them.
fn runtime_form(thread: &str, run_id: &str, mut history: Vec<Value>, surface: &str) -> Value {
    history.push(json!({
        "id": "3f1c-assistant", "role": "assistant", "content": "",
        "toolCalls": [{ "id": "3f1c-call", "type": "function",
            "function": { "name": "log_a2ui_event", "arguments": click(surface).to_string() } }],
    }));
    history.push(
        json!({ "id": "3f1c-result", "role": "tool", "toolCallId": "3f1c-call", "content": click_words(surface) }),
    );
    renderer_form(thread, run_id, history, surface)
}

async fn official_client_accepts(events: &[SseEvent], input: &Value) {
    let (url, server) = serve_recorded_stream(sse_body(events)).await;
    let (passed, report) = agui_check(&url, input).await;
    server.abort();
    assert!(passed, "the official client refused the stream:\n{report}");
}

/// A thread whose first turn showed surface `order-form`; the conversation as a page holds it.
async fn thread_with_a_surface(app: &TestApp, agent: &str, thread: &str) -> Vec<Value> {
    let first = app.run_to_end(agent, &first_run(thread, "run-1", "what can I order?")).await;
    assert_eq!(first.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&first));
    assert!(first.iter().any(|e| e.kind() == "ACTIVITY_SNAPSHOT"), "a surface shown");
    messages_of(app, thread).await
}

async fn a_click_on_a_shown_surface_is_the_next_turns_input(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let history = thread_with_a_surface(&app, "surveyor", "th-click").await;
    let input = renderer_form("th-click", "run-2", history.clone(), "order-form");
    let events = app.run_to_end("surveyor", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert!(
        answer_text(&events).starts_with(&format!("You said: {}", click_words("order-form"))),
        "the agent reads the click in the middleware's words: {}",
        answer_text(&events)
    );
    official_client_accepts(&events, &input).await;

    // The record: the click stands in the conversation as the middleware puts it, its call's
    // arguments the action itself, then the answer.
    let messages = messages_of(&app, "th-click").await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let at = history.len();
    assert_eq!(messages[at]["role"], "assistant", "{messages:?}");
    assert_eq!(messages[at]["id"], format!("{turn}:in"), "the gateway's id for a click sent beside the messages");
    let call = &messages[at]["toolCalls"][0];
    assert_eq!(call["function"]["name"], "log_a2ui_event");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("text")).expect("json");
    assert_eq!(arguments, click("order-form"));
    assert_eq!(
        messages[at + 1],
        json!({ "id": messages[at + 1]["id"], "role": "tool",
        "toolCallId": call["id"], "content": click_words("order-form") })
    );
    assert!(messages[at + 2]["id"].as_str().expect("id").starts_with(&turn), "the click's answer follows it");

    // The next message goes on after the click's turn, from either copy a page may hold: the
    // record as loaded (the click in it), or only the answers it was streamed.
    let mut loaded = messages.clone();
    loaded.push(json!({ "id": "run-3-user", "role": "user", "content": "thanks" }));
    let third = app.run_to_end("surveyor", &run("th-click", "run-3", loaded, json!({}))).await;
    assert_eq!(third.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&third));
    assert_eq!(answer_text(&third), "You said: thanks");
    let mut streamed: Vec<Value> = messages_of(&app, "th-click").await;
    streamed.retain(|m| !(m["role"] == "tool" || m["toolCalls"].is_array()));
    streamed.push(json!({ "id": "run-4-user", "role": "user", "content": "and now?" }));
    let fourth = app.run_to_end("surveyor", &run("th-click", "run-4", streamed, json!({}))).await;
    assert_eq!(fourth.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&fourth));
    assert_eq!(answer_text(&fourth), "You said: and now?");
}
on_both_stores!(a_click_on_a_shown_surface_is_the_next_turns_input);

async fn a_click_in_the_runtimes_form_is_taken_once(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let history = thread_with_a_surface(&app, "surveyor", "th-runtime-click").await;
    let input = runtime_form("th-runtime-click", "run-2", history.clone(), "order-form");
    let events = app.run_to_end("surveyor", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert!(answer_text(&events).starts_with(&format!("You said: {}", click_words("order-form"))));
    official_client_accepts(&events, &input).await;
    let messages = messages_of(&app, "th-runtime-click").await;
    let calls = messages.iter().filter(|m| m["toolCalls"][0]["function"]["name"] == "log_a2ui_event").count();
    assert_eq!(calls, 1, "one turn for the click, not one per form: {messages:?}");
    assert_eq!(messages[history.len()]["id"], "3f1c-assistant", "under the id the runtime gave it");
}
on_both_stores!(a_click_in_the_runtimes_form_is_taken_once);

async fn a_click_on_a_surface_never_shown_is_refused(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let history = thread_with_a_surface(&app, "surveyor", "th-forged-click").await;
    let before = every_table_as_text(&db.url).await;
    let attempts = [
        renderer_form("th-forged-click", "run-2", history.clone(), "admin-panel"),
        runtime_form("th-forged-click", "run-3", history.clone(), "admin-panel"),
        // A thread that showed nothing yet.
        renderer_form("th-no-surface", "run-1", Vec::new(), "order-form"),
    ];
    for input in attempts {
        let events = read_events(app.post_run("surveyor", &input).await, None).await;
        assert_eq!(kinds(&events), ["RUN_ERROR"], "{input}");
        assert_eq!(events[0].data["code"], "unknown_surface", "{}", events[0].data);
        official_client_accepts(&events, &input).await;
    }
    assert_eq!(every_table_as_text(&db.url).await, before, "the stored state is untouched");
    assert_eq!(messages_of(&app, "th-forged-click").await, history);
}
on_both_stores!(a_click_on_a_surface_never_shown_is_refused);

async fn a_click_by_a_caller_who_may_not_start_the_agent_is_refused(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, "")).await;
    let token = |scope: &str| format!("Bearer {}", scoped_token("default", "nina", scope));
    let full = token("threads:read threads:content agent:surveyor");
    let response = app
        .post_run_with("surveyor", &first_run("th-scoped-click", "run-1", "menu?"), &[("authorization", &full)])
        .await;
    assert_eq!(kinds(&read_events(response, None).await).last(), Some(&"RUN_FINISHED"));
    let history: Value = app
        .client
        .get(app.url("/v1/threads/th-scoped-click/messages"))
        .header("authorization", full.clone())
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    let history = history["messages"].as_array().cloned().expect("messages");
    let before = every_table_as_text(&db.url).await;
    let other_agent = token("threads:read threads:content agent:painter");
    for input in [
        renderer_form("th-scoped-click", "run-2", history.clone(), "order-form"),
        runtime_form("th-scoped-click", "run-3", history.clone(), "order-form"),
    ] {
        let refused = app.post_run_with("surveyor", &input, &[("authorization", &other_agent)]).await;
        assert_eq!(refused.status(), 403);
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    }
    assert_eq!(every_table_as_text(&db.url).await, before, "the stored state is untouched");
}
on_both_stores!(a_click_by_a_caller_who_may_not_start_the_agent_is_refused);

async fn an_upstream_gets_the_click_as_the_middleware_gives_it(backend: Backend) {
    // Both upstreams draw the surface; the Python one with ag-ui-a2ui-toolkit.
    for upstream in [Upstream::Node, Upstream::Python] {
        an_upstream_answers_the_click(backend, upstream).await;
    }
}
on_both_stores!(an_upstream_gets_the_click_as_the_middleware_gives_it);

async fn an_upstream_answers_the_click(backend: Backend, upstream: Upstream) {
    let server = upstream_of(upstream);
    let db = TestDatabase::new(backend).await;
    let app = gateway_in_front_of(&server, "surface", &db).await;
    let history = thread_with_a_surface(&app, "upstream", "th-up-click").await;
    assert!(history.iter().any(|m| m["activityType"] == "a2ui-surface"), "{history:?}");
    for (run_id, input) in [
        ("run-2", renderer_form("th-up-click", "run-2", history.clone(), "order-form")),
        ("run-3", {
            let mut after = messages_of(&app, "th-up-click").await;
            after.retain(|m| m["role"] != "activity");
            runtime_form("th-up-click", "run-3", after, "order-form")
        }),
    ] {
        let events = app.run_to_end("upstream", &input).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{run_id}: {:?}", kinds(&events));
        assert_eq!(answer_text(&events), format!("You pressed order on order-form. {}", click_words("order-form")));
        official_client_accepts(&events, &input).await;

        // What the upstream got: the click as the middleware's call and result, last, and not a
        // second time in its forwarded props.
        let requests = server.requests().await;
        let body = &requests.last().expect("a request")["body"];
        let messages = body["messages"].as_array().expect("messages");
        let [call, result] = &messages[messages.len() - 2..] else { panic!("two messages") };
        assert_eq!(call["toolCalls"][0]["function"]["name"], "log_a2ui_event", "{run_id}: {messages:?}");
        let arguments: Value =
            serde_json::from_str(call["toolCalls"][0]["function"]["arguments"].as_str().expect("text")).expect("json");
        assert_eq!(arguments, click("order-form"));
        assert_eq!((&result["role"], &result["toolCallId"]), (&json!("tool"), &call["toolCalls"][0]["id"]));
        assert_eq!(result["content"], click_words("order-form"));
        assert!(body["forwardedProps"].get("a2uiAction").is_none(), "{}", body["forwardedProps"]);
        assert!(!messages.iter().any(|m| m["role"] == "user" && m["content"] == click_words("order-form")));
    }
}

async fn an_openai_model_gets_the_click_as_a_tool_call_and_its_result(backend: Backend) {
    let model = crate::fakes::model::ScriptedModel::planned(vec![], "Your large pizza is ordered.").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(model.agent("assistant", ""));
    let app = TestApp::start_with(config).await;
    // The surface comes from the thread's first turn (the script agent's); the click is sent to
    // the model's agent.
    let history = thread_with_a_surface(&app, "surveyor", "th-llm-click").await;
    let input = renderer_form("th-llm-click", "run-2", history, "order-form");
    let events = app.run_to_end("assistant", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert_eq!(answer_text(&events), "Your large pizza is ordered.");
    official_client_accepts(&events, &input).await;
    let requests = model.requests();
    let messages = requests[0]["messages"].as_array().expect("messages");
    let [call, result] = &messages[messages.len() - 2..] else { panic!("two messages") };
    assert_eq!(call["role"], "assistant", "{messages:?}");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "log_a2ui_event");
    let arguments: Value =
        serde_json::from_str(call["tool_calls"][0]["function"]["arguments"].as_str().expect("text")).expect("json");
    assert_eq!(arguments, click("order-form"));
    assert_eq!(
        (&result["role"], &result["tool_call_id"], &result["content"]),
        (&json!("tool"), &call["tool_calls"][0]["id"], &json!(click_words("order-form")))
    );
    assert!(!messages.iter().any(|m| m["role"] == "user" && m["content"] == click_words("order-form")));
}
on_both_stores!(an_openai_model_gets_the_click_as_a_tool_call_and_its_result);
