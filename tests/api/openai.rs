//! The `openai` agent against a scripted OpenAI-compatible server speaking the real
//! chat-completions streaming wire format, with a real HTTP tool.

use serde_json::{json, Value};

use crate::fakes::chunks::{self, DONE};
use crate::fakes::model::{assistant_toml, busy_first, hanging_on_call, plan, Reply, ScriptedModel};
use crate::fakes::tools::start_tool;
use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;
use crate::on_both_stores;

pub fn openai_agent(model_url: &str, tool_url: &str, approval: &str) -> agui_gateway::config::AgentConfig {
    let more = format!(
        r#"
system_prompt = "You are terse."
[[tools]]
name = "get_weather"
url = "{tool_url}"
parameters = {{ type = "object", properties = {{ city = {{ type = "string" }} }}, required = ["city"] }}
approval = "{approval}"
"#
    );
    toml::from_str(&assistant_toml(model_url, &more)).expect("agent config")
}

// One store: what is checked is the model's and the tool's wire.
#[tokio::test]
async fn the_model_streams_text_and_calls_a_tool_and_usage_is_reported() {
    let model = ScriptedModel::planned(vec![("get_weather", json!({"city": "Paris"}))], "It is sunny in Paris.").await;
    let (tool_url, tool_calls) = start_tool("sunny, 21 C").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model.url, &tool_url, "never"));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-llm", "run-1", "weather in Paris?");
    let events = app.run_to_end("assistant", &input).await;
    let kinds = kinds(&events);
    for expected in ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"] {
        assert!(kinds.contains(&expected), "{expected} in {kinds:?}");
    }
    let args: String = deltas(&events, "TOOL_CALL_ARGS");
    assert_eq!(args, r#"{"city":"Paris"}"#);
    assert_eq!(
        events.iter().filter(|e| e.kind() == "TOOL_CALL_ARGS").count(),
        2,
        "argument deltas stream as they arrive"
    );
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("result");
    assert_eq!(result.data["content"], "sunny, 21 C");
    let text: String = text_of(&events);
    assert_eq!(text, "It is sunny in Paris.");
    let finished = events.last().expect("end");
    assert_eq!(finished.data["usage"][0]["inputTokens"], 24);
    assert_eq!(finished.data["usage"][0]["outputTokens"], 10);
    assert_eq!(tool_calls.lock().expect("calls").clone(), vec![json!({"city": "Paris"})]);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["messages"][0], json!({"role": "system", "content": "You are terse."}));
    assert_eq!(requests[1]["messages"].as_array().expect("messages").last().expect("tool")["content"], "sunny, 21 C");
    let (passed, report) = agui_check(&app.run_url("assistant"), &input).await;
    assert!(passed, "{report}");
}

async fn a_tool_under_approval_waits_and_runs_once_approved(backend: Backend) {
    let model = ScriptedModel::planned(vec![("get_weather", json!({"city": "Oslo"}))], "Cold in Oslo.").await;
    let (tool_url, tool_calls) = start_tool("snow").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model.url, &tool_url, "always"));
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("assistant", &first_run("th-llm-approve", "run-1", "Oslo?")).await;
    let last = events.last().expect("end");
    assert_eq!(last.data["outcome"]["type"], "interrupt");
    assert!(tool_calls.lock().expect("calls").is_empty(), "nothing ran before the approval");
    let id = last.data["outcome"]["interrupts"][0]["id"].as_str().expect("id");
    let resumed = app
        .run_to_end(
            "assistant",
            &json!({"threadId": "th-llm-approve", "runId": "run-2", "messages": [],
                    "resume": [{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]}),
        )
        .await;
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success");
    assert_eq!(tool_calls.lock().expect("calls").len(), 1);
    assert_eq!(model.calls(), 2, "the model was not asked again for the call");
}
on_both_stores!(a_tool_under_approval_waits_and_runs_once_approved);

/// SPEC §4.6 with a real agent: the instance running an LLM turn is killed (SIGKILL) between
/// two tool calls; another instance takes the turn over from its checkpoint and finishes it,
/// and each tool call reached the tool exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_turn_killed_between_two_tool_calls_is_finished_elsewhere_without_repeating_one() {
    // The second model call (after the first tool result) hangs, so A is killed inside it.
    let model = ScriptedModel::start(hanging_on_call(
        2,
        plan(
            vec![("get_weather", json!({"city": "Paris"})), ("get_weather", json!({"city": "Rome"}))],
            "Paris and Rome are sunny.",
        ),
    ))
    .await;
    let (tool_url, tool_calls) = start_tool("sunny").await;
    let tool = format!("request_timeout_secs = 60\n[[agents.tools]]\nname = \"get_weather\"\nurl = \"{tool_url}\"\n");
    let mut two = TwoInstances::start("assistant", &model.agents_table(&tool)).await;
    let input = first_run("th-llm-kill", "run-1", "weather in two cities");
    let reader = tokio::spawn(two.open_on_a(&input).await.rest());
    // Wait until the first call ran and the model is thinking about the second.
    wait_until(std::time::Duration::from_secs(20), "the turn to reach its second model call", || {
        let calls = model.calls();
        async move { calls >= 2 }
    })
    .await;
    assert_eq!(tool_calls.lock().expect("calls").len(), 1);
    two.kill_a();
    let head = reader.await.expect("reader");
    let joined = two.follow_on_b(&input, head).await;
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let calls = tool_calls.lock().expect("calls").clone();
    assert_eq!(calls, vec![json!({"city": "Paris"}), json!({"city": "Rome"})], "each tool call ran once");
}

