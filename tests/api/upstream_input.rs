//! What the `agui` agent (§9.3) sends its upstream besides the conversation — the client's
//! admitted tools, its context, forwarded props and state — and what it makes of what comes
//! back: a client tool call that ends the run pending and continues the same turn on the
//! client's result, chunk events, and more steps than may be shown open. Against the real
//! `@ag-ui/encoder` server of `tests/upstream/node`; every stream judged by the official client.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;
use crate::upstream::{upstream_of, Upstream, UpstreamServer};

/// A gateway whose agent `upstream` fronts `route`, with more agent settings in `extra` (TOML).
pub(crate) async fn gateway(server: &UpstreamServer, route: &str, db: &TestDatabase, extra: &str) -> TestApp {
    let mut config = test_config(&db.url);
    let toml = format!(
        "name = \"upstream\"\nkind = \"agui\"\nurl = \"{}/agents/{route}\"\ntimeout_secs = 20\n{extra}",
        server.url
    );
    config.agents.push(toml::from_str(&toml).expect("agent config"));
    TestApp::start_with(config).await
}

/// The body of the upstream's last request.
async fn last_body(server: &UpstreamServer) -> Value {
    server.requests().await.last().expect("the upstream was asked")["body"].clone()
}

/// Frontend tools through the upstream: the admitted tool goes upstream as `tools`; the
/// upstream's call of it ends the run with `pendingToolCallIds`; the client's `role: "tool"`
/// answer goes upstream in the next run's conversation, and the same turn goes on.
async fn a_client_tool_goes_upstream_and_its_result_comes_back(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "frontend-tool", &db, "frontend_tools = [\"change_color\"]").await;
    let thread = unique("th-front");
    let tools = json!([{ "name": "change_color", "description": "Paint the page",
        "parameters": { "type": "object", "properties": { "color": { "type": "string" } } } }]);
    let mut input = first_run(&thread, "run-1", "make it blue");
    input["tools"] = tools.clone();
    let first = app.run_to_end("upstream", &input).await;
    let sent = last_body(&server).await;
    assert_eq!(sent["tools"][0]["name"], "change_color", "the admitted tool went upstream: {sent}");
    assert_eq!(sent["tools"][0]["parameters"], tools[0]["parameters"]);
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the upstream called the tool");
    let call_id = call.data["toolCallId"].as_str().expect("id").to_string();
    let turn = call_id.split(':').next().expect("turn").to_string();
    assert_eq!(call_id, format!("{turn}:c1"), "under the gateway's id");
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"], json!({ "type": "success", "pendingToolCallIds": [call_id] }), "{:?}", kinds(&first));
    assert!(!kinds(&first).contains(&"TOOL_CALL_RESULT"), "only the client runs its tool");
    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");

    let next = json!({
        "threadId": thread, "runId": "run-2", "protocolVersion": "1.0", "tools": tools,
        "messages": [
            { "id": "run-1-user", "role": "user", "content": "make it blue" },
            { "id": format!("{turn}:m1"), "role": "assistant", "content": "Calling change_color",
              "toolCalls": [{ "id": call_id, "type": "function",
                  "function": { "name": "change_color", "arguments": "{\"color\":\"blue\"}" } }] },
            { "id": "result-1", "role": "tool", "toolCallId": call_id, "content": "painted blue" }
        ]
    });
    let continued = app.run_to_end("upstream", &next).await;
    assert_eq!(continued.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&continued));
    assert_eq!(text_of(&continued), "The tool said: painted blue");
    assert!(
        continued.iter().filter_map(|e| e.id.as_deref()).all(|id| id.starts_with(&format!("{turn}."))),
        "the same turn went on"
    );
    assert_eq!(app.counts().await.turns, 1);
    // The upstream was given the conversation as the gateway recorded it, in its own terms:
    // its message and its call under its own ids (the upstream's run was `<turn>-1`), and the
    // client's result naming its call.
    let sent = last_body(&server).await;
    let messages = sent["messages"].as_array().expect("messages");
    let result = messages.last().expect("a message");
    let upstream_call = format!("{turn}-1-call");
    assert_eq!((result["role"].as_str(), result["toolCallId"].as_str()), (Some("tool"), Some(&*upstream_call)));
    assert_eq!(result["content"], "painted blue");
    let asked = messages.iter().find(|m| m["role"] == "assistant").expect("the call in the conversation");
    assert_eq!(asked["id"], format!("{turn}-1-ask"), "the upstream's message id");
    assert_eq!(asked["toolCalls"][0]["id"], upstream_call);
    assert_ne!(sent["runId"], json!(format!("{turn}-1")), "a new upstream run");
    let (ok, report) = agui_check(&app.run_url("upstream"), &next).await;
    assert!(ok, "{report}");
}
crate::on_both_stores!(a_client_tool_goes_upstream_and_its_result_comes_back);

