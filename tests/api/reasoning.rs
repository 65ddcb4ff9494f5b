//! Reasoning models through the `openai` agent: `delta.reasoning_content` and `delta.reasoning`
//! become `REASONING_*` events in order with the text and tool calls, the official client
//! accepts the stream, and the reasoning never goes back to the model nor into the thread's
//! messages. Against a scripted model speaking the chat-completions streaming format.

use std::sync::{Arc, Mutex};

use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;
use crate::openai::{openai_agent, start_tool};

const THINKING: [&str; 3] = ["The user wants ", "the weather.", "Paris, then."];
const SECOND_THOUGHT: &str = "Sunny it is.";

fn chunk(delta: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "scripted",
               "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    )
}

/// A reasoning model's answers: the first call thinks (`reasoning_content`), says a few words,
/// thinks again (`reasoning`, the other spelling) and calls the weather tool; the call after
/// the tool's result thinks and answers.
fn reasoning_answer(request: &Value) -> String {
    let results = request["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let mut body = String::new();
    if results == 0 {
        body.push_str(&chunk(json!({"role": "assistant", "reasoning_content": THINKING[0]})));
        body.push_str(&chunk(json!({"reasoning_content": THINKING[1]})));
        body.push_str(&chunk(json!({"content": "Let me check."})));
        body.push_str(&chunk(json!({"reasoning": THINKING[2]})));
        body.push_str(&chunk(json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":"}}]})));
        body.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]})));
    } else {
        // Empty reasoning and content fields, as some servers send, say nothing.
        body.push_str(&chunk(json!({"role": "assistant", "content": "", "reasoning_content": ""})));
        body.push_str(&chunk(json!({"reasoning": SECOND_THOUGHT, "content": null})));
        body.push_str(&chunk(json!({"content": "It is sunny."})));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

async fn start_reasoning_model() -> (String, Arc<Mutex<Vec<Value>>>) {
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorded = requests.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(request): Json<Value>| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().unwrap_or_else(|p| p.into_inner()).push(request.clone());
                ([("content-type", "text/event-stream")], reasoning_answer(&request))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, requests)
}

/// The events of the kinds that carry what the agent said, each with its id.
fn said(events: &[SseEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| ["REASONING_", "TEXT_MESSAGE_", "TOOL_CALL_"].iter().any(|p| e.kind().starts_with(p)))
        .map(|e| {
            let id = e.data["messageId"].as_str().or(e.data["toolCallId"].as_str()).unwrap_or("");
            let id = id.rsplit(':').next().unwrap_or("");
            format!("{} {id}", e.kind())
        })
        .collect()
}

async fn reasoning_streams_in_order_and_never_goes_back_to_the_model(backend: Backend) {
    let (model_url, requests) = start_reasoning_model().await;
    let (tool_url, tool_calls) = start_tool("sunny, 21 C").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model_url, &tool_url, "never"));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-think", "run-1", "weather in Paris?");
    let events = app.run_to_end("assistant", &input).await;
    assert_eq!(
        said(&events),
        [
            "REASONING_START reasoning1",
            "REASONING_MESSAGE_START thought1",
            "REASONING_MESSAGE_CONTENT thought1",
            "REASONING_MESSAGE_CONTENT thought1",
            // The answer begins: the thinking closes first.
            "REASONING_MESSAGE_END thought1",
            "REASONING_END reasoning1",
            "TEXT_MESSAGE_START m1",
            "TEXT_MESSAGE_CONTENT m1",
            // Thinking again, after some text, is a new span.
            "REASONING_START reasoning2",
            "REASONING_MESSAGE_START thought2",
            "REASONING_MESSAGE_CONTENT thought2",
            "REASONING_MESSAGE_END thought2",
            "REASONING_END reasoning2",
            "TOOL_CALL_START c1",
            "TOOL_CALL_ARGS c1",
            "TOOL_CALL_ARGS c1",
            "TEXT_MESSAGE_END m1",
            "TOOL_CALL_END c1",
            "TOOL_CALL_RESULT r1",
            "REASONING_START reasoning3",
            "REASONING_MESSAGE_START thought3",
            "REASONING_MESSAGE_CONTENT thought3",
            "REASONING_MESSAGE_END thought3",
            "REASONING_END reasoning3",
            "TEXT_MESSAGE_START m2",
            "TEXT_MESSAGE_CONTENT m2",
            "TEXT_MESSAGE_END m2",
        ]
    );
    let thoughts: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == "REASONING_MESSAGE_CONTENT")
        .filter_map(|e| e.data["delta"].as_str())
        .collect();
    assert_eq!(thoughts, [THINKING[0], THINKING[1], THINKING[2], SECOND_THOUGHT]);
    let started = events.iter().find(|e| e.kind() == "REASONING_MESSAGE_START").expect("a reasoning message");
    assert_eq!(started.data["role"], "reasoning");
    // The tool call belongs to the answer's text message, not to the reasoning before it.
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    assert!(call.data["parentMessageId"].as_str().is_some_and(|p| p.ends_with(":m1")), "{:?}", call.data);
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    assert_eq!(tool_calls.lock().expect("calls").clone(), vec![json!({"city": "Paris"})]);

    // The next model call gets the text and the call, and none of the thinking.
    let sent = requests.lock().expect("requests").clone();
    assert_eq!(sent.len(), 2);
    let holds_reasoning = |request: &Value| {
        let text = request["messages"].to_string();
        ["reasoning", "The user wants", "Paris, then", SECOND_THOUGHT].iter().any(|word| text.contains(word))
    };
    assert!(!holds_reasoning(&sent[1]), "{}", sent[1]["messages"]);
    let assistant = &sent[1]["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "Let me check.");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "get_weather");

    // The official client accepts the stream (a replay of the same run).
    let (passed, report) = agui_check(&app.run_url("assistant"), &input).await;
    assert!(passed, "{report}");

    // The thread's messages are the conversation: no reasoning there either.
    let body: Value =
        app.client.get(app.url("/v1/threads/th-think/messages")).send().await.expect("get").json().await.expect("json");
    let messages = body["messages"].as_array().expect("messages");
    assert!(messages.iter().all(|m| m["role"] != "reasoning"), "{messages:?}");
    assert!(!body.to_string().contains("The user wants"), "{body}");
    assert_eq!(messages.last().expect("answer")["content"], "It is sunny.");

    // A later turn is opened from the thread's record: still no reasoning for the model.
    let next = json!({"threadId": "th-think", "runId": "run-2", "protocolVersion": "1.0",
        "messages": messages.iter().cloned().chain([json!({"id": "u2", "role": "user", "content": "and tomorrow?"})]).collect::<Vec<_>>()});
    let later = app.run_to_end("assistant", &next).await;
    assert_eq!(later.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&later));
    let sent = requests.lock().expect("requests").clone();
    assert_eq!(sent.len(), 3);
    assert!(!holds_reasoning(&sent[2]), "{}", sent[2]["messages"]);
    assert!(sent[2]["messages"].to_string().contains("It is sunny."), "the earlier answer is there");
}
on_both_stores!(reasoning_streams_in_order_and_never_goes_back_to_the_model);

