//! What the `agui` agent (§9.3) says back to its upstream, and what it shows of the upstream,
//! in each side's own terms: a person's decision reaches the upstream with its one meaning
//! (a denial stays a denial, an answer stays an answer), the upstream's calls and messages go
//! back under its own ids, a call the upstream put in no message gets a message of its own,
//! and the upstream's state lives beside the gateway's board without making the client's echo
//! of it an edit. Against the real `@ag-ui/encoder` server of `tests/upstream/node`, on both
//! stores; every stream judged by the official client.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::upstream::{upstream_of, Upstream, UpstreamServer};
use crate::upstream_input::gateway;

/// The requests the upstream got for `thread` (its threadId is `default:<thread>`), in order.
async fn requests_for(server: &UpstreamServer, thread: &str) -> Vec<Value> {
    let upstream_thread = format!("default:{thread}");
    server
        .requests()
        .await
        .into_iter()
        .filter(|r| r["body"]["threadId"] == upstream_thread)
        .map(|r| r["body"].clone())
        .collect()
}

async fn judged(app: &TestApp, input: &Value) {
    let (ok, report) = agui_check(&app.run_url("upstream"), input).await;
    assert!(ok, "the official client: {report}");
}

/// Runs the upstream's confirmation (a call of its own, `call_up_1`, waiting on an interrupt
/// with no responseSchema) on `thread`, then resumes it with `payload`. Returns the first run's
/// events, the resumed run's, and the upstream's request for the resumed run.
async fn confirm_then_resume(
    app: &TestApp,
    server: &UpstreamServer,
    thread: &str,
    resume: Value,
) -> (Vec<SseEvent>, Vec<SseEvent>, Value) {
    let first = app.run_to_end("upstream", &first_run(thread, "run-1", "mail the team")).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&first));
    let interrupt = &end["outcome"]["interrupts"][0];
    assert_eq!(interrupt["responseSchema"], json!({}), "the upstream asked for no shape: {interrupt}");
    let id = interrupt["id"].as_str().expect("id").to_string();
    let mut entry = resume;
    entry["interruptId"] = json!(id);
    let input =
        json!({ "threadId": thread, "runId": "run-2", "protocolVersion": "1.0", "messages": [], "resume": [entry] });
    let resumed = app.run_to_end("upstream", &input).await;
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&resumed));
    judged(app, &input).await;
    let sent = requests_for(server, thread).await;
    assert_eq!(sent.len(), 2, "asked, then resumed");
    (first, resumed, sent[1].clone())
}

