//! The `agui` agent (§9.3) in front of the agent frameworks people run, each served by its own
//! AG-UI adapter on its own fake model (tests/frameworks): a LangGraph graph on
//! `ag-ui-langgraph`, a Mastra agent on `@ag-ui/mastra`, a Google ADK agent on `ag-ui-adk`, a
//! Microsoft Agent Framework agent on `agent-framework-ag-ui`, an AWS Strands agent on
//! `ag-ui-strands`, a CrewAI flow on `ag-ui-crewai` and a Pydantic AI agent on its own adapter. `tests/frameworks/check.mjs` shows the scenarios working with the official
//! client talking to each framework directly; here the same scenarios go through the gateway:
//! a text answer, a frontend tool round trip, the client's `context` and `state` reaching the
//! agent (and the client's echo of the state it was streamed being taken), each framework's
//! human-in-the-loop approved and denied (a denied tool never runs: the servers record every
//! run of their tool), a cut stream continued with `Last-Event-ID`, and the relaying instance
//! killed (SIGKILL) in the middle of an answer with the turn finished honestly by another. The
//! official client judges every stream a test reads. Each scenario runs on both stores (the
//! takeover on PostgreSQL, which two instances share).
//!
//! One server per framework serves the whole test process (each test on threads of its own);
//! it ends when the process does (its stdin, a pipe from here, closes).

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;
use agui_gateway::engine::meaning::DECISION_KEYS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framework {
    LangGraph,
    Mastra,
    Adk,
    AgentFramework,
    Strands,
    CrewAi,
    PydanticAi,
}