/// A model that thinks for ever on its first call (two reasoning deltas, then nothing), and
/// answers as [`reasoning_answer`] on the calls after.
async fn start_model_stuck_in_thought() -> (String, Arc<Mutex<Vec<Value>>>) {
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorded = requests.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(request): Json<Value>| {
            let recorded = recorded.clone();
            async move {
                let calls = {
                    let mut all = recorded.lock().unwrap_or_else(|p| p.into_inner());
                    all.push(request.clone());
                    all.len()
                };
                let body = if calls == 1 {
                    let head = [THINKING[0], THINKING[1]]
                        .map(|t| Ok::<_, std::convert::Infallible>(chunk(json!({"reasoning_content": t}))));
                    let stuck = futures_util::stream::iter(head).chain(futures_util::stream::pending());
                    axum::body::Body::from_stream(stuck)
                } else {
                    axum::body::Body::from(reasoning_answer(&request))
                };
                ([("content-type", "text/event-stream")], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, requests)
}

use futures_util::StreamExt;

/// SPEC §4.6 in the middle of a thought: the instance is killed (SIGKILL) while the model is
/// reasoning; the instance that takes the turn over closes the reasoning where the log stopped
/// and asks the model again, whose new reasoning is a new span. The whole turn passes the
/// official client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_killed_mid_reasoning_closes_it_and_thinks_again_elsewhere() {
    let (model_url, requests) = start_model_stuck_in_thought().await;
    let (tool_url, tool_calls) = start_tool("sunny").await;
    let db = TestDatabase::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[turns]
lease_ms = 2000
heartbeat_ms = 400
sweep_ms = 300

[[agents]]
name = "assistant"
kind = "openai"
base_url = "{model_url}"
model = "scripted"
request_timeout_secs = 60
[[agents.tools]]
name = "get_weather"
url = "{tool_url}"
"#
        ),
    )
    .expect("config");
    crate::gateway_process::migrate(&db.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut a = crate::gateway_process::spawn_instance(&config, &db.url, logs.clone());
    let b = crate::gateway_process::spawn_instance(&config, &db.url, logs.clone());
    let client = crate::tls_support::http_client().build().expect("client");
    let input = first_run("th-think-kill", "run-1", "weather in Paris?");
    let post = |address: &str, last_event_id: Option<String>| {
        let mut request = client
            .post(format!("http://{address}/v1/agui/agents/assistant"))
            .header("content-type", "application/json")
            .body(input.to_string());
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send()
    };
    let mut on_a = EventStream::new(post(&a.address, None).await.expect("run on A"));
    on_a.until("both reasoning deltas", |e| e.data["delta"] == THINKING[1]).await;
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    let head = on_a.rest().await;
    let last_id = head.last().and_then(|e| e.id.clone());
    let tail = tokio::time::timeout(
        std::time::Duration::from_secs(40),
        read_events(post(&b.address, last_id).await.expect("resume on B"), None),
    )
    .await
    .expect("B finished the turn");
    let mut joined = head;
    joined.extend(tail);
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let order = said(&joined);
    let cut = ["REASONING_MESSAGE_END thought1", "REASONING_END reasoning1", "REASONING_START reasoning2"];
    let at = order.iter().position(|e| e == cut[0]).unwrap_or_else(|| panic!("thought1 closed: {order:?}"));
    assert_eq!(order[at..at + 3], cut, "the cut thought is closed, then the model thinks anew: {order:?}");
    assert!(!order[..at].iter().any(|e| e.starts_with("TEXT_") || e.starts_with("TOOL_")), "{order:?}");
    assert_eq!(requests.lock().expect("requests").len(), 3, "the cut call was made again, then the one after the tool");
    assert_eq!(tool_calls.lock().expect("calls").len(), 1);
    let seqs: Vec<i64> = joined.iter().filter_map(|e| e.id.as_deref()?.rsplit('.').next()?.parse().ok()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gap, no duplicate");
    // The whole turn, replayed from B's log, passes the official client.
    let (passed, report) = agui_check(&format!("http://{}/v1/agui/agents/assistant", b.address), &input).await;
    assert!(passed, "{report}");
}
