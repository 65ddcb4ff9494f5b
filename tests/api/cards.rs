//! Cards (§3): an agent that declares a card schema and answers JSON matching it sends
//! `CUSTOM gateway.card {"turn", "card"}` — the turn's before the run ends, a delegated
//! step's when the step finishes; any other answer sends none.

use serde_json::json;

use crate::helpers::*;
use crate::on_both_stores;

// One store: the card is the agent's rendering; the log it goes through runs on both stores elsewhere.
#[tokio::test]
async fn a_json_answer_matching_the_card_schema_is_sent_as_a_card() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let plan = r#"{"title": "Launch plan", "steps": 3}"#;
    let events = app.run_to_end("carder", &first_run("th-card", "run-1", plan)).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let n = events.len();
    assert_eq!(kinds(&events)[n - 2..], ["CUSTOM", "RUN_FINISHED"], "the card comes before the run ends");
    assert_eq!(events[n - 2].data["name"], "gateway.card");
    assert_eq!(events[n - 2].data["value"], json!({ "turn": turn, "card": { "title": "Launch plan", "steps": 3 } }));
    let (ok, report) = agui_check(&app.run_url("carder"), &first_run("th-card", "run-1", plan)).await;
    assert!(ok, "{report}");

    // Not JSON, or JSON the schema refuses: no card.
    for answer in ["just words", r#"{"title": "No steps"}"#] {
        let events = app.run_to_end("carder", &first_run(&unique("th-nocard"), "run-1", answer)).await;
        assert!(!events.iter().any(|e| e.data["name"] == "gateway.card"), "{answer}: {:?}", kinds(&events));
    }

    // A delegated step's card comes as its step finishes, named by the child turn.
    let events = app.run_to_end("cardboss", &first_run("th-card-step", "run-1", plan)).await;
    let card = events.iter().position(|e| e.data["name"] == "gateway.card").expect("a card");
    let child = events[card].data["value"]["turn"].clone();
    assert_eq!(events[card + 1].kind(), "STEP_FINISHED");
    assert_eq!(events[card + 1].data["stepName"], child);
}

/// The script agent's `client_tool` step: a frontend tool the client declared ends the run
/// `success` with `pendingToolCallIds`; the client's `role: "tool"` message continues the turn,
/// and its content is `{answer}` in later steps. Both runs pass the official client.
async fn a_script_client_tool_waits_for_the_clients_result(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let tools =
        json!([{ "name": "confirm_dialog", "description": "Ask the user", "parameters": { "type": "object" } }]);
    let mut input = first_run("th-client-tool", "run-1", "the deploy");
    input["tools"] = tools.clone();
    let events = app.run_to_end("checker", &input).await;
    let end = &events.last().expect("end").data;
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    assert_eq!(call.data["toolCallName"], "confirm_dialog");
    assert_eq!(end["outcome"], json!({ "type": "success", "pendingToolCallIds": [call.data["toolCallId"]] }));
    let (ok, report) = agui_check(&app.run_url("checker"), &input).await;
    assert!(ok, "{report}");

    let history: serde_json::Value = app.get_json("/v1/threads/th-client-tool/messages").await;
    let mut messages = history["messages"].as_array().expect("list").clone();
    messages.push(json!({ "id": "result-1", "role": "tool", "toolCallId": call.data["toolCallId"], "content": "yes" }));
    let next = json!({ "threadId": "th-client-tool", "runId": "run-2", "protocolVersion": "1.0", "tools": tools,
                       "messages": messages });
    let continued = app.run_to_end("checker", &next).await;
    assert_eq!(continued.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&continued));
    let text: String = text_of(&continued);
    assert_eq!(text, "You said yes.");
    assert_eq!(app.counts().await.turns, 1, "the result continued the same turn");
    // The thread's record holds the client's result, once, after the call.
    let record: serde_json::Value = app.get_json("/v1/threads/th-client-tool/messages").await;
    let roles: Vec<&str> =
        record["messages"].as_array().expect("list").iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "assistant"]);
    assert_eq!(record["messages"][2]["content"], "yes");
    assert_eq!(record["messages"][2]["toolCallId"], call.data["toolCallId"]);
    let (ok, report) = agui_check(&app.run_url("checker"), &next).await;
    assert!(ok, "{report}");

    // A client that did not declare the tool: the step is skipped.
    let events = app.run_to_end("checker", &first_run("th-no-tool", "run-1", "x")).await;
    assert_eq!(events.last().expect("end").data["outcome"], json!({ "type": "success" }));
}
on_both_stores!(a_script_client_tool_waits_for_the_clients_result);
