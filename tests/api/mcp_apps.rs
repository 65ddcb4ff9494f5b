//! An MCP App's own requests through the gateway (SPEC §9.2, docs/api.md "MCP Apps' own
//! requests"): runs carrying `forwardedProps.__proxiedMCPRequest`, as `@ag-ui/mcp-apps-middleware`'s
//! host sends them, answered from the `openai` agent's MCP servers against the real Python MCP
//! server (tests/mcp/server.py). Each scenario on SQLite and PostgreSQL; every stream put
//! before the official client.

use serde_json::{json, Value};

use crate::auth::{auth_config, scoped_token};
use crate::fakes::model::{assistant_toml, ScriptedModel};
use crate::helpers::*;
use crate::mcp::McpServer;
use crate::on_both_stores;

/// Two servers on the one MCP server: `calc`, whose tools run without asking, and `pay`, whose
/// tools wait for a person's approval. `add` is listed by neither's allow-list from `pay`.
fn servers(url: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"calc\"\nurl = \"{url}/mcp\"\ntimeout_secs = 10\ntools = [\"weather\", \"add\"]\n\
         [[mcp_servers]]\nname = \"pay\"\nurl = \"{url}/mcp\"\ntimeout_secs = 10\ntools = [\"weather\", \"charge\"]\n\
         approval = \"always\"\n"
    )
}

/// A gateway (with `config`'s database) whose `assistant` shows the weather App, and a thread
/// `thread` whose first turn showed it (the model called `calc__weather`).
async fn gateway_with_an_app(
    server: &McpServer,
    mut config: agui_gateway::config::Config,
    thread: &str,
    token: Option<&str>,
) -> (TestApp, ScriptedModel) {
    let model = ScriptedModel::planned(vec![("calc__weather", json!({"city": "Oslo"}))], "Sunny.").await;
    config.agents.push(toml::from_str(&assistant_toml(&model.url, &servers(&server.url))).expect("agent config"));
    let app = TestApp::start_with(config).await;
    let headers: Vec<(&str, &str)> = token.map(|t| ("authorization", t)).into_iter().collect();
    let first =
        read_events(app.post_run_with("assistant", &first_run(thread, "run-1", "weather?"), &headers).await, None)
            .await;
    assert!(first.iter().any(|e| e.data["activityType"] == "mcp-apps"), "the App shown: {:?}", kinds(&first));
    (app, model)
}

/// The run the App's host sends: the thread's usual messages (none new) and the request.
fn app_run(thread: &str, run: &str, server: &str, method: &str, params: Value) -> Value {
    json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0",
        "messages": [{"id": "u1", "role": "user", "content": "weather?"}],
        "forwardedProps": {"__proxiedMCPRequest": {"serverHash": server, "serverId": server, "method": method, "params": params}},
    })
}

async fn official_client_accepts(events: &[SseEvent], input: &Value) {
    let (url, server) = serve_recorded_stream(sse_body(events)).await;
    let (passed, report) = agui_check(&url, input).await;
    server.abort();
    assert!(passed, "the official client refused the stream:\n{report}");
}

/// The `result` of an answered request's `RUN_FINISHED`, after its `RUN_STARTED` alone.
async fn answered(app: &TestApp, input: &Value) -> Value {
    let events = read_events(app.post_run("assistant", input).await, None).await;
    assert_eq!(kinds(&events), ["RUN_STARTED", "RUN_FINISHED"], "{input}");
    assert_eq!(events[0].data["runId"], input["runId"]);
    official_client_accepts(&events, input).await;
    events[1].data["result"].clone()
}

