//! A cancel stops whatever the turn is doing, at once (SPEC §4.1): a model's streamed answer
//! (the model sees its request closed), an upstream's run (its connection closed), an HTTP or
//! MCP tool call in flight, a delegated child's answer, a wait on people — on the instance that
//! runs the turn or from another one. The turn ends `cancelled` with what was said kept and
//! closed, and an accepted cancel is never followed by `succeeded`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::copilotkit_runtime::{base, post_stream, send_json};
use crate::fakes::model::{plan, slow_text, slowly, ScriptedModel};
use crate::fakes::tools::start_stalled_tool;
use crate::helpers::*;
use crate::mcp::McpServer;
use crate::on_both_stores;
use crate::upstream::{gateway_in_front_of, upstream_of, Upstream};

/// Words in a slow answer, and the pause between two: the answer takes ten seconds, so a cancel
/// that waited for it to end would be seen.
const WORDS: usize = 200;
const GAP: Duration = Duration::from_millis(50);

/// A model that answers every request slowly ([`slowly`]).
async fn slow_model() -> ScriptedModel {
    ScriptedModel::start(|_, _| slowly(WORDS, GAP)).await
}

/// A gateway with the agent `chat` on `model`.
async fn gateway_on(model: &ScriptedModel, db: &TestDatabase) -> TestApp {
    let mut config = test_config(&db.url);
    config.agents.push(model.agent("chat", ""));
    TestApp::start_with(config).await
}

/// Posts the cancel of `thread` on `app`: `202 cancelling`.
async fn cancel(app: &TestApp, thread: &str) {
    let answer = app.client.post(app.url(&format!("/v1/threads/{thread}/cancel"))).send().await.expect("cancel");
    assert_eq!(answer.status(), 202, "the cancel is accepted");
    let body: Value = answer.json().await.expect("JSON");
    assert_eq!(body["status"], "cancelling");
}

/// The status the thread's latest turn has in the store.
async fn turn_status(app: &TestApp, thread: &str) -> String {
    let row = app.store.find_thread("default", thread).await.expect("query").expect("thread");
    let turns = app.store.thread_turns(row.pk).await.expect("turns");
    turns.last().expect("a turn").status.as_str().to_string()
}

/// Checks how a cancelled run ended: `RUN_FINISHED cancelled` last, every message it started
/// ended before it, and no other end.
fn assert_cancelled(events: &[SseEvent]) {
    let kinds = kinds(events);
    let end = events.last().expect("events");
    assert_eq!(end.kind(), "RUN_FINISHED", "{kinds:?}");
    assert_eq!(end.data["outcome"], json!({"type": "cancelled"}), "{}", end.data);
    let ends = kinds.iter().filter(|k| ["RUN_FINISHED", "RUN_ERROR"].contains(k)).count();
    assert_eq!(ends, 1, "one end: {kinds:?}");
    let started = kinds.iter().filter(|k| **k == "TEXT_MESSAGE_START").count();
    let ended = kinds.iter().filter(|k| **k == "TEXT_MESSAGE_END").count();
    assert_eq!(started, ended, "what was said is closed: {kinds:?}");
}