/// A client's tool result made of content parts (AG-UI 1.0 final) is recorded as parts: the
/// thread's conversation and the upstream's next run get the parts, not a string of them.
// One store: what is checked is the upstream's wire.
#[tokio::test]
async fn a_clients_tool_result_of_content_parts_goes_upstream_as_parts() {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway(&server, "frontend-tool", &db, "frontend_tools = [\"change_color\"]").await;
    let tools = json!([{ "name": "change_color", "description": "Paint the page",
        "parameters": { "type": "object", "properties": { "color": { "type": "string" } } } }]);
    let mut input = first_run("th-front-parts", "run-1", "make it blue");
    input["tools"] = tools.clone();
    let first = app.run_to_end("upstream", &input).await;
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the upstream called the tool");
    let call_id = call.data["toolCallId"].as_str().expect("id").to_string();
    let turn = call_id.split(':').next().expect("turn").to_string();
    let parts = json!([
        { "type": "text", "text": "painted blue" },
        { "type": "image", "source": { "type": "url", "value": "https://shots.example/page.png", "mimeType": "image/png" } }
    ]);
    let next = json!({
        "threadId": "th-front-parts", "runId": "run-2", "protocolVersion": "1.0", "tools": tools,
        "messages": [
            { "id": "run-1-user", "role": "user", "content": "make it blue" },
            { "id": format!("{turn}:m1"), "role": "assistant", "content": "Calling change_color",
              "toolCalls": [{ "id": call_id, "type": "function",
                  "function": { "name": "change_color", "arguments": "{\"color\":\"blue\"}" } }] },
            { "id": "result-1", "role": "tool", "toolCallId": call_id, "content": parts }
        ]
    });
    let continued = app.run_to_end("upstream", &next).await;
    assert_eq!(continued.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&continued));
    let sent = last_body(&server).await;
    let result = sent["messages"].as_array().expect("messages").last().expect("a message").clone();
    let upstream_call = format!("{turn}-1-call");
    assert_eq!((result["role"].as_str(), result["toolCallId"].as_str()), (Some("tool"), Some(&*upstream_call)));
    assert_eq!(result["content"], parts, "the upstream got the parts: {result}");
    let body: Value = app.get_json("/v1/threads/th-front-parts/messages").await;
    let tool = body["messages"].as_array().expect("list").iter().find(|m| m["role"] == "tool").expect("tool message");
    assert_eq!(tool["content"], parts, "recorded as parts: {body}");
    let (ok, report) = agui_check(&app.run_url("upstream"), &next).await;
    assert!(ok, "{report}");
}

/// The client's context and forwarded props go upstream (the props limited by the agent's
/// allow-list), and its admitted editable state with what the upstream itself last set.
async fn context_props_and_state_go_upstream(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let extra = "forwarded_props_keys = [\"locale\"]\neditable_state = { theme = { type = \"string\" } }\n";
    let app = gateway(&server, "chat", &db, extra).await;
    let thread = unique("th-context");
    let mut input = first_run(&thread, "run-1", "hello");
    input["context"] = json!([{ "description": "The page the user is on", "value": "checkout" }]);
    input["forwardedProps"] = json!({ "locale": "de-DE", "internal": "not for the upstream" });
    input["state"] = json!({ "theme": "dark", "unlisted": 1 });
    let first = app.run_to_end("upstream", &input).await;
    assert_eq!(first.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&first));
    let sent = last_body(&server).await;
    assert_eq!(sent["context"], input["context"]);
    assert_eq!(sent["forwardedProps"], json!({ "locale": "de-DE" }), "only the allowed keys");
    assert_eq!(sent["state"], json!({ "theme": "dark" }), "only the admitted editable key");
    let snapshot = first.iter().find(|e| e.kind() == "STATE_SNAPSHOT" && e.data["snapshot"]["upstream"].is_object());
    let runs = snapshot.expect("the upstream set its state").data["snapshot"]["upstream"]["runs"].clone();

    // The next turn: the upstream sees the state it set, beside the client's editable key.
    let mut second = first_run(&thread, "run-2", "again");
    let history = app.client.get(app.url(&format!("/v1/threads/{thread}/messages"))).send().await.expect("messages");
    let mut messages = history.json::<Value>().await.expect("json")["messages"].as_array().expect("list").clone();
    messages.push(second["messages"][0].clone());
    second["messages"] = Value::Array(messages);
    let again = app.run_to_end("upstream", &second).await;
    assert_eq!(again.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&again));
    let sent = last_body(&server).await;
    assert_eq!(sent["state"]["upstream"]["runs"], runs, "the upstream's own state came back: {sent}");
    assert_eq!(sent["state"]["theme"], "dark");
    assert_eq!(sent["context"], json!([]), "the second run sent no context");
}
crate::on_both_stores!(context_props_and_state_go_upstream);

