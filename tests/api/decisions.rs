//! Decisions reach the call whose interrupt they answer, by id: a model answering with several
//! calls at once (some needing approval, one it was never offered), decided in another order
//! than they were proposed; and a stored decision that is missing or unreadable fails the turn.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::fakes::model::{all_at_once, openai_toml, ScriptedModel};
use crate::fakes::tools::start_tool;
use crate::helpers::*;
use crate::on_both_stores;

/// An agent offered `board_write` (not `ask_user`) and the HTTP tool `wire`.
fn wiring_agent(model_url: &str, tool_url: &str, approval: &str) -> agui_gateway::config::AgentConfig {
    let more = format!(
        r#"
retries = 0
builtins = ["board_write"]
[[tools]]
name = "wire"
url = "{tool_url}"
parameters = {{ type = "object", properties = {{ to = {{ type = "string" }}, amount = {{ type = "number" }} }}, required = ["to"] }}
approval = "{approval}"
allow_edit = true
"#
    );
    toml::from_str(&openai_toml("wirer", model_url, &more)).expect("agent config")
}

/// Each call of a run: gateway id → (name, arguments as streamed).
fn calls_of(events: &[SseEvent]) -> BTreeMap<String, (String, String)> {
    let mut calls: BTreeMap<String, (String, String)> = BTreeMap::new();
    for event in events {
        let id = event.data["toolCallId"].as_str().unwrap_or("").to_string();
        match event.kind() {
            "TOOL_CALL_START" => {
                calls.insert(id, (event.data["toolCallName"].as_str().unwrap_or("").into(), String::new()));
            }
            "TOOL_CALL_ARGS" => {
                if let Some(call) = calls.get_mut(&id) {
                    call.1.push_str(event.data["delta"].as_str().unwrap_or(""));
                }
            }
            _ => {}
        }
    }
    calls
}

/// The id of the call named `name` whose arguments contain `needle`.
fn call_id(calls: &BTreeMap<String, (String, String)>, name: &str, needle: &str) -> String {
    calls
        .iter()
        .find(|(_, (n, args))| n == name && args.contains(needle))
        .map(|(id, _)| id.clone())
        .unwrap_or_else(|| panic!("no {name} call with {needle} in {calls:?}"))
}

fn results_of(events: &[SseEvent]) -> BTreeMap<String, String> {
    events
        .iter()
        .filter(|e| e.kind() == "TOOL_CALL_RESULT")
        .map(|e| (e.data["toolCallId"].as_str().unwrap_or("").into(), e.data["content"].as_str().unwrap_or("").into()))
        .collect()
}

fn resume(thread: &str, run: &str, entries: Value) -> Value {
    json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": [], "resume": entries})
}

async fn each_decision_reaches_only_the_call_it_answers(backend: Backend) {
    let model = ScriptedModel::start(all_at_once(
        vec![
            ("ask_user", json!({"question": "Which account?"})),
            ("wire", json!({"to": "attacker"})),
            ("board_write", json!({"text": "paying the vendor"})),
            ("wire", json!({"to": "vendor"})),
            ("wire", json!({"to": "bank"})),
        ],
        "Done.",
    ))
    .await;
    let (tool_url, tool_calls) = start_tool("wired").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(wiring_agent(&model.url, &tool_url, "always"));
    let app = TestApp::start_with(config).await;

    let first = app.run_to_end("wirer", &first_run("th-wire", "run-1", "pay the vendor")).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&first));
    let calls = calls_of(&first);
    assert_eq!(calls.len(), 5, "{calls:?}");
    let (ask, attacker, note, vendor, bank) = (
        call_id(&calls, "ask_user", "Which account"),
        call_id(&calls, "wire", "attacker"),
        call_id(&calls, "board_write", "paying"),
        call_id(&calls, "wire", "vendor"),
        call_id(&calls, "wire", "bank"),
    );
    // One interrupt per call under approval; none for the tool the model was not offered.
    let interrupts = end["outcome"]["interrupts"].as_array().expect("interrupts").clone();
    let interrupt_of: BTreeMap<String, String> = interrupts
        .iter()
        .map(|i| (i["toolCallId"].as_str().unwrap_or("").to_string(), i["id"].as_str().unwrap_or("").to_string()))
        .collect();
    let asked: Vec<&String> = interrupt_of.keys().collect();
    let mut expected = vec![&attacker, &vendor, &bank];
    expected.sort();
    assert_eq!(asked, expected, "{interrupts:?}");
    assert!(interrupts.iter().all(|i| i["reason"] == "tool_call"));
    assert!(tool_calls.lock().expect("calls").is_empty(), "nothing ran before the decisions");

    // Decided in another order than proposed: the bank's with edited arguments, the vendor's
    // approved, the attacker's denied.
    let entries = json!([
        {"interruptId": interrupt_of[&bank], "status": "resolved", "payload": {"approved": true, "editedArgs": {"to": "bank", "amount": 5}}},
        {"interruptId": interrupt_of[&vendor], "status": "resolved", "payload": {"approved": true}},
        {"interruptId": interrupt_of[&attacker], "status": "resolved", "payload": {"approved": false, "comment": "not ours"}},
    ]);
    let resumed = app.run_to_end("wirer", &resume("th-wire", "run-2", entries)).await;
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&resumed));

    // The tool server saw the approved calls with their own arguments, and nothing else.
    assert_eq!(
        tool_calls.lock().expect("calls").clone(),
        vec![json!({"to": "vendor"}), json!({"to": "bank", "amount": 5})]
    );
    let results = results_of(&resumed);
    assert!(results[&ask].contains("'ask_user' is not available"), "{}", results[&ask]);
    assert_eq!(results[&attacker], "not run: the call was denied: not ours");
    assert!(results[&note].starts_with("pinned note"), "{}", results[&note]);
    assert_eq!(results[&vendor], "wired");
    assert_eq!(results[&bank], "wired");
    assert_eq!(results.len(), 5);

    // The model read each result under its own call.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let tool_messages: BTreeMap<String, String> = requests[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap_or("").into(), m["content"].as_str().unwrap_or("").into()))
        .collect();
    assert!(tool_messages["call_0"].contains("not available"));
    assert_eq!(tool_messages["call_1"], "not run: the call was denied: not ours");
    assert_eq!(tool_messages["call_3"], "wired");
    assert_eq!(tool_messages["call_4"], "wired");
}
on_both_stores!(each_decision_reaches_only_the_call_it_answers);