async fn a_frontend_tool_ends_the_run_pending_and_the_clients_result_continues_the_turn(backend: Backend) {
    let model =
        ScriptedModel::planned(vec![("confirm_dialog", json!({"question": "Proceed?"}))], "Confirmed, going ahead.")
            .await;
    let (tool_url, _) = start_tool("unused").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    let mut agent = openai_agent(&model.url, &tool_url, "never");
    agent.frontend_tools = vec!["confirm_dialog".into()];
    config.agents.push(agent);
    let app = TestApp::start_with(config).await;
    let tools = json!([{"name": "confirm_dialog", "description": "Ask the user", "parameters": {"type": "object"}}]);
    let mut input = first_run("th-front", "run-1", "do the risky thing");
    input["tools"] = tools.clone();
    let events = app.run_to_end("assistant", &input).await;
    let finished = events.last().expect("end");
    assert_eq!(finished.data["outcome"]["type"], "success");
    let pending = finished.data["outcome"]["pendingToolCallIds"].as_array().expect("pending").clone();
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    assert_eq!(pending, vec![call.data["toolCallId"].clone()]);
    assert!(!kinds(&events).contains(&"TOOL_CALL_RESULT"), "the gateway does not answer a client's tool");
    let (passed, report) = agui_check(&app.run_url("assistant"), &input).await;
    assert!(passed, "{report}");

    // The client answers with a role "tool" message on its next run.
    let call_id = call.data["toolCallId"].as_str().expect("id").to_string();
    let next = json!({
        "threadId": "th-front", "runId": "run-2", "protocolVersion": "1.0", "tools": tools,
        "messages": [
            {"id": "run-1-user", "role": "user", "content": "do the risky thing"},
            {"id": call_id.clone(), "role": "assistant", "toolCalls": [{"id": call_id.clone(), "type": "function",
                "function": {"name": "confirm_dialog", "arguments": "{\"question\":\"Proceed?\"}"}}]},
            {"id": "result-1", "role": "tool", "toolCallId": call_id.clone(), "content": "yes"}
        ]
    });
    let continued = app.run_to_end("assistant", &next).await;
    assert_eq!(kinds(&continued)[0], "RUN_STARTED");
    assert_eq!(continued.last().expect("end").data["outcome"]["type"], "success");
    let text: String = text_of(&continued);
    assert_eq!(text, "Confirmed, going ahead.");
    let requests = model.requests();
    let last =
        requests.last().expect("request")["messages"].as_array().expect("messages").last().cloned().expect("message");
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], "yes", "the model read the client's result");
    assert_eq!(app.counts().await.turns, 1, "the result continued the same turn");
}
on_both_stores!(a_frontend_tool_ends_the_run_pending_and_the_clients_result_continues_the_turn);

async fn the_model_pins_a_note_and_asks_the_person_through_built_in_tools(backend: Backend) {
    let model = ScriptedModel::planned(
        vec![
            ("board_write", json!({"text": "The user plans a trip", "tags": ["travel"]})),
            ("ask_user", json!({"question": "Which city?", "choices": ["Paris", "Rome"]})),
        ],
        "Rome it is.",
    )
    .await;
    let (tool_url, _) = start_tool("unused").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model.url, &tool_url, "never"));
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("assistant", &first_run("th-builtins", "run-1", "plan my trip")).await;
    let delta = events.iter().find(|e| e.kind() == "STATE_DELTA").expect("the note is pinned");
    assert_eq!(delta.data["delta"][0]["value"]["text"], "The user plans a trip");
    let last = events.last().expect("end");
    let question = &last.data["outcome"]["interrupts"][0];
    assert_eq!(question["reason"], "input_required");
    assert_eq!(question["responseSchema"]["properties"]["answer"]["enum"], json!(["Paris", "Rome"]));
    let id = question["id"].as_str().expect("id");
    let resumed = app
        .run_to_end(
            "assistant",
            &json!({"threadId": "th-builtins", "runId": "run-2", "messages": [],
                    "resume": [{"interruptId": id, "status": "resolved", "payload": {"answer": "Rome"}}]}),
        )
        .await;
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success");
    let requests = model.requests();
    let last_message =
        requests.last().expect("request")["messages"].as_array().expect("messages").last().cloned().expect("message");
    assert_eq!(last_message["content"], "Rome", "the answer is the question's result");
    let thread: Value = app.get_json("/v1/threads/th-builtins").await;
    assert_eq!(thread["board"]["notes"].as_array().map(Vec::len), Some(1));
}
on_both_stores!(the_model_pins_a_note_and_asks_the_person_through_built_in_tools);