// One store: what is checked is the upstream's wire.
#[tokio::test]
async fn an_agent_can_keep_tools_context_props_and_state_from_the_upstream() {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let extra = "send_context = false\nsend_forwarded_props = false\nsend_tools = false\nsend_state = false\n\
                 frontend_tools = [\"change_color\"]\neditable_state = { theme = { type = \"string\" } }\n";
    let app = gateway(&server, "chat", &db, extra).await;
    let mut input = first_run("th-kept", "run-1", "hello");
    input["context"] = json!([{ "description": "secret page", "value": "admin" }]);
    input["forwardedProps"] = json!({ "locale": "de-DE" });
    input["tools"] = json!([{ "name": "change_color", "description": "Paint", "parameters": { "type": "object" } }]);
    input["state"] = json!({ "theme": "dark" });
    let events = app.run_to_end("upstream", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    let sent = last_body(&server).await;
    assert_eq!(
        [&sent["context"], &sent["forwardedProps"], &sent["tools"], &sent["state"]],
        [&json!([]), &json!({}), &json!([]), &json!({})]
    );
}

/// Chunk events are expanded as the official client expands them and relayed under the
/// gateway's ids; the last chunked message is closed before `RUN_FINISHED`.
// One store: what is checked is the relay's expansion.
#[tokio::test]
async fn chunk_events_are_expanded_and_relayed() {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway(&server, "chunks", &db, "").await;
    let input = first_run("th-chunks", "run-1", "chunk it");
    let events = app.run_to_end("upstream", &input).await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "success", "{end} {:?}", kinds(&events));
    assert!(!kinds(&events).iter().any(|k| k.ends_with("_CHUNK")), "relayed expanded: {:?}", kinds(&events));
    assert_eq!(text_of(&events), "Chunked text.After the call.");
    let starts: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == "TEXT_MESSAGE_START")
        .filter_map(|e| e.data["messageId"].as_str())
        .collect();
    let turn = starts[0].split(':').next().expect("turn");
    assert_eq!(starts, [format!("{turn}:m1"), format!("{turn}:m2")], "two messages, the gateway's ids");
    let ends = events.iter().filter(|e| e.kind() == "TEXT_MESSAGE_END").count();
    assert_eq!(ends, 2, "the message RUN_FINISHED closed was closed");
    let args: String = deltas(&events, "TOOL_CALL_ARGS");
    assert_eq!(args, r#"{"q":"x"}"#);
    let thought: String = deltas(&events, "REASONING_MESSAGE_CONTENT");
    assert_eq!(thought, "Thinking it over.");
    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}

/// A tool result made of content parts (AG-UI 1.0 final) is relayed and recorded as parts —
/// in the stream and in the thread's conversation — not turned into text.
async fn a_tool_result_of_content_parts_stays_parts(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "parts-result", &db, "").await;
    let parts = json!([
        { "type": "text", "text": "A map of Paris." },
        { "type": "image", "source": { "type": "url", "value": "https://maps.example/paris.png", "mimeType": "image/png" } }
    ]);
    let input = first_run("th-parts", "run-1", "draw Paris");
    let events = app.run_to_end("upstream", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result.data["content"], parts, "relayed as parts");

    let body: Value = app.get_json("/v1/threads/th-parts/messages").await;
    let tool = body["messages"].as_array().expect("list").iter().find(|m| m["role"] == "tool").expect("tool message");
    assert_eq!(tool["content"], parts, "recorded as parts: {body}");

    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_tool_result_of_content_parts_stays_parts);

/// Steps from an upstream obey `limits.max_open_steps` (§3): past it they run unshown.
// One store: the cap is the relay's.
#[tokio::test]
async fn upstream_steps_past_the_cap_run_unshown() {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway(&server, "many-steps", &db, "").await;
    let input = first_run("th-steps", "run-1", "go deep");
    let events = app.run_to_end("upstream", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let started: Vec<&str> =
        events.iter().filter(|e| e.kind() == "STEP_STARTED").filter_map(|e| e.data["stepName"].as_str()).collect();
    let finished = events.iter().filter(|e| e.kind() == "STEP_FINISHED").count();
    assert_eq!(started.len(), 32, "the default cap of 32 open steps");
    assert_eq!(started.last(), Some(&"step-32"), "the outermost are shown");
    assert_eq!(finished, 32, "each shown step finishes, no unshown one does");
    assert_eq!(text_of(&events), "40 steps deep.", "what the hidden steps say is still relayed");
    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}
