//! A decision after a long wait is checked again (SPEC §5.3): an interrupt shown longer ago than
//! `turns.decision_recheck_secs` is compared, when it is decided, with what the agent would ask
//! now under its current configuration. The configuration changed meanwhile (a restart with the
//! tool's policy edited): the decision is refused `interrupt_changed`, nothing runs, the old
//! interrupt is superseded and a person is asked again under the new policy. Unchanged, or not
//! yet old enough, the decision stands as it was shown.

use agui_gateway::config::Config;
use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::fakes::tools::start_tool;
use crate::helpers::*;
use crate::on_both_stores;

/// The gateway's configuration: an agent whose one HTTP tool `wire` asks a person first, the
/// approver allowed to edit its arguments or not; decisions re-checked after `recheck_secs`.
fn config(database_url: &str, model_url: &str, tool_url: &str, allow_edit: bool, recheck_secs: u64) -> Config {
    let mut config = test_config(database_url);
    config.turns.decision_recheck_secs = recheck_secs;
    let agent = format!(
        r#"
name = "wirer"
kind = "openai"
base_url = "{model_url}"
model = "scripted"
retries = 0
[[tools]]
name = "wire"
url = "{tool_url}"
parameters = {{ type = "object", properties = {{ to = {{ type = "string" }} }}, required = ["to"] }}
approval = "always"
allow_edit = {allow_edit}
"#
    );
    config.agents.push(toml::from_str(&agent).expect("agent config"));
    config
}

fn resume(thread: &str, interrupt: &str) -> Value {
    json!({"threadId": thread, "runId": unique("run"), "protocolVersion": "1.0", "messages": [],
           "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]})
}

/// Starts a turn on `thread` and reads it to its interrupt: the interrupt's id.
async fn asked(app: &TestApp, thread: &str) -> String {
    let events = app.run_to_end("wirer", &first_run(thread, &unique("run"), "pay the vendor")).await;
    let outcome = &events.last().expect("end").data["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{:?}", kinds(&events));
    outcome["interrupts"][0]["id"].as_str().expect("an interrupt").to_string()
}

/// The open interrupts `GET /v1/threads/{thread}` shows.
async fn open_interrupts(app: &TestApp, thread: &str) -> Vec<Value> {
    let response = app.client.get(app.url(&format!("/v1/threads/{thread}?tenant=default"))).send().await.expect("get");
    let body: Value = response.json().await.expect("JSON");
    body["interrupts"].as_array().cloned().unwrap_or_default()
}

async fn a_call_whose_policy_changed_during_a_long_wait_is_asked_again(backend: Backend) {
    let model = ScriptedModel::planned(vec![("wire", json!({"to": "vendor"}))], "Done.").await;
    let model_url = model.url.clone();
    let (tool_url, tool_calls) = start_tool("sent").await;
    let db = TestDatabase::new(backend).await;
    let before = TestApp::start_with(config(&db.url, &model_url, &tool_url, true, 0)).await;
    let shown = asked(&before, "th-recheck").await;
    before.shut_down().await;

    // Restarted with the approver no longer allowed to edit the call: what was shown (a schema
    // taking `editedArgs`) is not what would be asked now.
    let app = TestApp::start_with(config(&db.url, &model_url, &tool_url, false, 0)).await;
    let counts = app.counts().await;
    let refused = app.run_to_end("wirer", &resume("th-recheck", &shown)).await;
    let end = &refused.last().expect("end").data;
    assert_eq!((end["type"].as_str(), end["code"].as_str()), (Some("RUN_ERROR"), Some("interrupt_changed")), "{end}");
    assert!(tool_calls.lock().expect("calls").is_empty(), "nothing ran on the stale decision");
    assert_eq!(app.counts().await.runs, counts.runs, "the refused resume recorded no run");

    // The person is asked again, under the policy of now.
    let again = wait_for(PATIENCE, "a new interrupt", || async {
        open_interrupts(&app, "th-recheck").await.into_iter().find(|i| i["id"] != shown.as_str())
    })
    .await;
    let schema = again["responseSchema"].to_string();
    assert!(!schema.contains("editedArgs"), "the new interrupt asks under the new policy: {schema}");
    assert!(again["toolCallId"].is_string(), "for the same call: {again}");
    let stale = app.run_to_end("wirer", &resume("th-recheck", &shown)).await;
    assert_eq!(stale.last().expect("end").data["code"], "interrupt_changed", "the old interrupt stays superseded");

    let decided = app.run_to_end("wirer", &resume("th-recheck", again["id"].as_str().expect("id"))).await;
    assert_eq!(decided.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&decided));
    assert_eq!(*tool_calls.lock().expect("calls"), vec![json!({"to": "vendor"})], "the call ran once");
}
on_both_stores!(a_call_whose_policy_changed_during_a_long_wait_is_asked_again);

async fn a_decision_stands_when_nothing_changed_or_the_wait_was_short(backend: Backend) {
    let model = ScriptedModel::planned(vec![("wire", json!({"to": "vendor"}))], "Done.").await;
    let model_url = model.url.clone();
    let (tool_url, tool_calls) = start_tool("sent").await;
    let db = TestDatabase::new(backend).await;

    // Re-checked (every decision is old enough), and nothing changed: it stands.
    let app = TestApp::start_with(config(&db.url, &model_url, &tool_url, true, 0)).await;
    let shown = asked(&app, "th-same").await;
    let decided = app.run_to_end("wirer", &resume("th-same", &shown)).await;
    assert_eq!(decided.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&decided));
    assert_eq!(tool_calls.lock().expect("calls").len(), 1);

    // Changed, but shown a moment ago (under the age that asks for a re-check): it stands.
    let shown = asked(&app, "th-young").await;
    app.shut_down().await;
    let app = TestApp::start_with(config(&db.url, &model_url, &tool_url, false, 3600)).await;
    let decided = app.run_to_end("wirer", &resume("th-young", &shown)).await;
    assert_eq!(decided.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&decided));
    assert_eq!(tool_calls.lock().expect("calls").len(), 2);
}
on_both_stores!(a_decision_stands_when_nothing_changed_or_the_wait_was_short);
