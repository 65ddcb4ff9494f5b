//! Delegation (§3 steps): a parent agent's step runs a child turn on another agent inside
//! `STEP_STARTED`/`STEP_FINISHED` named by the child turn's id; the child's approval is an
//! interrupt of the parent's run (`gateway/turn` names the child) and is answered through the
//! parent's resume; then both delegations finish, in order, and every run passes the official
//! client.

use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::helpers::*;
use crate::on_both_stores;

fn steps(events: &[SseEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| matches!(e.kind(), "STEP_STARTED" | "STEP_FINISHED"))
        .map(|e| (e.kind().to_string(), e.data["stepName"].as_str().unwrap_or("").to_string()))
        .collect()
}

fn text(events: &[SseEvent]) -> Vec<String> {
    let mut messages: Vec<(String, String)> = Vec::new();
    for event in events {
        let id = event.data["messageId"].as_str().unwrap_or("").to_string();
        match event.kind() {
            "TEXT_MESSAGE_START" => messages.push((id, String::new())),
            "TEXT_MESSAGE_CONTENT" => {
                if let Some(message) = messages.iter_mut().find(|(m, _)| *m == id) {
                    message.1.push_str(event.data["delta"].as_str().unwrap_or(""));
                }
            }
            _ => {}
        }
    }
    messages.into_iter().map(|(_, text)| text).collect()
}

async fn a_childs_approval_is_answered_through_the_parents_resume(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-deleg", "run-1", "the launch");
    let first = app.run_to_end("manager", &input).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&first));
    let child = match steps(&first).first() {
        Some((kind, name)) if kind == "STEP_STARTED" => name.clone(),
        other => panic!("the run opens the child's step first: {other:?}"),
    };
    assert!(child.starts_with('t') && child.len() == 25, "a turn id names the step: {child}");
    // The run ends with the step closed (a run ends with nothing open).
    assert_eq!(steps(&first), vec![("STEP_STARTED".into(), child.clone()), ("STEP_FINISHED".into(), child.clone())]);
    let interrupt = &end["outcome"]["interrupts"][0];
    assert_eq!(interrupt["metadata"]["gateway/turn"], json!(child), "the child asks");
    assert_eq!(text(&first), vec!["Planning: the launch", "Mailer drafting: mail about the launch"]);
    let (ok, report) = agui_check(&app.run_url("manager"), &input).await;
    assert!(ok, "the interrupted run passes the official client: {report}");

    let resume = json!({
        "threadId": "th-deleg", "runId": "run-2", "protocolVersion": "1.0", "messages": [],
        "resume": [{ "interruptId": interrupt["id"], "status": "resolved", "payload": { "approved": true } }],
    });
    let second = app.run_to_end("manager", &resume).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&second));
    let names = steps(&second);
    assert_eq!(names.len(), 4, "{names:?}");
    let summariser = names[2].1.clone();
    assert_ne!(summariser, child, "each delegation is its own child turn");
    assert_eq!(
        names,
        vec![
            ("STEP_STARTED".into(), child.clone()),
            ("STEP_FINISHED".into(), child.clone()),
            ("STEP_STARTED".into(), summariser.clone()),
            ("STEP_FINISHED".into(), summariser.clone()),
        ],
        "the mailer finishes, then the summariser runs"
    );
    // The approved call's result and the child's own text stay inside its step.
    let position = |pred: &dyn Fn(&SseEvent) -> bool| second.iter().position(pred).expect("event");
    let result = position(&|e| e.kind() == "TOOL_CALL_RESULT");
    let mailer_done = position(&|e| e.kind() == "STEP_FINISHED" && e.data["stepName"] == json!(child));
    assert!(result < mailer_done);
    assert_eq!(text(&second), vec!["Mailer sent it.", "Summary of the launch.", "All delegated work is done."]);
    let (ok, report) = agui_check(&app.run_url("manager"), &resume).await;
    assert!(ok, "the resumed run passes the official client: {report}");
    let thread: Value = app.get_json("/v1/threads/th-deleg").await;
    assert_eq!(thread["latestTurn"]["status"], "succeeded");
}
on_both_stores!(a_childs_approval_is_answered_through_the_parents_resume);

/// Checks that every event inside a sub-agent (between its `SUBAGENT_STARTED` and its end)
/// carries its `subagentRunId`, and every other none; returns the sub-agents as
/// `(subagentRunId, name, how it ended)`.
fn subagents(events: &[SseEvent]) -> Vec<(String, String, Value)> {
    let mut open: Option<(String, String)> = None;
    let mut seen = Vec::new();
    for event in events {
        let id = event.data["subagentRunId"].as_str().map(str::to_string);
        match event.kind() {
            "SUBAGENT_STARTED" => {
                assert!(open.is_none(), "one delegation at a time: {}", event.data);
                open = Some((id.expect("a sub-agent's id"), event.data["name"].as_str().unwrap_or("").to_string()));
            }
            "SUBAGENT_FINISHED" | "SUBAGENT_ERROR" => {
                let (started, name) = open.take().expect("a sub-agent ends after it started");
                assert_eq!(id.as_deref(), Some(started.as_str()), "it ends the one that started");
                let mut ended = event.data.clone();
                if let Some(ended) = ended.as_object_mut() {
                    ended.remove("timestamp");
                }
                seen.push((started, name, ended));
            }
            kind => assert_eq!(
                id.as_deref(),
                open.as_ref().map(|(id, _)| id.as_str()),
                "{kind} is attributed to the sub-agent it is inside: {}",
                event.data
            ),
        }
    }
    assert!(open.is_none(), "a run ends with no sub-agent open: {:?}", kinds(events));
    seen
}

