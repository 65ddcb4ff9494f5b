//! The `agui` agent (§9.3) in front of the agent frameworks people run, each served by its own
//! AG-UI adapter on its own fake model (tests/frameworks): a LangGraph graph on
//! `ag-ui-langgraph` and a Mastra agent on `@ag-ui/mastra`. `tests/frameworks/check.mjs` shows
//! every scenario working with the official client talking to the framework directly; here the
//! same scenarios go through the gateway: a text answer, a frontend tool round trip, the
//! client's `context` reaching the agent, LangGraph's `interrupt()` decided through the gateway,
//! and a cut stream continued with `Last-Event-ID`. The official client judges every stream a
//! test reads. Each scenario runs on both stores.
//!
//! One server per framework serves the whole test process (each test on threads of its own);
//! it ends when the process does (its stdin, a pipe from here, closes).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::helpers::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framework {
    LangGraph,
    Mastra,
}

/// A framework's server, started once per test process.
struct FrameworkServer {
    _child: Child,
    url: String,
}

fn frameworks_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks")
}

impl FrameworkServer {
    fn of(framework: Framework) -> &'static FrameworkServer {
        static LANGGRAPH: OnceLock<FrameworkServer> = OnceLock::new();
        static MASTRA: OnceLock<FrameworkServer> = OnceLock::new();
        match framework {
            Framework::LangGraph => LANGGRAPH.get_or_init(|| FrameworkServer::start(framework)),
            Framework::Mastra => MASTRA.get_or_init(|| FrameworkServer::start(framework)),
        }
    }

    fn start(framework: Framework) -> FrameworkServer {
        let dir = frameworks_dir();
        let command = match framework {
            Framework::LangGraph => {
                let python = dir.join("langgraph/.venv/bin/python");
                assert!(python.exists(), "create tests/frameworks/langgraph/.venv (scripts/test does)");
                let mut command = Command::new(python);
                command.arg(dir.join("langgraph/server.py"));
                command
            }
            Framework::Mastra => {
                assert!(
                    dir.join("mastra/node_modules/@ag-ui/mastra").exists(),
                    "run `npm ci --prefix tests/frameworks/mastra` (scripts/test does)"
                );
                let mut command = Command::new("node");
                command.arg(dir.join("mastra/server.mjs"));
                command
            }
        };
        let (child, url) = start_listening(command, "the framework's server");
        FrameworkServer { _child: child, url }
    }

    /// The RunAgentInputs this server was sent for the gateway thread `thread` (tenant `default`).
    async fn requests_for(&self, thread: &str) -> Vec<Value> {
        let answer = crate::tls_support::get(format!("{}/requests", self.url)).await.expect("requests");
        let all: Vec<Value> = answer.json().await.expect("JSON");
        let upstream_thread = format!("default:{thread}");
        all.into_iter().map(|r| r["body"].clone()).filter(|body| body["threadId"] == upstream_thread).collect()
    }
}