/// A person's decision reaches the upstream with its one meaning: with no responseSchema (ADK's
/// confirmations carry none) a denial is `cancelled` with the person's `approved: false` —
/// never a `resolved`, which such an upstream reads as "go ahead" — and the upstream's call is
/// not run; an approval is `resolved` with the person's payload, and the call runs; an answer
/// is `resolved` with the answer exactly as given, and nothing the gateway read into it.
async fn a_decision_reaches_the_upstream_with_its_one_meaning(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "confirm", &db, "").await;

    let denied = unique("th-deny");
    let (first, resumed, sent) =
        confirm_then_resume(&app, &server, &denied, json!({ "status": "resolved", "payload": { "approved": false } }))
            .await;
    assert_eq!(
        sent["resume"],
        json!([{ "interruptId": "up-confirm-1", "status": "cancelled", "payload": { "approved": false } }]),
        "a denial is a denial upstream"
    );
    assert_eq!(text_of(&resumed), r#"Got: cancelled {"approved":false}"#);
    assert!(!kinds(&resumed).contains(&"TOOL_CALL_RESULT"), "the denied call did not run: {:?}", kinds(&resumed));
    // The call the person was asked about goes back under the upstream's own id.
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    let asked = sent["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "assistant").cloned();
    let asked = asked.expect("the call in the conversation");
    assert_eq!(asked["toolCalls"][0]["id"], "call_up_1", "{asked}");
    assert_ne!(asked["toolCalls"][0]["id"], call.data["toolCallId"]);

    let approved = unique("th-approve");
    let (first, resumed, sent) = confirm_then_resume(
        &app,
        &server,
        &approved,
        json!({ "status": "resolved", "payload": { "approved": true, "comment": "go" } }),
    )
    .await;
    assert_eq!(
        sent["resume"],
        json!([{ "interruptId": "up-confirm-1", "status": "resolved", "payload": { "approved": true, "comment": "go" } }])
    );
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    let result = resumed.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the approved call ran");
    assert_eq!(result.data["toolCallId"], call.data["toolCallId"], "its result, under the gateway's id");
    assert_eq!(text_of(&resumed), r#"Got: resolved {"approved":true,"comment":"go"}"#);

    let answered = unique("th-answer");
    let (_, _, sent) = confirm_then_resume(
        &app,
        &server,
        &answered,
        json!({ "status": "resolved", "payload": { "answer": "only the leads" } }),
    )
    .await;
    assert_eq!(
        sent["resume"],
        json!([{ "interruptId": "up-confirm-1", "status": "resolved", "payload": { "answer": "only the leads" } }]),
        "the answer, and no `approved` the person never sent"
    );

    let cancelled = unique("th-cancel");
    let (_, resumed, sent) = confirm_then_resume(&app, &server, &cancelled, json!({ "status": "cancelled" })).await;
    assert_eq!(sent["resume"], json!([{ "interruptId": "up-confirm-1", "status": "cancelled" }]));
    assert!(!kinds(&resumed).contains(&"TOOL_CALL_RESULT"));
}
crate::on_both_stores!(a_decision_reaches_the_upstream_with_its_one_meaning);

/// An upstream's call that names no message (`call_up_1` here) is shown in an assistant
/// message of its own, named as messages are — not by the call's id — and the thread's
/// conversation holds it there; no message is named by a call's id.
async fn an_upstream_call_in_no_message_gets_a_message_of_its_own(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "confirm", &db, "").await;
    let thread = unique("th-parent");
    let input = first_run(&thread, "run-1", "mail the team");
    let events = app.run_to_end("upstream", &input).await;
    let start = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call");
    let call = start.data["toolCallId"].as_str().expect("id").to_string();
    let turn = call.split(':').next().expect("turn").to_string();
    let parent = start.data["parentMessageId"].as_str().expect("every call names its message").to_string();
    assert_ne!(parent, call, "a message id, not the call's");
    assert_eq!(parent, format!("{turn}:m1"), "named as the turn's messages are");
    judged(&app, &input).await;

    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    let messages = body["messages"].as_array().expect("messages");
    assert!(messages.iter().all(|m| m["id"] != call.as_str()), "no message is named by the call: {body}");
    let holder = messages.iter().find(|m| m["id"] == parent.as_str()).expect("the call's message");
    assert_eq!((holder["role"].as_str(), holder["toolCalls"][0]["id"].as_str()), (Some("assistant"), Some(&*call)));
}
crate::on_both_stores!(an_upstream_call_in_no_message_gets_a_message_of_its_own);

/// The upstream's state and the gateway's board live side by side in the client's state: the
/// upstream's `STATE_SNAPSHOT` is shown with the board beside its keys. The upstream set an
/// editable key (`theme`) to a value outside the key's schema; the client's echo of that state
/// on its next run is no edit and is taken (the official client sends its state back as it is),
/// while a client that changes the key to a value the schema refuses is still refused 400,
/// naming the key, with nothing stored.
async fn the_clients_echo_of_upstream_state_is_no_edit(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "stateful", &db, "editable_state = { theme = { type = \"string\" } }").await;
    let thread = unique("th-theme");
    let input = first_run(&thread, "run-1", "dress it up");
    let events = app.run_to_end("upstream", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let shown = events.iter().filter(|e| e.kind() == "STATE_SNAPSHOT").last().expect("the upstream's snapshot");
    assert_eq!(
        shown.data["snapshot"],
        json!({ "theme": {}, "upstream": "set", "board": { "notes": [] } }),
        "the upstream's keys with the board beside them"
    );
    judged(&app, &input).await;

    // The next turn, as the official client sends it: the thread's messages and its state as shown.
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    let mut history = body["messages"].as_array().expect("messages").clone();
    history.push(json!({ "id": "run-2-user", "role": "user", "content": "again" }));
    let mut echo = first_run(&thread, "run-2", "again");
    echo["messages"] = Value::Array(history.clone());
    echo["state"] = shown.data["snapshot"].clone();
    let response = app.post_run("upstream", &echo).await;
    assert_eq!(response.status(), 200, "an echo is no edit");
    let again = read_events(response, None).await;
    assert_eq!(again.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&again));
    let sent = requests_for(&server, &thread).await;
    assert_eq!(sent.last().expect("asked")["state"]["theme"], json!({}), "the upstream's own value went back");
    let thread_row: Value = app.get_json(&format!("/v1/threads/{thread}")).await;
    assert_eq!(thread_row["state"], json!({}), "nothing was written: the client changed nothing");
    // The official client does the same on its own: its state is the relayed snapshot.
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    let mut history = body["messages"].as_array().expect("messages").clone();
    history.push(json!({ "id": "run-3-user", "role": "user", "content": "once more" }));
    let mut by_client = first_run(&thread, "run-3", "once more");
    by_client["messages"] = Value::Array(history);
    by_client["state"] = shown.data["snapshot"].clone();
    judged(&app, &by_client).await;

    // A client that changes the key to a value its schema refuses: 400, nothing stored.
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    let mut history = body["messages"].as_array().expect("messages").clone();
    history.push(json!({ "id": "run-4-user", "role": "user", "content": "break it" }));
    let before = app.counts().await;
    let asked = server.requests().await.len();
    let mut changed = first_run(&thread, "run-4", "break it");
    changed["messages"] = Value::Array(history);
    changed["state"] = json!({ "theme": 42, "upstream": "set", "board": { "notes": [] } });
    let response = app.post_run("upstream", &changed).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "bad_request");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.starts_with("state.theme")), "{body}");
    assert_eq!(app.counts().await, before, "nothing stored");
    assert_eq!(server.requests().await.len(), asked, "the upstream was not asked");
    let thread_row: Value = app.get_json(&format!("/v1/threads/{thread}")).await;
    assert_eq!(thread_row["state"], json!({}), "the thread's state is untouched");
}
crate::on_both_stores!(the_clients_echo_of_upstream_state_is_no_edit);