async fn the_apps_page_and_its_tool_calls_are_answered_without_a_turn(backend: Backend) {
    let server = McpServer::start();
    let db = TestDatabase::new(backend).await;
    let (app, _model) = gateway_with_an_app(&server, test_config(&db.url), "th-app", None).await;
    let messages = app.get_json("/v1/threads/th-app/messages").await;
    let before = app.counts().await;

    let page =
        answered(&app, &app_run("th-app", "a-1", "calc", "resources/read", json!({"uri": "ui://weather/view.html"})))
            .await;
    let contents = &page["contents"][0];
    assert_eq!(contents["uri"], "ui://weather/view.html", "{page}");
    assert_eq!(contents["mimeType"], "text/html;profile=mcp-app");
    assert!(contents["text"].as_str().expect("the HTML").contains(r#"<h1 id="title">Weather</h1>"#), "{page}");

    let calls = server.calls().await.len();
    let call = json!({"name": "weather", "arguments": {"city": "Bergen"}});
    let result = answered(&app, &app_run("th-app", "a-2", "calc", "tools/call", call)).await;
    assert_eq!(result["content"][0], json!({"type": "text", "text": "sunny in Bergen"}), "{result}");
    let made = server.calls().await;
    assert_eq!(made.len(), calls + 1);
    assert_eq!(made[calls]["arguments"], json!({"city": "Bergen"}));
    assert_eq!(made[calls]["idempotencyKey"].as_str().map(str::len), Some(64), "a key of its own: {}", made[calls]);

    assert_eq!(answered(&app, &app_run("th-app", "a-3", "calc", "ping", json!({}))).await, json!({}));
    let log = json!({"level": "info", "data": "the page loaded"});
    assert_eq!(answered(&app, &app_run("th-app", "a-4", "calc", "notifications/message", log)).await, json!({}));

    // The server's JSON-RPC error, as the middleware answers one: words, and not its address.
    let missing =
        answered(&app, &app_run("th-app", "a-5", "calc", "resources/read", json!({"uri": "ui://none/x.html"}))).await;
    let error = missing["error"].as_str().unwrap_or_else(|| panic!("an error: {missing}"));
    assert!(error.starts_with("the MCP server 'calc': "), "{error}");
    assert!(!error.contains(&server.url), "{error}");

    // No turn, nothing in the conversation; one audit row per request answered.
    let after = app.counts().await;
    assert_eq!((after.turns, after.runs, after.events), (before.turns, before.runs, before.events));
    assert_eq!(after.audit, before.audit + 5);
    assert_eq!(app.get_json("/v1/threads/th-app/messages").await, messages);
}
on_both_stores!(the_apps_page_and_its_tool_calls_are_answered_without_a_turn);

async fn an_app_request_the_agent_does_not_serve_is_refused_and_stores_nothing(backend: Backend) {
    let server = McpServer::start();
    let db = TestDatabase::new(backend).await;
    let (app, _model) = gateway_with_an_app(&server, test_config(&db.url), "th-refuse", None).await;
    let before = every_table_as_text(&db.url).await;
    let calls = server.calls().await.len();
    let refusals = [
        (
            "unknown_mcp_server",
            app_run("th-refuse", "r-1", "billing", "resources/read", json!({"uri": "ui://weather/view.html"})),
        ),
        (
            "tool_not_listed",
            app_run("th-refuse", "r-2", "calc", "tools/call", json!({"name": "wipe", "arguments": {}})),
        ),
        (
            "tool_not_listed",
            app_run("th-refuse", "r-3", "pay", "tools/call", json!({"name": "add", "arguments": {"a": 1, "b": 2}})),
        ),
        (
            "invalid_arguments",
            app_run("th-refuse", "r-4", "calc", "tools/call", json!({"name": "weather", "arguments": {"city": 5}})),
        ),
        (
            "invalid_arguments",
            app_run("th-refuse", "r-5", "pay", "tools/call", json!({"name": "charge", "arguments": {"amount": "all"}})),
        ),
        ("mcp_method_not_allowed", app_run("th-refuse", "r-6", "calc", "sampling/createMessage", json!({}))),
    ];
    for (code, input) in refusals {
        let events = read_events(app.post_run("assistant", &input).await, None).await;
        assert_eq!(kinds(&events), ["RUN_ERROR"], "{input}");
        assert_eq!(events[0].data["code"], code, "{}", events[0].data);
        official_client_accepts(&events, &input).await;
    }
    assert_eq!(server.calls().await.len(), calls, "the server was called for none of them");
    assert_eq!(every_table_as_text(&db.url).await, before, "the stored state is untouched");
}
on_both_stores!(an_app_request_the_agent_does_not_serve_is_refused_and_stores_nothing);

/// The interrupt a run ended with.
fn interrupt_of(events: &[SseEvent]) -> Value {
    let last = events.last().expect("an end");
    assert_eq!(last.data["outcome"]["type"], "interrupt", "{:?}", kinds(events));
    last.data["outcome"]["interrupts"][0].clone()
}

async fn resume(app: &TestApp, thread: &str, run: &str, interrupt: &Value, approved: bool) -> Vec<SseEvent> {
    let input = json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": approved}}]});
    let events = app.run_to_end("assistant", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    official_client_accepts(&events, &input).await;
    events
}

async fn an_app_call_that_needs_approval_waits_for_a_person(backend: Backend) {
    let server = McpServer::start();
    let db = TestDatabase::new(backend).await;
    let (app, model) = gateway_with_an_app(&server, test_config(&db.url), "th-approve", None).await;
    let model_calls = model.requests().len();
    let calls = server.calls().await.len();

    // Approved: the call runs, its result is shown, and the App's activity carries it.
    let input =
        app_run("th-approve", "p-1", "pay", "tools/call", json!({"name": "weather", "arguments": {"city": "Rome"}}));
    let asked = app.run_to_end("assistant", &input).await;
    official_client_accepts(&asked, &input).await;
    let interrupt = interrupt_of(&asked);
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["metadata"]["gateway/details"], json!({"city": "Rome"}));
    let call = asked.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the App's call, shown");
    assert_eq!(call.data["toolCallName"], "pay__weather");
    assert_eq!(interrupt["toolCallId"], call.data["toolCallId"]);
    assert_eq!(server.calls().await.len(), calls, "nothing ran before the approval");
    let approved = resume(&app, "th-approve", "p-2", &interrupt, true).await;
    let result = approved.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the result");
    assert_eq!(result.data["content"], "sunny in Rome");
    let shown = approved.iter().find(|e| e.kind() == "ACTIVITY_SNAPSHOT").expect("the App's activity");
    assert_eq!(shown.data["content"]["serverId"], "pay");
    assert_eq!(shown.data["content"]["toolInput"], json!({"city": "Rome"}));
    assert_eq!(shown.data["content"]["result"]["content"][0]["text"], "sunny in Rome");
    let made = server.calls().await;
    assert_eq!(made.len(), calls + 1);
    assert_eq!(made[calls]["arguments"], json!({"city": "Rome"}));

    // Denied: nothing runs.
    let input = app_run(
        "th-approve",
        "p-3",
        "pay",
        "tools/call",
        json!({"name": "charge", "arguments": {"amount": 5, "currency": "EUR"}}),
    );
    let asked = app.run_to_end("assistant", &input).await;
    let interrupt = interrupt_of(&asked);
    let denied = resume(&app, "th-approve", "p-4", &interrupt, false).await;
    let result = denied.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the result");
    assert!(
        result.data["content"].as_str().expect("text").starts_with("not run: the call was denied"),
        "{}",
        result.data
    );
    assert_eq!(server.calls().await.len(), calls + 1, "the denied call never reached the server");
    assert_eq!(model.requests().len(), model_calls, "no model was asked");

    // The thread holds the App's turns, each with its request as its input; the conversation as
    // the thread holds it goes on with a new message.
    let held = app.get_json("/v1/threads/th-approve/messages").await["messages"].as_array().cloned().expect("messages");
    let inputs: Vec<&Value> = held.iter().filter(|m| m["role"] == "user").map(|m| &m["content"]).collect();
    assert_eq!(inputs, ["weather?", "MCP App: tools/call weather on 'pay'", "MCP App: tools/call charge on 'pay'"]);
    let next = held.into_iter().chain([json!({"id": "u2", "role": "user", "content": "thanks"})]).collect::<Vec<_>>();
    let input = json!({"threadId": "th-approve", "runId": "p-5", "messages": next});
    let events = app.run_to_end("assistant", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
}
on_both_stores!(an_app_call_that_needs_approval_waits_for_a_person);

async fn an_app_request_needs_the_callers_rights_on_the_thread(backend: Backend) {
    let server = McpServer::start();
    let db = TestDatabase::new(backend).await;
    let token = |sub: &str, scope: &str| format!("Bearer {}", scoped_token("default", sub, scope));
    let nina = token("nina", "threads:read threads:content agent:assistant");
    let (app, _model) = gateway_with_an_app(&server, auth_config(&db.url, ""), "th-private", Some(&nina)).await;
    let before = every_table_as_text(&db.url).await;
    let calls = server.calls().await.len();
    let call = json!({"name": "weather", "arguments": {"city": "Paris"}});
    let attempts = [
        // Another person: the thread is nina's alone.
        (token("otto", "threads:read threads:content agent:assistant"), "th-private"),
        // Nina without the content permission.
        (token("nina", "threads:read agent:assistant"), "th-private"),
        // Nina on a thread that does not exist.
        (nina.clone(), "th-none"),
    ];
    for (credential, thread) in attempts {
        let input = app_run(thread, "x-1", "calc", "tools/call", call.clone());
        let refused = app.post_run_with("assistant", &input, &[("authorization", &credential)]).await;
        assert_eq!(refused.status(), 403, "{thread}");
        let body: Value = refused.json().await.expect("json");
        assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    }
    assert_eq!(server.calls().await.len(), calls, "nothing reached the server");
    assert_eq!(every_table_as_text(&db.url).await, before, "the stored state is untouched");
    // Nina herself is answered.
    let input = app_run("th-private", "x-2", "calc", "tools/call", call);
    let events = read_events(app.post_run_with("assistant", &input, &[("authorization", &nina)]).await, None).await;
    assert_eq!(events.last().expect("end").data["result"]["content"][0]["text"], "sunny in Paris");
}
on_both_stores!(an_app_request_needs_the_callers_rights_on_the_thread);