async fn a_delegation_is_a_subagent_whose_events_carry_its_id(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-sub", "run-1", "the launch");
    let first = app.run_to_end("manager", &input).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&first));
    let interrupt = end["outcome"]["interrupts"][0]["id"].clone();
    let child = steps(&first)[0].1.clone();
    // The mailer runs as a sub-agent named after its child turn, inside the step, and is
    // suspended where the run ends at its approval.
    let seen = subagents(&first);
    assert_eq!(seen.len(), 1, "{:?}", kinds(&first));
    assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), (child.as_str(), "mailer"));
    assert_eq!(seen[0].2["type"], "SUBAGENT_FINISHED");
    assert_eq!(seen[0].2["outcome"], json!({ "type": "suspended", "interruptIds": [interrupt] }));
    // The child's interrupt is attributed to its sub-agent; a script's delegation names no call.
    assert_eq!(end["outcome"]["interrupts"][0]["subagentRunId"], json!(child));
    let started = first.iter().find(|e| e.kind() == "SUBAGENT_STARTED").expect("started");
    assert!(started.data.get("parentToolCallId").is_none(), "{}", started.data);
    let at = |kind: &str| first.iter().position(|e| e.kind() == kind).expect(kind);
    assert!(at("STEP_STARTED") < at("SUBAGENT_STARTED") && at("SUBAGENT_FINISHED") < at("STEP_FINISHED"));
    let drafting = first.iter().find(|e| e.kind() == "TEXT_MESSAGE_START" && e.data["subagentRunId"] == json!(child));
    assert!(drafting.is_some(), "the child's answer is attributed to it");
    let (ok, report) = agui_check(&app.run_url("manager"), &input).await;
    assert!(ok, "the suspended sub-agent's run passes the official client: {report}");

    let resume = json!({
        "threadId": "th-sub", "runId": "run-2", "protocolVersion": "1.0", "messages": [],
        "resume": [{ "interruptId": interrupt, "status": "resolved", "payload": { "approved": true } }],
    });
    let second = app.run_to_end("manager", &resume).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&second));
    // The mailer starts again in the run that resumes it and finishes; then the summariser.
    let seen = subagents(&second);
    let names: Vec<(&str, &str)> = seen.iter().map(|(id, name, _)| (id.as_str(), name.as_str())).collect();
    let summariser = steps(&second)[2].1.clone();
    assert_eq!(names, [(child.as_str(), "mailer"), (summariser.as_str(), "summariser")]);
    for (_, _, ended) in &seen {
        assert_eq!(ended["outcome"], json!({ "type": "success" }), "{ended}");
    }
    let result = second.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the approved call's result");
    assert_eq!(result.data["subagentRunId"], json!(child));
    let (ok, report) = agui_check(&app.run_url("manager"), &resume).await;
    assert!(ok, "the resumed run passes the official client: {report}");
}
on_both_stores!(a_delegation_is_a_subagent_whose_events_carry_its_id);

async fn a_failed_delegation_is_a_subagent_error(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-sub-fail", "run-1", "the launch");
    let events = app.run_to_end("failboss", &input).await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(&events));
    let seen = subagents(&events[..events.len() - 1]);
    assert_eq!(seen.len(), 1, "{:?}", kinds(&events));
    assert_eq!(seen[0].1, "failing");
    assert_eq!(seen[0].2["type"], "SUBAGENT_ERROR");
    assert_eq!(seen[0].2["message"], "the script failed on purpose");
    let (ok, report) = agui_check(&app.run_url("failboss"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_failed_delegation_is_a_subagent_error);

/// The LLM agent's `delegate` built-in: the model hands a task to another agent; the child's
/// turn runs inside a step of this run and its answer is the call's result the model reads.
async fn a_model_delegates_a_task_and_reads_the_childs_answer(backend: Backend) {
    let model = ScriptedModel::planned(
        vec![("delegate", json!({ "agent": "summariser", "task": "the quarterly report" }))],
        "The summary is in.",
    )
    .await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(model.agent("planner", "builtins = [\"delegate\"]\ndelegates = [\"summariser\"]\n"));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-llm-deleg", "run-1", "summarise the report");
    let events = app.run_to_end("planner", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let names = steps(&events);
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(text(&events), vec!["Summary of the quarterly report.", "The summary is in."]);
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result.data["content"], "Summary of the quarterly report.");
    // The sub-agent names the `delegate` call that asked for it.
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the delegate call");
    assert_eq!(call.data["toolCallName"], "delegate");
    let started = events.iter().find(|e| e.kind() == "SUBAGENT_STARTED").expect("the child's sub-agent");
    assert_eq!(started.data["parentToolCallId"], call.data["toolCallId"], "{}", started.data);
    assert_eq!(started.data["name"], "summariser");
    let step_end = events.iter().position(|e| e.kind() == "STEP_FINISHED").expect("step end");
    let result_at = events.iter().position(|e| e.kind() == "TOOL_CALL_RESULT").expect("result");
    assert!(step_end < result_at, "the child's step finishes before the call's result");
    // The model read the child's answer as the tool result.
    let requests = model.requests();
    let tool_message =
        requests[1]["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "tool").cloned();
    assert_eq!(tool_message.expect("a tool message")["content"], "Summary of the quarterly report.");
    let (ok, report) = agui_check(&app.run_url("planner"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_model_delegates_a_task_and_reads_the_childs_answer);