/// The frontend tool the client declares and the agent admits.
fn show_city() -> Value {
    json!([{
        "name": "show_city",
        "description": "Shows a city on the page.",
        "parameters": { "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] }
    }])
}

/// A gateway on `backend` whose agent `framework` fronts the framework's `/agent` and admits
/// the client tool `show_city`.
async fn gateway_in_front_of(framework: Framework, db: &TestDatabase) -> (TestApp, &'static FrameworkServer) {
    let server = FrameworkServer::of(framework);
    let mut config = test_config(&db.url);
    let toml = format!(
        r#"
name = "framework"
kind = "agui"
url = "{}/agent"
timeout_secs = 20
frontend_tools = ["show_city"]
"#,
        server.url
    );
    config.agents.push(toml::from_str(&toml).expect("agent config"));
    (TestApp::start_with(config).await, server)
}

fn text(events: &[SseEvent]) -> String {
    text_of(&events)
}

/// What a stream ended with, for failure messages: the outcome, or the error's message.
fn ending(events: &[SseEvent]) -> String {
    match events.last() {
        Some(e) if e.kind() == "RUN_ERROR" => format!("RUN_ERROR {}: {}", e.data["code"], e.data["message"]),
        Some(e) => format!("{} {}", e.kind(), e.data["outcome"]),
        None => "no events".into(),
    }
}

fn turn_of(events: &[SseEvent]) -> String {
    events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("an id").to_string()
}

/// The official client's verdict on a stream exactly as the test read it.
async fn judged(events: &[SseEvent], input: &Value, what: &str) {
    let (url, server) = serve_recorded_stream(sse_body(events)).await;
    let (passed, report) = agui_check(&url, input).await;
    server.abort();
    assert!(passed, "{what}: the official client refused the stream:\n{report}");
}

async fn thread_messages(app: &TestApp, thread: &str) -> Vec<Value> {
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    body["messages"].as_array().expect("list").clone()
}

/// A text answer, relayed under the gateway's ids; a second turn sends the gateway's record of
/// the thread, and the agent answers the new message.
async fn a_text_answer_is_relayed(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-text");
    let input = first_run(&thread, "run-1", "hello there");
    let events = app.run_to_end("framework", &input).await;
    assert_eq!(text(&events), "You said: hello there", "{framework:?}: {:?}, {}", kinds(&events), ending(&events));
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{}", ending(&events));
    let turn = turn_of(&events);
    let start = events.iter().find(|e| e.kind() == "TEXT_MESSAGE_START").expect("a message");
    assert_eq!(start.data["messageId"], format!("{turn}:m1"), "the gateway's id, not the framework's");
    assert!(!kinds(&events).contains(&"MESSAGES_SNAPSHOT"), "the gateway keeps the conversation itself");
    judged(&events, &input, "the first turn").await;

    let mut second = first_run(&thread, "run-2", "and again");
    let mut history = thread_messages(&app, &thread).await;
    history.push(second["messages"][0].clone());
    second["messages"] = Value::Array(history);
    let again = app.run_to_end("framework", &second).await;
    assert_eq!(text(&again), "You said: and again", "{:?}, {}", kinds(&again), ending(&again));
    judged(&again, &second, "the second turn").await;
    let sent = server.requests_for(&thread).await;
    let roles: Vec<&str> = sent.last().expect("a request")["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "the thread's record went upstream");
}

/// A frontend tool: the client declares `show_city`, the agent admits it, the framework's model
/// calls it; the run ends `success` with the gateway's call id pending; the client's
/// `role: "tool"` answer on its next run continues the same turn to the model's answer.
async fn a_frontend_tool_round_trip_continues_the_turn(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-tool");
    let mut input = first_run(&thread, "run-1", r#"use show_city {"city": "Paris"}"#);
    input["tools"] = show_city();
    let events = app.run_to_end("framework", &input).await;
    let sent = server.requests_for(&thread).await;
    let upstream_tools: Vec<&str> = sent.last().expect("a request")["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(upstream_tools, ["show_city"], "the client's admitted tool goes upstream as the run's tools");
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").unwrap_or_else(|| {
        panic!("{framework:?}: no tool call; the agent answered {:?} ({})", text(&events), ending(&events))
    });
    assert_eq!(call.data["toolCallName"], "show_city");
    let call_id = call.data["toolCallId"].as_str().expect("id").to_string();
    assert!(call_id.starts_with(&format!("{}:c", turn_of(&events))), "the gateway's id: {call_id}");
    let args: String = deltas(&events, "TOOL_CALL_ARGS");
    assert_eq!(serde_json::from_str::<Value>(&args).expect("JSON args"), json!({"city": "Paris"}));
    let end = &events.last().expect("end").data;
    assert_eq!(end["outcome"], json!({ "type": "success", "pendingToolCallIds": [call_id] }), "{}", ending(&events));
    assert!(!kinds(&events).contains(&"TOOL_CALL_RESULT"), "nobody but the client answers its tool");
    judged(&events, &input, "the run that calls the tool").await;

    let mut messages = thread_messages(&app, &thread).await;
    messages.push(json!({ "id": "result-1", "role": "tool", "toolCallId": call_id, "content": "shown Paris" }));
    let next = json!({ "threadId": thread, "runId": "run-2", "protocolVersion": "1.0", "state": {},
                       "tools": show_city(), "context": [], "forwardedProps": {}, "messages": messages });
    let continued = app.run_to_end("framework", &next).await;
    assert_eq!(text(&continued), "The tool answered: shown Paris", "{:?}, {}", kinds(&continued), ending(&continued));
    assert_eq!(continued.last().expect("end").data["outcome"]["type"], "success");
    assert_eq!(app.counts().await.turns, 1, "the client's result continued the same turn");
    judged(&continued, &next, "the continued run").await;
    // Upstream, the result answers the call the framework made, under the framework's id.
    let sent = server.requests_for(&thread).await;
    let upstream = sent.last().expect("a request")["messages"].as_array().expect("messages").clone();
    let tool = upstream.iter().find(|m| m["role"] == "tool").expect("the client's result went upstream");
    assert_eq!(tool["content"], "shown Paris");
    let asked = upstream.iter().find(|m| m["toolCalls"].is_array()).expect("the call went upstream");
    assert_eq!(asked["toolCalls"][0]["id"], tool["toolCallId"], "the result names the call it answers");
}

/// The client's `context` entries reach the agent: the framework's model repeats them.
async fn the_clients_context_reaches_the_agent(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-context");
    let mut input = first_run(&thread, "run-1", "what context");
    input["context"] =
        json!([{ "description": "user name", "value": "Ada" }, { "description": "city", "value": "Paris" }]);
    let events = app.run_to_end("framework", &input).await;
    let sent = server.requests_for(&thread).await;
    assert_eq!(sent.last().expect("a request")["context"], input["context"], "the client's context goes upstream");
    assert_eq!(
        text(&events),
        "Context seen: user name=Ada; city=Paris",
        "{framework:?}: {:?}, {}",
        kinds(&events),
        ending(&events)
    );
    judged(&events, &input, "the run").await;
}

/// LangGraph's `interrupt()` (inside the graph's `send_report` tool) becomes a gateway
/// interrupt: `int_…` id, the graph's reason, message and schema, and the tool call under the
/// gateway's id. The person's decision goes back as the `resume` array with the graph's own
/// interrupt id, and the graph runs the tool and answers, in the same turn.
async fn a_langgraph_interrupt_is_decided_through_the_gateway(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(Framework::LangGraph, &db).await;
    let thread = unique("th-fw-interrupt");
    let input = first_run(&thread, "run-1", "send the report");
    let first = app.run_to_end("framework", &input).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}, {}", kinds(&first), ending(&first));
    assert_eq!(text(&first), "I will send it once approved.");
    let interrupt = &end["outcome"]["interrupts"][0];
    let id = interrupt["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("int_"), "a gateway id: {id}");
    assert_eq!(interrupt["reason"], "tool_approval");
    assert_eq!(interrupt["message"], "Send the report to team@example.com?");
    assert_eq!(interrupt["responseSchema"]["required"], json!(["approved"]));
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    assert_eq!(call.data["toolCallName"], "send_report");
    assert_eq!(interrupt["toolCallId"], call.data["toolCallId"], "the call under the gateway's id");
    assert!(!kinds(&first).contains(&"TOOL_CALL_RESULT"), "the tool waits for the decision");
    judged(&first, &input, "the interrupted run").await;
    assert_eq!(server.requests_for(&thread).await.len(), 1);

    let resume = json!({ "threadId": thread, "runId": "run-2", "messages": [],
                         "resume": [{ "interruptId": id, "status": "resolved", "payload": { "approved": true, "note": "ship it" } }] });
    let resumed = app.run_to_end("framework", &resume).await;
    assert_eq!(
        resumed.last().expect("end").data["outcome"]["type"],
        "success",
        "{:?}, {}",
        kinds(&resumed),
        ending(&resumed)
    );
    let result = resumed.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the tool's result");
    assert_eq!(result.data["content"], "sent to team@example.com, note: ship it");
    // The graph announces the interrupted call again on resume; the gateway shows it once and
    // gives its result to the call the person approved.
    assert_eq!(result.data["toolCallId"], call.data["toolCallId"], "the result is the approved call's");
    assert!(!kinds(&resumed).contains(&"TOOL_CALL_START"), "the call is not shown twice: {:?}", kinds(&resumed));
    assert_eq!(text(&resumed), "Report sent to team@example.com, note: ship it.");
    assert_eq!(app.counts().await.turns, 1, "the decision continued the same turn");
    judged(&resumed, &resume, "the resumed run").await;
    let sent = server.requests_for(&thread).await;
    assert_eq!(sent.len(), 2, "one upstream run for the question, one for the decision");
    let forwarded = &sent[1]["resume"];
    assert_eq!(forwarded[0]["status"], "resolved");
    assert_eq!(forwarded[0]["payload"], json!({ "approved": true, "note": "ship it" }));
    let graph_id = forwarded[0]["interruptId"].as_str().expect("the graph's id");
    assert!(!graph_id.starts_with("int_") && !graph_id.is_empty(), "the graph's own interrupt id: {graph_id}");
}

/// A stream cut after `k` events continues with `Last-Event-ID` from exactly the next one:
/// joined, the pieces are the whole stream, and the official client accepts them.
async fn a_cut_stream_continues_with_last_event_id(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, _server) = gateway_in_front_of(framework, &db).await;
    for k in [1, 3, 5] {
        let thread = unique("th-fw-cut");
        let input = first_run(&thread, "run-1", "hello there again");
        let head = read_events(app.post_run("framework", &input).await, Some(k)).await;
        assert_eq!(head.len(), k);
        let last_id = head.last().and_then(|e| e.id.clone()).expect("the k-th event has an id");
        let resumed = app.post_run_with("framework", &input, &[("last-event-id", &last_id)]).await;
        assert_eq!(resumed.status(), 200);
        let mut joined = head;
        joined.extend(read_events(resumed, None).await);
        let whole = app.run_to_end("framework", &input).await;
        assert_eq!(joined, whole, "k={k}: the joined stream is the stream, no gap and no duplicate");
        assert_eq!(text(&joined), "You said: hello there again", "k={k}: {:?}, {}", kinds(&joined), ending(&joined));
        judged(&joined, &input, &format!("the stream cut after {k} events")).await;
    }
}

macro_rules! on_both_frameworks_and_stores {
    ($name:ident) => {
        mod $name {
            use super::Framework;
            use crate::helpers::Backend;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn langgraph_sqlite() {
                super::$name(Framework::LangGraph, Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn langgraph_postgres() {
                super::$name(Framework::LangGraph, Backend::Postgres).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mastra_sqlite() {
                super::$name(Framework::Mastra, Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mastra_postgres() {
                super::$name(Framework::Mastra, Backend::Postgres).await
            }
        }
    };
}

on_both_frameworks_and_stores!(a_text_answer_is_relayed);
on_both_frameworks_and_stores!(a_frontend_tool_round_trip_continues_the_turn);
on_both_frameworks_and_stores!(the_clients_context_reaches_the_agent);
on_both_frameworks_and_stores!(a_cut_stream_continues_with_last_event_id);

mod a_langgraph_interrupt_is_decided_through_the_gateway {
    use crate::helpers::Backend;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_langgraph_interrupt_is_decided_through_the_gateway(Backend::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::a_langgraph_interrupt_is_decided_through_the_gateway(Backend::Postgres).await
    }
}