impl Framework {
    /// The directory of its server under tests/frameworks.
    fn dir(self) -> &'static str {
        match self {
            Framework::LangGraph => "langgraph",
            Framework::Mastra => "mastra",
            Framework::Adk => "adk",
            Framework::AgentFramework => "agent_framework",
            Framework::Strands => "strands",
            Framework::CrewAi => "crewai",
            Framework::PydanticAi => "pydantic_ai",
        }
    }

    /// What a person answers to the framework's confirmation, as its interrupt's
    /// `responseSchema` asks: CrewAI's `@human_feedback` asks for one of its outcomes (a string
    /// enum), the others for `{"approved": bool}` (ADK gives no schema and reads the same).
    fn decision(self, approve: bool) -> Value {
        match (self, approve) {
            (Framework::CrewAi, true) => json!("approved"),
            (Framework::CrewAi, false) => json!("rejected"),
            (_, approved) => json!({ "approved": approved }),
        }
    }

    /// What the agent fronting the framework sets besides the common table (docs/frameworks.md):
    /// CrewAI's `@human_feedback` asks for one of its outcomes, and `rejected` is the one a
    /// denial is sent as.
    fn settings(self) -> &'static str {
        match self {
            Framework::CrewAi => "deny_option = \"rejected\"",
            _ => "",
        }
    }

    /// Whether the framework streams its own tool's result as `TOOL_CALL_RESULT` (a CrewAI flow
    /// runs its tool as flow code, and only its answer is streamed).
    fn streams_tool_results(self) -> bool {
        self != Framework::CrewAi
    }

    /// What the framework's model answers to "what context" when the run's context is `user
    /// name=Ada; city=Paris`: Agent Framework's adapter hands the agent only A2UI's context
    /// entries and Pydantic AI's none, so their models are given none.
    fn context_answer(self) -> &'static str {
        match self {
            Framework::AgentFramework | Framework::PydanticAi => "No context was given to me.",
            _ => "Context seen: user name=Ada; city=Paris",
        }
    }
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
        static ADK: OnceLock<FrameworkServer> = OnceLock::new();
        static AGENT_FRAMEWORK: OnceLock<FrameworkServer> = OnceLock::new();
        static STRANDS: OnceLock<FrameworkServer> = OnceLock::new();
        static CREWAI: OnceLock<FrameworkServer> = OnceLock::new();
        static PYDANTIC_AI: OnceLock<FrameworkServer> = OnceLock::new();
        let cell = match framework {
            Framework::LangGraph => &LANGGRAPH,
            Framework::Mastra => &MASTRA,
            Framework::Adk => &ADK,
            Framework::AgentFramework => &AGENT_FRAMEWORK,
            Framework::Strands => &STRANDS,
            Framework::CrewAi => &CREWAI,
            Framework::PydanticAi => &PYDANTIC_AI,
        };
        cell.get_or_init(|| FrameworkServer::start(framework))
    }

    fn start(framework: Framework) -> FrameworkServer {
        let dir = frameworks_dir();
        let command = match framework {
            Framework::Mastra => {
                assert!(
                    dir.join("mastra/node_modules/@ag-ui/mastra").exists(),
                    "run `npm ci --prefix tests/frameworks/mastra` (scripts/test does)"
                );
                let mut command = Command::new("node");
                command.arg(dir.join("mastra/server.mjs"));
                command
            }
            _ => {
                let name = framework.dir();
                let python = dir.join(name).join(".venv/bin/python");
                assert!(python.exists(), "create tests/frameworks/{name}/.venv (scripts/test does)");
                let mut command = Command::new(python);
                command.arg(dir.join(name).join("server.py"));
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
        // The thread's upstream thread, and those of its branches (`default:<thread>:<turn>`).
        let upstream_thread = format!("default:{thread}");
        let branch = format!("{upstream_thread}:");
        all.into_iter()
            .map(|r| r["body"].clone())
            .filter(|body| body["threadId"].as_str().is_some_and(|t| t == upstream_thread || t.starts_with(&branch)))
            .collect()
    }

    /// The runs of the server's own tool `send_report` to `to` (the Python servers record them).
    async fn reports_sent_to(&self, to: &str) -> usize {
        let answer = crate::tls_support::get(format!("{}/executions", self.url)).await.expect("executions");
        let all: Vec<Value> = answer.json().await.expect("JSON");
        all.iter().filter(|run| run["tool"] == "send_report" && run["args"]["to"] == to).count()
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

/// The `[[agents]]` table of the agent `framework`, fronting the framework's `/agent`: it
/// admits the client tool `show_city` and lets a run's `state` write `theme` (a string).
fn agent_toml(server: &FrameworkServer) -> String {
    format!(
        r#"
name = "framework"
kind = "agui"
url = "{}/agent"
timeout_secs = 30
frontend_tools = ["show_city"]
editable_state = {{ theme = {{ type = "string" }} }}
"#,
        server.url
    )
}

/// A gateway on `backend` whose agent `framework` fronts the framework's `/agent`.
async fn gateway_in_front_of(framework: Framework, db: &TestDatabase) -> (TestApp, &'static FrameworkServer) {
    gateway_in_front_of_with(framework, db, framework.settings()).await
}

/// [`gateway_in_front_of`], the agent's table with the lines `extra` besides.
async fn gateway_in_front_of_with(
    framework: Framework,
    db: &TestDatabase,
    extra: &str,
) -> (TestApp, &'static FrameworkServer) {
    let server = FrameworkServer::of(framework);
    let mut config = test_config(&db.url);
    let table = format!("{}{extra}\n", agent_toml(server));
    config.agents.push(toml::from_str(&table).expect("agent config"));
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
    let upstream_id = tool["toolCallId"].as_str().expect("an id");
    assert!(
        !upstream_id.starts_with(&format!("{}:", turn_of(&events))),
        "the framework's own call id goes upstream, not the gateway's: {upstream_id}"
    );
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
    assert_eq!(text(&events), framework.context_answer(), "{framework:?}: {:?}, {}", kinds(&events), ending(&events));
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

/// The state the official client holds after `events`, starting from the `state` it sent: each
/// `STATE_SNAPSHOT` replaces it, each `STATE_DELTA` patches it. What it sends on its next run.
fn client_state(sent: &Value, events: &[SseEvent]) -> Value {
    let mut state = sent.clone();
    for event in events {
        match event.kind() {
            "STATE_SNAPSHOT" => state = event.data["snapshot"].clone(),
            "STATE_DELTA" => {
                let patch: json_patch::Patch =
                    serde_json::from_value(event.data["delta"].clone()).expect("a JSON Patch");
                json_patch::patch(&mut state, &patch).expect("the delta applies, as the client applies it");
            }
            _ => {}
        }
    }
    state
}

/// The next run of the official client on `thread`: the thread's conversation, then `text`.
async fn next_run(app: &TestApp, thread: &str, run: &str, text: &str, state: Value) -> Value {
    let mut input = first_run(thread, run, text);
    let mut history = thread_messages(app, thread).await;
    history.push(input["messages"][0].clone());
    input["messages"] = Value::Array(history);
    input["state"] = state;
    input
}

/// The client's `state` reaches the agent (the agent lists `theme` as editable), and the state
/// the client holds after a run — the framework's own `STATE_SNAPSHOT`s applied — is taken
/// back on its next run as the official client sends it: an echo is not an edit (issue 37,
/// item 3; Agent Framework streams `theme: {}`, its default for a string, which the agent's
/// schema would refuse as an edit). A changed value is validated and goes upstream.
async fn the_clients_state_reaches_the_agent_and_its_echo_is_taken(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-state");
    let input = first_run(&thread, "run-1", "hello there");
    let first = app.run_to_end("framework", &input).await;
    assert_eq!(first.last().expect("end").data["outcome"]["type"], "success", "{}", ending(&first));
    judged(&first, &input, "the first run").await;
    let held = client_state(&input["state"], &first);

    // The client's next run sends back what it holds.
    let echo = next_run(&app, &thread, "run-2", "what state", held.clone()).await;
    let answer = app.post_run("framework", &echo).await;
    let status = answer.status();
    let events = read_events(answer, None).await;
    assert_eq!(status, 200, "{framework:?}: the client's own state, sent back as it holds it ({held}), was refused");
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{}", ending(&events));
    judged(&events, &echo, "the run that echoes the state").await;

    // The client changes `theme`: it is checked, kept and sent upstream, and the agent reads it.
    let mut state = client_state(&held, &events);
    state["theme"] = json!("dark");
    let changed = next_run(&app, &thread, "run-3", "what state", state).await;
    let events = app.run_to_end("framework", &changed).await;
    assert_eq!(text(&events), "State seen: theme=dark", "{framework:?}: {:?}, {}", kinds(&events), ending(&events));
    judged(&events, &changed, "the run that changes the state").await;
    let sent = server.requests_for(&thread).await;
    assert_eq!(sent.last().expect("a request")["state"]["theme"], "dark", "the edited key goes upstream");
}

/// The framework's own human-in-the-loop for its tool `send_report` (ADK: `require_confirmation`
/// with `emit_interrupt_outcome`; Agent Framework: `approval_mode="always_require"`; Strands:
/// `ToolBehavior(interrupt_on_call=True)`; CrewAI: a `@human_feedback` flow step; Pydantic AI:
/// `requires_approval=True`) becomes a gateway interrupt; the person's decision goes back as the
/// framework reads it. Approved, the tool runs once and the agent answers from its result; denied (`{"approved": false}`, or
/// CrewAI's `"rejected"`), the tool never runs — the server records every run of it — and no
/// result says it did: a denial never goes upstream as an empty `resolved`.
async fn a_confirmation_is_decided_through_the_gateway(framework: Framework, backend: Backend, approve: bool) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique(if approve { "th-fw-approve" } else { "th-fw-deny" });
    let to = format!("{thread}@example.com");
    let input = first_run(&thread, "run-1", &format!("send the report to {to}"));
    let first = app.run_to_end("framework", &input).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{framework:?}: {:?}, {}", kinds(&first), ending(&first));
    assert_eq!(end["outcome"]["interrupts"].as_array().map(Vec::len), Some(1), "{end}");
    let interrupt = &end["outcome"]["interrupts"][0];
    let id = interrupt["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("int_"), "a gateway id: {id}");
    assert!(text(&first).starts_with("I will send it once approved."), "{:?}", text(&first));
    let call = first
        .iter()
        .find(|e| e.kind() == "TOOL_CALL_START" && e.data["toolCallName"] == "send_report")
        .expect("the call of send_report is shown");
    assert!(call.data["toolCallId"].as_str().is_some_and(|c| c.starts_with(&turn_of(&first))), "the gateway's id");
    if let Some(named) = interrupt["toolCallId"].as_str() {
        let shown = first.iter().any(|e| e.kind() == "TOOL_CALL_START" && e.data["toolCallId"] == named);
        assert!(shown, "the interrupt names a call the stream showed: {named}");
    }
    assert!(!kinds(&first).contains(&"TOOL_CALL_RESULT"), "the tool waits for the decision");
    assert_eq!(server.reports_sent_to(&to).await, 0, "nothing ran before the person decided");
    judged(&first, &input, "the run that asks").await;

    let decision = framework.decision(approve);
    let resume = json!({ "threadId": thread, "runId": "run-2", "messages": [],
                         "resume": [{ "interruptId": id, "status": "resolved", "payload": decision }] });
    let resumed = app.run_to_end("framework", &resume).await;
    let sent = server.requests_for(&thread).await;
    let forwarded = &sent.last().expect("the decision went upstream")["resume"][0];
    let results: Vec<String> =
        resumed.iter().filter(|e| e.kind() == "TOOL_CALL_RESULT").map(|e| e.data["content"].to_string()).collect();
    if approve {
        assert_eq!(forwarded["status"], "resolved", "{forwarded}");
        assert_eq!(server.reports_sent_to(&to).await, 1, "the approved tool ran once");
        if framework.streams_tool_results() {
            assert!(results.iter().any(|r| r.contains(&format!("sent to {to}"))), "the tool's result: {results:?}");
        }
        assert!(
            text(&resumed).ends_with(&format!("Report sent to {to}.")),
            "{:?}, {}",
            text(&resumed),
            ending(&resumed)
        );
    } else {
        assert!(
            forwarded["status"] == "cancelled" || forwarded["payload"] == decision,
            "a denial goes upstream as a denial, never an empty `resolved`: {forwarded}"
        );
        assert_eq!(server.reports_sent_to(&to).await, 0, "{framework:?}: the person said no, and the tool ran");
        assert!(!results.iter().any(|r| r.contains("sent to")), "no result says it ran: {results:?}");
        assert!(!text(&resumed).contains("Report sent"), "{:?}", text(&resumed));
    }
    let outcome = &resumed.last().expect("end").data["outcome"];
    assert_eq!(outcome["type"], "success", "{framework:?}: {:?}, {}", kinds(&resumed), ending(&resumed));
    assert_eq!(app.counts().await.turns, 1, "the decision continued the same turn");
    judged(&resumed, &resume, "the run after the decision").await;
}

async fn an_approval_runs_the_tool(framework: Framework, backend: Backend) {
    a_confirmation_is_decided_through_the_gateway(framework, backend, true).await
}

async fn a_denial_never_runs_the_tool(framework: Framework, backend: Backend) {
    a_confirmation_is_decided_through_the_gateway(framework, backend, false).await
}

/// The framework's slow answer: `w0` … `w39`.
fn slow_answer() -> String {
    (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// The instance relaying the framework's answer is killed (SIGKILL) in the middle of it; another
/// instance on the same database takes the turn over and finishes it honestly: either the whole
/// answer arrives (no message shows a word twice) and the turn succeeds, or the turn ends
/// `RUN_ERROR` `failed` saying why — never `success` with the answer cut (issue 37, item 4: a
/// framework that keeps its own session, as ADK does, answers a re-run of a conversation it has
/// already seen with nothing). The joined stream has no gap and passes the official client.
async fn a_killed_instance_s_turn_is_finished_honestly(framework: Framework) {
    let server = FrameworkServer::of(framework);
    let mut pair = TwoInstances::start("framework", &format!("[[agents]]{}", agent_toml(server))).await;
    let input = first_run(&unique("th-fw-takeover"), "run-1", "tell me slowly");
    let mut stream = pair.open_on_a(&input).await;
    stream
        .until("the framework's answer, relayed by A", |e| {
            e.kind() == "TEXT_MESSAGE_CONTENT" && e.data["delta"].as_str().is_some_and(|d| d.trim() == "w5")
        })
        .await;
    let head = stream.events.clone();
    pair.kill_a();
    let joined = pair.follow_on_b(&input, head).await;
    let whole = slow_answer();
    let texts: Vec<String> = texts_by_message(&joined).into_iter().map(|(_, text)| text).collect();
    for shown in &texts {
        assert!(whole.starts_with(shown.as_str()), "{framework:?}: a message shows its words once: {shown:?}");
    }
    let end = &joined.last().expect("end").data;
    match end["type"].as_str() {
        Some("RUN_FINISHED") => {
            assert_eq!(end["outcome"]["type"], "success", "{end}");
            assert_eq!(
                texts.last().map(String::as_str),
                Some(whole.as_str()),
                "{framework:?}: the turn ended `success`, so the answer must be whole: {texts:?}"
            );
        }
        Some("RUN_ERROR") => {
            assert_eq!(end["code"], "failed", "{end}");
            assert!(end["message"].as_str().is_some_and(|m| !m.is_empty()), "it says why: {end}");
        }
        _ => panic!("{framework:?}: the turn did not end: {:?}", kinds(&joined)),
    }
    judged(&joined, &input, "the joined stream").await;
}

/// How a framework's confirmation is ended: by the person in a resume (a yes, a no in the
/// framework's terms, a yes under an alias its schema lists, `cancelled`), out of band (the
/// decision route's `cancelled`, `agui-gateway decide` without `--approve`), or by its expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Approve,
    ApproveByAlias,
    DenyByPayload,
    Cancelled,
    RouteDeny,
    CliDeny,
    Expiry,
}

impl Ending {
    fn approves(self) -> bool {
        matches!(self, Ending::Approve | Ending::ApproveByAlias)
    }

    /// What the agent's table has besides, for this ending.
    fn extra(self) -> &'static str {
        match self {
            Ending::Expiry => "interrupt_ttl_secs = 1",
            _ => "",
        }
    }
}

/// Asks the framework's agent to send the report to an address of `thread`'s own; returns the
/// first run's events, the interrupt's id and the address.
async fn until_the_framework_asks(app: &TestApp, thread: &str) -> (Vec<SseEvent>, Value, String, String) {
    let to = format!("{thread}@example.com");
    let input = first_run(thread, "run-1", &format!("send the report to {to}"));
    let first = app.run_to_end("framework", &input).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}, {}", kinds(&first), ending(&first));
    let id = end["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt id").to_string();
    (first, input, id, to)
}

/// The audit row of how `interrupt` ended: its decision as the trail holds it.
async fn audited_decision(app: &TestApp, interrupt: &str) -> Value {
    let rows = app.store.audit_rows(Some("default"), 0, 1000).await.expect("the audit trail");
    rows.iter()
        .filter(|row| row.entry.action == "interrupt.decide" || row.entry.action == "interrupt.expire")
        .filter_map(|row| serde_json::from_str::<Value>(&row.entry.detail).ok())
        .map(|detail| detail["decision"].clone())
        .find(|decision| decision["interruptId"] == interrupt)
        .unwrap_or_else(|| panic!("no audit row decides {interrupt}"))
}

/// One meaning per decision (§5.3, §9.3): however the framework's confirmation of its tool
/// `send_report` ends, what the person (or the clock) decided is what every party is told —
/// the framework's own tool log (ran once, or never), the upstream's `resume` body (the
/// decision in the framework's terms: its boolean key set, or CrewAI's refusal option; never an
/// empty `resolved`, never a `cancelled` it may take as its first option), the stream's
/// `gateway.resume`, the decision route's or the command's answer, and the audit row. The run
/// after the decision is judged by the official client.
async fn a_decision_means_one_thing_everywhere(framework: Framework, backend: Backend, how: Ending) {
    let db = TestDatabase::new(backend).await;
    let extra = format!("{}\n{}", framework.settings(), how.extra());
    let (app, server) = gateway_in_front_of_with(framework, &db, &extra).await;
    let thread = unique(&format!("th-fw-{how:?}").to_lowercase());
    let (_, _, id, to) = until_the_framework_asks(&app, &thread).await;
    // What a page that reloads holds: the conversation as the run that asked left it.
    let held = thread_messages(&app, &thread).await;
    let approve = how.approves();
    let entry = |status: &str, payload: Option<Value>| {
        let mut entry = json!({ "interruptId": id, "status": status });
        if let Some(payload) = payload {
            entry["payload"] = payload;
        }
        entry
    };
    let resumed = |entry: Value| json!({ "threadId": thread, "runId": "run-2", "messages": [], "resume": [entry] });
    let reload = json!({ "threadId": thread, "runId": "reload", "messages": held });
    let (input, told) = match how {
        Ending::Approve => (resumed(entry("resolved", Some(framework.decision(true)))), None),
        Ending::ApproveByAlias => (resumed(entry("resolved", Some(json!({ "accepted": true })))), None),
        Ending::DenyByPayload => (resumed(entry("resolved", Some(framework.decision(false)))), None),
        Ending::Cancelled => (resumed(entry("cancelled", None)), None),
        Ending::RouteDeny => {
            let answer = app
                .post_json(&format!("/v1/interrupts/{id}/decision"), json!({"status": "cancelled"}).to_string())
                .await;
            assert_eq!(answer.status(), 200, "the decision route");
            (reload, Some(answer.json::<Value>().await.expect("JSON")))
        }
        Ending::CliDeny => {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
                .args(["decide", "--database", &db.url, "--as", "local", &id])
                .output()
                .await
                .expect("the command runs");
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            (reload, Some(serde_json::from_slice(&output.stdout).expect("the command answers JSON")))
        }
        Ending::Expiry => {
            wait_until(PATIENCE, "the interrupt to expire", || async {
                let status: Value = app.get_json(&format!("/v1/threads/{thread}")).await;
                status["status"] != "waiting"
            })
            .await;
            (reload, None)
        }
    };
    if let Some(told) = &told {
        assert_eq!(told["outcome"], "decided", "{told}");
        assert_eq!(told["approved"], json!(approve), "{how:?}: the answer to the decider: {told}");
    }
    let events = app.run_to_end("framework", &input).await;
    app.wait_thread_turns_ended(&thread).await;
    let outcome = &events.last().expect("end").data["outcome"];
    assert_eq!(outcome["type"], "success", "{framework:?} {how:?}: {:?}, {}", kinds(&events), ending(&events));
    // The framework's own record says whether the tool ran.
    let ran = server.reports_sent_to(&to).await;
    assert_eq!(ran, usize::from(approve), "{framework:?} {how:?}: the framework ran send_report {ran} times");
    assert_eq!(text(&events).contains("Report sent"), approve, "{:?}", text(&events));
    // The upstream was told the same, in its own terms.
    let sent = server.requests_for(&thread).await;
    assert_eq!(sent.len(), 2, "one upstream run to ask, one with the decision");
    let forwarded = &sent[1]["resume"][0];
    let payload = &forwarded["payload"];
    let said = || DECISION_KEYS.iter().filter_map(|key| payload[*key].as_bool()).collect::<Vec<_>>();
    match (framework, approve) {
        (Framework::CrewAi, yes) => {
            assert_eq!(forwarded["status"], "resolved", "{how:?}: {forwarded}");
            let option = if yes { "approved" } else { "rejected" };
            assert_eq!(payload, &json!(option), "CrewAI's own option (its refusal for a no)");
        }
        // ADK's confirmation has no schema: its "no" is AG-UI's, `cancelled` (with the person's
        // `approved: false` where they sent it), which ADK reads as `confirmed: false`.
        (Framework::Adk, false) => {
            assert_eq!(forwarded["status"], "cancelled", "{how:?}: {forwarded}");
            assert!(payload.is_null() || said() == [false], "{how:?}: {forwarded}");
        }
        (_, yes) => {
            assert_eq!(forwarded["status"], "resolved", "{framework:?} {how:?}: {forwarded}");
            assert!(!said().is_empty() && said().iter().all(|s| *s == yes), "{framework:?} {how:?}: {payload}");
        }
    }
    // The stream and the audit trail say it too.
    let shown: Vec<&Value> = events
        .iter()
        .filter(|e| e.kind() == "CUSTOM" && e.data["name"] == "gateway.resume" && e.data["value"]["interruptId"] == id)
        .map(|e| &e.data["value"])
        .collect();
    if matches!(how, Ending::Approve | Ending::ApproveByAlias | Ending::DenyByPayload | Ending::Cancelled) {
        assert_eq!(shown.len(), 1, "the resume says what it decided: {:?}", kinds(&events));
    }
    for decision in shown {
        assert_eq!(decision["approved"], json!(approve), "{how:?}: gateway.resume {decision}");
    }
    let audited = audited_decision(&app, &id).await;
    assert_eq!(audited["approved"], json!(approve), "{framework:?} {how:?}: the audit row {audited}");
    judged(&events, &input, "the run after the decision").await;
}

/// A payload whose meaning is not certain — a non-boolean `approved`, a comment alone, an empty
/// object, an option the framework does not offer — is refused `invalid_resume`, saying what to
/// send, and decides nothing: the interrupt stays open, nothing goes upstream, the tool never
/// runs. (ADK's confirmation gives no `responseSchema`, so only the gateway's reading of the
/// payload stands between these and an email sent.)
async fn an_unclear_payload_decides_nothing(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-unclear");
    let (_, _, id, to) = until_the_framework_asks(&app, &thread).await;
    let unclear = match framework {
        Framework::CrewAi => vec![json!("maybe"), json!({ "approved": "no" }), json!({})],
        _ => vec![json!({ "approved": "no" }), json!({ "comment": "please do not" }), json!({})],
    };
    for payload in unclear {
        let resume = json!({ "threadId": thread, "runId": unique("run"), "messages": [],
                             "resume": [{ "interruptId": id, "status": "resolved", "payload": payload }] });
        let events = app.run_to_end("framework", &resume).await;
        let end = &events.last().expect("end").data;
        assert_eq!(end["code"], "invalid_resume", "{framework:?} {payload}: {:?}, {}", kinds(&events), ending(&events));
        let message = end["message"].as_str().unwrap_or_default();
        assert!(message.contains(&id), "the refusal names the entry: {message}");
        if framework == Framework::Adk {
            assert!(message.contains("approved: true or false"), "it says what to send: {message}");
        }
        let status: Value = app.get_json(&format!("/v1/threads/{thread}")).await;
        assert_eq!(status["status"], "waiting", "{payload}: nothing was decided");
    }
    assert_eq!(server.requests_for(&thread).await.len(), 1, "nothing went upstream");
    assert_eq!(server.reports_sent_to(&to).await, 0, "the tool never ran");
    let rows = app.store.audit_rows(Some("default"), 0, 1000).await.expect("the audit trail");
    assert!(!rows.iter().any(|row| row.entry.action == "interrupt.decide"), "no decision is on the trail");
}

/// CrewAI's `@human_feedback` lists its outcomes and takes a `cancelled` as its default outcome
/// or else its first option — here "approved". An agent that names no `deny_option` has no way
/// to tell it "no": a denial does not resume the flow at all, the turn ends `cancelled` with a
/// message saying why, and the email is never sent.
async fn a_no_crewai_cannot_hear_ends_the_turn_and_never_runs_the_tool(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of_with(Framework::CrewAi, &db, "").await;
    let thread = unique("th-fw-no-refusal");
    let (_, _, id, to) = until_the_framework_asks(&app, &thread).await;
    let resume = json!({ "threadId": thread, "runId": "run-2", "messages": [],
                         "resume": [{ "interruptId": id, "status": "cancelled" }] });
    let events = app.run_to_end("framework", &resume).await;
    let outcome = &events.last().expect("end").data["outcome"];
    assert_eq!(outcome["type"], "cancelled", "{:?}, {}", kinds(&events), ending(&events));
    assert!(text(&events).contains("deny_option"), "the turn says why: {:?}", text(&events));
    app.wait_thread_turns_ended(&thread).await;
    assert_eq!(server.requests_for(&thread).await.len(), 1, "the flow was not resumed");
    assert_eq!(server.reports_sent_to(&to).await, 0, "the person said no, and the tool never ran");
    judged(&events, &resume, "the run that could not say no").await;
}

/// A regenerate and an edit, relayed to the framework (§6, §9.3): each is a branch the
/// framework has not seen, and it answers it — behind a framework that keeps its own session
/// per thread (ADK has seen that user message id, and would answer nothing), the branch runs
/// in an upstream thread of its own, given the branch's conversation. Never `success` with
/// nothing said; the official client judges each run.
async fn a_regenerate_and_an_edit_are_answered(framework: Framework, backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, server) = gateway_in_front_of(framework, &db).await;
    let thread = unique("th-fw-branch");
    let first = app.run_to_end("framework", &first_run(&thread, "run-1", "hello there")).await;
    assert_eq!(text(&first), "You said: hello there", "{:?}, {}", kinds(&first), ending(&first));
    // What a Regenerate button sends — the same user message under its id, the answer left
    // out — and an edit: the same message id with other words.
    for (run, words, what) in [("run-2", "hello there", "the regenerate"), ("run-3", "edited words", "the edit")] {
        let mut input = first_run(&thread, run, words);
        input["messages"][0]["id"] = json!("run-1-user");
        let events = app.run_to_end("framework", &input).await;
        let outcome = &events.last().expect("end").data["outcome"];
        assert_eq!(outcome["type"], "success", "{framework:?} {what}: {:?}, {}", kinds(&events), ending(&events));
        assert_eq!(text(&events), format!("You said: {words}"), "{framework:?}: {what} is answered");
        judged(&events, &input, what).await;
    }
    // Each branch went to an upstream thread the others had not used.
    let threads: Vec<String> = server
        .requests_for(&thread)
        .await
        .iter()
        .filter_map(|request| request["threadId"].as_str().map(str::to_string))
        .collect();
    assert_eq!(threads.len(), 3, "{threads:?}");
    assert!(threads[0] != threads[1] && threads[1] != threads[2] && threads[0] != threads[2], "{threads:?}");
    // A turn after the regenerate goes on in its branch's upstream thread.
    let mut next = next_run(&app, &thread, "run-4", "and again", json!({})).await;
    next["state"] = json!({});
    let followed = app.run_to_end("framework", &next).await;
    assert_eq!(text(&followed), "You said: and again", "{:?}, {}", kinds(&followed), ending(&followed));
    let sent = server.requests_for(&thread).await;
    assert_eq!(sent.last().expect("a request")["threadId"], json!(threads[2]), "the branch keeps its upstream thread");
}

/// `scenario(Framework::X, backend)` as the tests `scenario::x::{sqlite, postgres}`, one pair per
/// framework named.
macro_rules! on_frameworks_and_stores {
    ($scenario:ident: $($module:ident => $framework:ident),+ $(,)?) => {
        mod $scenario {
            $(
                mod $module {
                    use crate::helpers::Backend;
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn sqlite() {
                        super::super::$scenario(super::super::Framework::$framework, Backend::Sqlite).await
                    }
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn postgres() {
                        super::super::$scenario(super::super::Framework::$framework, Backend::Postgres).await
                    }
                }
            )+
        }
    };
}

/// The scenarios every framework's adapter supports.
macro_rules! on_every_framework_and_store {
    ($scenario:ident) => {
        on_frameworks_and_stores!($scenario:
            langgraph => LangGraph, mastra => Mastra, adk => Adk,
            agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi);
    };
}

on_every_framework_and_store!(a_text_answer_is_relayed);
on_every_framework_and_store!(a_frontend_tool_round_trip_continues_the_turn);
on_every_framework_and_store!(the_clients_context_reaches_the_agent);
on_every_framework_and_store!(a_cut_stream_continues_with_last_event_id);
on_every_framework_and_store!(a_regenerate_and_an_edit_are_answered);

// State, human-in-the-loop and takeover: the frameworks whose servers script them (LangGraph's
// `interrupt()` has its own scenario below; Mastra has no AG-UI interrupts).
on_frameworks_and_stores!(the_clients_state_reaches_the_agent_and_its_echo_is_taken:
    adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi);
// (CrewAI's interrupt asks for a plain string, "approved" or "rejected": it goes upstream as given.)
on_frameworks_and_stores!(an_approval_runs_the_tool:
    adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi);
on_frameworks_and_stores!(a_denial_never_runs_the_tool:
    adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi);

/// Two instances share one PostgreSQL database: the takeover runs there only.
mod a_killed_instance_s_turn_is_finished_honestly {
    use super::Framework;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adk() {
        super::a_killed_instance_s_turn_is_finished_honestly(Framework::Adk).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agent_framework() {
        super::a_killed_instance_s_turn_is_finished_honestly(Framework::AgentFramework).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strands() {
        super::a_killed_instance_s_turn_is_finished_honestly(Framework::Strands).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crewai() {
        super::a_killed_instance_s_turn_is_finished_honestly(Framework::CrewAi).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pydantic_ai() {
        super::a_killed_instance_s_turn_is_finished_honestly(Framework::PydanticAi).await
    }
}

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

/// `$scenario(Framework::X, backend, Ending::Y)` as `$scenario::y::x::{sqlite, postgres}`.
macro_rules! on_endings {
    ($scenario:ident: $($ending:ident => $how:ident [$($module:ident => $framework:ident),+]),+ $(,)?) => {
        mod $scenario {
            $(
                mod $ending {
                    $(
                        mod $module {
                            use crate::frameworks::{$scenario, Ending, Framework};
                            use crate::helpers::Backend;
                            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                            async fn sqlite() {
                                $scenario(Framework::$framework, Backend::Sqlite, Ending::$how).await
                            }
                            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                            async fn postgres() {
                                $scenario(Framework::$framework, Backend::Postgres, Ending::$how).await
                            }
                        }
                    )+
                }
            )+
        }
    };
}

// Every way a decision is made, behind each framework whose server scripts a confirmation of
// `send_report` (LangGraph's `interrupt()` has its own scenario; Mastra has no AG-UI interrupts).
on_endings!(a_decision_means_one_thing_everywhere:
    approve => Approve [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
    approve_by_alias => ApproveByAlias [agent_framework => AgentFramework],
    deny_by_payload => DenyByPayload [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
    cancelled => Cancelled [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
    route_deny => RouteDeny [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
    cli_deny => CliDeny [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
    expiry => Expiry [adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi],
);

on_frameworks_and_stores!(an_unclear_payload_decides_nothing:
    adk => Adk, agent_framework => AgentFramework, strands => Strands, crewai => CrewAi, pydantic_ai => PydanticAi);

mod a_no_crewai_cannot_hear_ends_the_turn_and_never_runs_the_tool {
    use crate::helpers::Backend;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_no_crewai_cannot_hear_ends_the_turn_and_never_runs_the_tool(Backend::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::a_no_crewai_cannot_hear_ends_the_turn_and_never_runs_the_tool(Backend::Postgres).await
    }
}