// One store: what is checked is the model call's retry.
#[tokio::test]
async fn a_rate_limited_model_call_is_retried() {
    let model = ScriptedModel::start(busy_first(plan(vec![], "Hello after a pause."))).await;
    let (tool_url, _) = start_tool("unused").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model.url, &tool_url, "never"));
    let app = TestApp::start_with(config).await;
    let started = std::time::Instant::now();
    let events = app.run_to_end("assistant", &first_run("th-429", "run-1", "hi")).await;
    // The 429 asked for a second (`Retry-After: 1`), four times the first scheduled delay.
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "waited {:?}", started.elapsed());
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    let text: String = text_of(&events);
    assert_eq!(text, "Hello after a pause.");
    assert_eq!(model.calls(), 2, "one 429, one answer");
}

// One store: what is checked is the model call's failure.
#[tokio::test]
async fn an_unreachable_model_fails_the_turn_with_a_helpful_message() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    let mut agent = openai_agent("http://127.0.0.1:9/v1", "http://127.0.0.1:9/tool", "never");
    if let agui_gateway::config::AgentKindConfig::Openai(openai) = &mut agent.kind {
        openai.retries = 0;
    }
    config.agents.push(agent);
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("assistant", &first_run("th-down", "run-1", "hi")).await;
    let last = events.last().expect("end");
    assert_eq!(last.kind(), "RUN_ERROR");
    assert_eq!(last.data["code"], "failed");
    assert!(last.data["message"].as_str().is_some_and(|m| m.contains("could not be reached")), "{}", last.data);
    assert!(last.data.get("usage").is_none(), "no model call, no usage: {}", last.data);
}

/// A turn that fails after a model call reports the tokens that call took on its RUN_ERROR
/// (AG-UI 1.0: a failed run's tokens were still spent); one that fails before any reports none.
// One store: what is checked is the model's usage on the wire.
#[tokio::test]
async fn a_turn_that_fails_after_a_model_call_reports_its_usage_on_run_error() {
    let answer = plan(vec![("get_weather", json!({"city": "Oslo"}))], "never said");
    // The first call asks for the tool; the second is refused (429) and not retried.
    let model = ScriptedModel::start(move |request, number| {
        if number == 2 {
            Reply::RateLimited { retry_after_secs: 1 }
        } else {
            answer(request, number)
        }
    })
    .await;
    let (tool_url, _calls) = start_tool("cold").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    let mut agent = openai_agent(&model.url, &tool_url, "never");
    if let agui_gateway::config::AgentKindConfig::Openai(openai) = &mut agent.kind {
        openai.retries = 0;
    }
    config.agents.push(agent);
    let app = TestApp::start_with(config).await;
    let input = first_run("th-spent", "run-1", "weather in Oslo?");
    let events = app.run_to_end("assistant", &input).await;
    let last = events.last().expect("end");
    assert_eq!(last.kind(), "RUN_ERROR", "{:?}", kinds(&events));
    assert_eq!(model.calls(), 2);
    let usage = &last.data["usage"][0];
    assert_eq!(
        (&usage["inputTokens"], &usage["outputTokens"], &usage["totalTokens"]),
        (&json!(12), &json!(5), &json!(17))
    );
    assert_eq!(usage["provider"], "openai");
    let (passed, report) = agui_check(&app.run_url("assistant"), &input).await;
    assert!(passed, "{report}");
}

/// A model answer in German, Chinese and with an emoji, its stream cut by the network inside
/// each multi-byte character: the client gets every character exactly (no U+FFFD).
// One store: what is checked is the decoding of the model's stream.
#[tokio::test]
async fn a_character_cut_by_the_network_reaches_the_client_whole() {
    use futures_util::StreamExt;
    const ANSWER: &str = "Grüße aus Köln, 你好世界 🎉!";
    let body = chunks::text(ANSWER) + DONE;
    // Every network chunk ends inside a character: the stream is cut one byte into each.
    let bytes = body.into_bytes();
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut start = 0;
    for (at, byte) in bytes.iter().enumerate() {
        if *byte >= 0xC0 {
            pieces.push(bytes[start..=at].to_vec());
            start = at + 1;
        }
    }
    pieces.push(bytes[start..].to_vec());
    assert!(pieces.len() > 8, "the answer is cut inside characters");
    let model = ScriptedModel::start(move |_, _| {
        let stream = futures_util::stream::iter(pieces.clone()).then(|piece| async move {
            // Apart in time too, so no layer joins two pieces again.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(piece))
        });
        Reply::Body(axum::body::Body::from_stream(stream))
    })
    .await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(openai_agent(&model.url, "http://127.0.0.1:1/tool", "never"));
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("assistant", &first_run("th-utf8", "run-1", "greet me")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let text: String = text_of(&events);
    assert_eq!(text, ANSWER);
}