/// A cancel in the middle of a model's streamed answer ends the turn there: the model's request
/// is closed, the words said so far stay (closed), and the run passes the official client.
async fn a_cancel_ends_a_streaming_model_answer_mid_sentence(backend: Backend) {
    let model = slow_model().await;
    let db = TestDatabase::new(backend).await;
    let app = gateway_on(&model, &db).await;
    let input = first_run("th-cut-llm", "run-1", "tell me a long story");
    let mut stream = EventStream::new(app.post_run("chat", &input).await);
    stream.until("three words", |e| e.data["delta"] == "w3 ").await;
    let asked = Instant::now();
    cancel(&app, "th-cut-llm").await;
    let events = stream.rest().await;
    let took = asked.elapsed();
    assert_cancelled(&events);
    let said = text_of(&events);
    assert!(slow_text(WORDS).starts_with(&said) && said.len() < slow_text(WORDS).len() / 2, "cut short: {said}");
    model.until_cut(1).await;
    assert_eq!(model.calls(), 1, "the model was not asked again");
    assert_eq!(turn_status(&app, "th-cut-llm").await, "cancelled");
    // What was said is the thread's: the messages route holds it as it was cut.
    let messages: Value = app.get_json("/v1/threads/th-cut-llm/messages").await;
    let answer = messages["messages"].as_array().expect("messages").last().cloned().expect("the answer");
    assert_eq!(answer["content"], said.as_str());
    eprintln!("a cancel ended the model's answer {took:?} after it was asked");
    let (ok, report) = agui_check(&app.run_url("chat"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_cancel_ends_a_streaming_model_answer_mid_sentence);

/// CopilotKit's Stop is the same cancel: an `openai` answer ends mid-sentence, `cancelled`.
async fn copilotkits_stop_ends_a_streaming_model_answer(backend: Backend) {
    let model = slow_model().await;
    let db = TestDatabase::new(backend).await;
    let app = gateway_on(&model, &db).await;
    let input = first_run("th-ck-cut", "run-1", "tell me a long story");
    let response = post_stream(&app, &format!("{}/agent/chat/run", base("default")), &input, None).await;
    let mut stream = EventStream::new(response);
    stream.until("three words", |e| e.data["delta"] == "w3 ").await;
    let stop = format!("{}/agent/chat/stop/th-ck-cut", base("default"));
    let (status, answer) = send_json(&app, reqwest::Method::POST, &stop, &json!({"runId": "run-1"}), None).await;
    assert_eq!((status, &answer["stopped"]), (200, &json!(true)), "{answer}");
    let events = stream.rest().await;
    assert_cancelled(&events);
    assert!(text_of(&events).len() < slow_text(WORDS).len() / 2, "cut short: {}", text_of(&events));
    model.until_cut(1).await;
    assert_eq!(turn_status(&app, "th-ck-cut").await, "cancelled");
}
on_both_stores!(copilotkits_stop_ends_a_streaming_model_answer);

/// A cancel in the middle of an upstream's run closes the connection to the upstream (AG-UI's
/// only cancel) and ends the turn there.
async fn a_cancel_ends_an_upstream_run_and_closes_its_connection(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway_in_front_of(&server, "slow-words", &db).await;
    let input = first_run("th-cut-up", "run-1", "go on");
    let mut stream = EventStream::new(app.post_run("upstream", &input).await);
    stream.until("three words", |e| e.data["delta"] == "u3 ").await;
    cancel(&app, "th-cut-up").await;
    let events = stream.rest().await;
    assert_cancelled(&events);
    let said = text_of(&events);
    assert!(said.starts_with("u1 u2 u3 ") && !said.contains("u50 "), "cut short: {said}");
    wait_until(PATIENCE, "the upstream to see its request closed", || async {
        server.requests().await.iter().any(|r| r["path"] == "/agents/slow-words" && r["closedByClient"] == true)
    })
    .await;
    assert_eq!(turn_status(&app, "th-cut-up").await, "cancelled");
    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_cancel_ends_an_upstream_run_and_closes_its_connection);

/// A cancel while an HTTP tool hangs closes the tool's request; the call gets a result saying
/// the turn was cancelled, so the next turn's model is given a whole conversation.
async fn a_cancel_stops_a_hanging_http_tool_call(backend: Backend) {
    let model = ScriptedModel::planned(vec![("look_up", json!({"account": "A-1"}))], "Looked up.").await;
    let (tool_url, counts) = start_stalled_tool().await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    let tool = format!(
        "[[tools]]\nname = \"look_up\"\nurl = \"{tool_url}\"\ntimeout_secs = 60\n\
         parameters = {{ type = \"object\", properties = {{ account = {{ type = \"string\" }} }} }}\n"
    );
    config.agents.push(model.agent("chat", &tool));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-cut-tool", "run-1", "look A-1 up");
    let response = app.post_run("chat", &input).await;
    let reader = tokio::spawn(read_events(response, None));
    let called = counts.called.clone();
    wait_until(PATIENCE, "the tool to be called", || {
        let called = called.clone();
        async move { called.load(std::sync::atomic::Ordering::SeqCst) == 1 }
    })
    .await;
    cancel(&app, "th-cut-tool").await;
    let events = tokio::time::timeout(PATIENCE, reader).await.expect("the stream ends").expect("reader");
    assert_cancelled(&events);
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert!(result.data["content"].as_str().is_some_and(|c| c.contains("cancelled")), "{}", result.data);
    let closed = counts.closed.clone();
    wait_until(PATIENCE, "the tool's request to be closed", || {
        let closed = closed.clone();
        async move { closed.load(std::sync::atomic::Ordering::SeqCst) == 1 }
    })
    .await;
    assert_eq!(turn_status(&app, "th-cut-tool").await, "cancelled");
    // The next turn: the model reads the cut call with its result, then the new message.
    let history: Value = app.get_json("/v1/threads/th-cut-tool/messages").await;
    let mut messages = history["messages"].as_array().expect("messages").clone();
    messages.push(json!({"id": "run-2-user", "role": "user", "content": "never mind"}));
    let next_input = json!({"threadId": "th-cut-tool", "runId": "run-2", "protocolVersion": "1.0", "state": {},
                            "messages": messages, "tools": [], "context": []});
    let next = app.run_to_end("chat", &next_input).await;
    assert_eq!(next.last().expect("end").data["outcome"]["type"], "success", "{:?}", next.last());
    let requests = model.requests();
    let messages = requests.last().expect("a request")["messages"].as_array().expect("messages").clone();
    let tool_message = messages.iter().find(|m| m["role"] == "tool").expect("the cut call's result");
    assert!(tool_message["content"].as_str().is_some_and(|c| c.contains("cancelled")), "{tool_message}");
    assert_eq!(counts.called.load(std::sync::atomic::Ordering::SeqCst), 1, "the tool was not called again");
}
on_both_stores!(a_cancel_stops_a_hanging_http_tool_call);

/// A cancel while an MCP tool call runs cancels the call at the MCP server
/// (`notifications/cancelled`).
async fn a_cancel_stops_a_running_mcp_tool_call(backend: Backend) {
    let server = McpServer::start();
    let model = ScriptedModel::planned(vec![("calc__stall", json!({}))], "Done.").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    let calc = format!(
        "[[mcp_servers]]\nname = \"calc\"\nurl = \"{}/mcp\"\ntimeout_secs = 60\ntools = [\"stall\"]\n",
        server.url
    );
    config.agents.push(model.agent("chat", &calc));
    let app = TestApp::start_with(config).await;
    let response = app.post_run("chat", &first_run("th-cut-mcp", "run-1", "stall")).await;
    let reader = tokio::spawn(read_events(response, None));
    wait_until(PATIENCE, "the MCP server to get the call", || async {
        server.calls().await.iter().any(|c| c["tool"] == "stall")
    })
    .await;
    cancel(&app, "th-cut-mcp").await;
    let events = tokio::time::timeout(PATIENCE, reader).await.expect("the stream ends").expect("reader");
    assert_cancelled(&events);
    wait_until(PATIENCE, "the MCP server to see the call cancelled", || async {
        server.calls().await.iter().any(|c| c["tool"] == "stall" && c["cancelled"] == true)
    })
    .await;
    assert_eq!(turn_status(&app, "th-cut-mcp").await, "cancelled");
}
on_both_stores!(a_cancel_stops_a_running_mcp_tool_call);

/// A cancel while a delegated child answers ends the child's model call and the whole turn.
async fn a_cancel_reaches_a_delegated_childs_answer(backend: Backend) {
    let parent =
        ScriptedModel::start(plan(vec![("delegate", json!({"agent": "teller", "task": "a story"}))], "Told.")).await;
    let child = slow_model().await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(parent.agent("planner", "builtins = [\"delegate\"]\ndelegates = [\"teller\"]\n"));
    config.agents.push(child.agent("teller", ""));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-cut-child", "run-1", "have a story told");
    let mut stream = EventStream::new(app.post_run("planner", &input).await);
    stream.until("the child's three words", |e| e.data["delta"] == "w3 ").await;
    cancel(&app, "th-cut-child").await;
    let events = stream.rest().await;
    assert_cancelled(&events);
    assert!(text_of(&events).len() < slow_text(WORDS).len() / 2, "cut short: {}", text_of(&events));
    child.until_cut(1).await;
    assert_eq!(parent.calls(), 1, "the parent's model was not asked again");
    assert!(kinds(&events).contains(&"SUBAGENT_ERROR") || kinds(&events).contains(&"SUBAGENT_FINISHED"));
    assert_eq!(turn_status(&app, "th-cut-child").await, "cancelled");
    let (ok, report) = agui_check(&app.run_url("planner"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_cancel_reaches_a_delegated_childs_answer);

/// A turn that waits for a person is cancelled by the same route: its interrupt is withdrawn and
/// the turn ends `cancelled`.
async fn a_cancel_ends_a_waiting_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-cut-wait", "run-1", "mail the team");
    let events = app.run_to_end("approver", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "interrupt");
    cancel(&app, "th-cut-wait").await;
    wait_until(PATIENCE, "the waiting turn to end", || async { turn_status(&app, "th-cut-wait").await == "cancelled" })
        .await;
    let row = app.store.find_thread("default", "th-cut-wait").await.expect("query").expect("thread");
    let turn = app.store.thread_turns(row.pk).await.expect("turns").pop().expect("turn");
    let interrupts = app.store.turn_interrupts(turn.pk).await.expect("interrupts");
    assert!(!interrupts.is_empty() && interrupts.iter().all(|i| i.status.as_str() == "withdrawn"), "{interrupts:?}");
    let answer = app.client.post(app.url("/v1/threads/th-cut-wait/cancel")).send().await.expect("cancel");
    assert_eq!(answer.status(), 409, "nothing is left to cancel");
}
on_both_stores!(a_cancel_ends_a_waiting_turn);

/// A cancel sent to another instance reaches a model's answer streaming on the first.
// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn a_cancel_sent_to_another_instance_ends_a_streaming_answer() {
    let model = slow_model().await;
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = gateway_on(&model, &db).await;
    let b = gateway_on(&model, &db).await;
    let input = first_run("th-cut-far", "run-1", "tell me a long story");
    let mut stream = EventStream::new(a.post_run("chat", &input).await);
    stream.until("three words", |e| e.data["delta"] == "w3 ").await;
    let asked = Instant::now();
    cancel(&b, "th-cut-far").await;
    let events = stream.rest().await;
    eprintln!("a cancel from another instance ended the answer {:?} after it was asked", asked.elapsed());
    assert_cancelled(&events);
    assert!(text_of(&events).len() < slow_text(WORDS).len() / 2, "cut short: {}", text_of(&events));
    model.until_cut(1).await;
    assert_eq!(turn_status(&b, "th-cut-far").await, "cancelled");
}