async fn a_tool_the_model_was_not_offered_runs_nothing(backend: Backend) {
    let model = ScriptedModel::start(all_at_once(
        vec![
            ("ask_user", json!({"question": "Sure?"})),
            ("transfer", json!({"to": "x"})),
            ("wire", json!({"to": "vendor"})),
        ],
        "Done.",
    ))
    .await;
    let (tool_url, tool_calls) = start_tool("wired").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(wiring_agent(&model.url, &tool_url, "never"));
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("wirer", &first_run("th-unoffered", "run-1", "go")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "no interrupt: {:?}", kinds(&events));
    let calls = calls_of(&events);
    let results = results_of(&events);
    let (ask, transfer, wire) =
        (call_id(&calls, "ask_user", "Sure"), call_id(&calls, "transfer", "x"), call_id(&calls, "wire", "vendor"));
    assert_eq!(results[&ask], "error: the tool 'ask_user' is not available; nothing was run");
    assert_eq!(results[&transfer], "error: the tool 'transfer' is not available; nothing was run");
    assert_eq!(results[&wire], "wired");
    assert_eq!(tool_calls.lock().expect("calls").clone(), vec![json!({"to": "vendor"})], "only the offered tool ran");
}
on_both_stores!(a_tool_the_model_was_not_offered_runs_nothing);

/// Sets one interrupt's stored decision by hand (a state no request can reach).
async fn store_decision(db: &TestDatabase, interrupt: &str, decision: Option<&str>) {
    let decision = decision.map_or("NULL".to_string(), |d| format!("'{d}'"));
    execute_sql(
        &db.url,
        &format!("UPDATE interrupts SET status = 'decided', decision = {decision} WHERE id = '{interrupt}'"),
    )
    .await;
}

/// Runs `agent` to its two interrupts, spoils the first one's stored decision with `spoiled`,
/// decides the second through a resume, and returns the resumed run's events.
async fn run_with_spoiled_decision(
    app: &TestApp,
    db: &TestDatabase,
    agent: &str,
    thread: &str,
    spoiled: Option<&str>,
) -> Vec<SseEvent> {
    let first = app.run_to_end(agent, &first_run(thread, "run-1", "go")).await;
    let interrupts = first.last().expect("end").data["outcome"]["interrupts"].as_array().expect("interrupts").clone();
    assert_eq!(interrupts.len(), 2, "{interrupts:?}");
    let (spoilt, decided) = (interrupts[0]["id"].as_str().expect("id"), interrupts[1]["id"].as_str().expect("id"));
    store_decision(db, spoilt, spoiled).await;
    let entries = json!([{"interruptId": decided, "status": "resolved", "payload": {"approved": true}}]);
    app.run_to_end(agent, &resume(thread, "run-2", entries)).await
}

fn assert_failed_saying(events: &[SseEvent], words: &str) {
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(events));
    assert_eq!(end["code"], "internal");
    assert!(end["message"].as_str().is_some_and(|m| m.contains(words)), "{end}");
    assert!(!kinds(events).contains(&"TOOL_CALL_RESULT"), "no call took a decision by default");
}

async fn a_missing_or_unreadable_decision_fails_the_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let model =
        ScriptedModel::start(all_at_once(vec![("wire", json!({"to": "a"})), ("wire", json!({"to": "b"}))], "Done."))
            .await;
    let (tool_url, tool_calls) = start_tool("wired").await;
    let mut config = test_config(&db.url);
    config.agents.push(wiring_agent(&model.url, &tool_url, "always"));
    let app = TestApp::start_with(config).await;

    let events = run_with_spoiled_decision(&app, &db, "pair", "th-missing", None).await;
    assert_failed_saying(&events, "has no decision stored");
    let events = run_with_spoiled_decision(&app, &db, "pair", "th-unreadable", Some("{approved")).await;
    assert_failed_saying(&events, "does not parse");
    let events = run_with_spoiled_decision(&app, &db, "wirer", "th-wire-unreadable", Some("{approved")).await;
    assert_failed_saying(&events, "does not parse");
    assert!(tool_calls.lock().expect("calls").is_empty(), "no call ran");
}
on_both_stores!(a_missing_or_unreadable_decision_fails_the_turn);