/// An upstream's subagents are relayed under the gateway's ids: `SUBAGENT_STARTED` (with its
/// parent subagent), `SUBAGENT_FINISHED` and `SUBAGENT_ERROR` each name `<turn>:s<n>`, and the
/// `subagentRunId` on what a subagent says (its step, its text, its tool call) names the same
/// id; nothing of the upstream's ids reaches the client, and the official client, which checks
/// subagents and their attribution, accepts the stream.
async fn an_upstreams_subagents_are_relayed_under_the_gateways_ids(backend: Backend) {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(backend).await;
    let app = gateway(&server, "subagents", &db, "").await;
    let thread = unique("th-sub");
    let input = first_run(&thread, "run-1", "find papers");
    let events = app.run_to_end("upstream", &input).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let (research, fetch) = (format!("{turn}:s1"), format!("{turn}:s2"));
    let tagged: Vec<(&str, &str)> =
        events.iter().filter_map(|e| Some((e.kind(), e.data["subagentRunId"].as_str()?))).collect();
    assert_eq!(
        tagged,
        [
            ("SUBAGENT_STARTED", research.as_str()),
            ("STEP_STARTED", research.as_str()),
            ("TEXT_MESSAGE_START", research.as_str()),
            ("TEXT_MESSAGE_CONTENT", research.as_str()),
            ("TEXT_MESSAGE_CONTENT", research.as_str()),
            ("TEXT_MESSAGE_END", research.as_str()),
            ("SUBAGENT_STARTED", fetch.as_str()),
            ("TOOL_CALL_START", fetch.as_str()),
            ("TOOL_CALL_ARGS", fetch.as_str()),
            ("TOOL_CALL_END", fetch.as_str()),
            ("SUBAGENT_ERROR", fetch.as_str()),
            ("STEP_FINISHED", research.as_str()),
            ("SUBAGENT_FINISHED", research.as_str()),
        ]
    );
    let started: Vec<&Value> = events.iter().filter(|e| e.kind() == "SUBAGENT_STARTED").map(|e| &e.data).collect();
    assert_eq!(
        (started[0]["name"].as_str(), started[0]["description"].as_str()),
        (Some("researcher"), Some("Finds things"))
    );
    assert_eq!(started[1]["parentSubagentRunId"], research.as_str(), "the nested one names its parent");
    let failed = events.iter().find(|e| e.kind() == "SUBAGENT_ERROR").expect("error");
    assert_eq!(
        (failed.data["message"].as_str(), failed.data["code"].as_str()),
        (Some("the archive is down"), Some("unavailable"))
    );
    let finished = events.iter().find(|e| e.kind() == "SUBAGENT_FINISHED").expect("finished");
    assert_eq!(finished.data["result"], json!({ "papers": 2 }));
    assert_eq!(finished.data["outcome"], json!({ "type": "success" }));
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("call");
    assert_eq!(call.data["toolCallId"], format!("{turn}:c1"));
    let raw = serde_json::to_string(&events.iter().map(|e| &e.data).collect::<Vec<_>>()).expect("json");
    assert!(!raw.contains("-research") && !raw.contains("-fetch"), "no upstream id reaches the client");
    assert_eq!(text_of(&events), "Asking the researcher.Found two papers.The researcher found two papers.");
    judged(&app, &input).await;
}
crate::on_both_stores!(an_upstreams_subagents_are_relayed_under_the_gateways_ids);
