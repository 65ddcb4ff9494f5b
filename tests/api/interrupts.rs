//! Interrupts and resume (§5): approvals and questions, checked all or nothing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

/// Runs `agent` on a new thread until its run ends with interrupts; returns the events and the
/// interrupts of the outcome.
async fn run_until_interrupt(app: &TestApp, agent: &str, thread: &str) -> (Vec<SseEvent>, Vec<Value>) {
    let events = app.run_to_end(agent, &first_run(thread, "run-1", "please do it")).await;
    let last = events.last().expect("events").clone();
    assert_eq!(last.kind(), "RUN_FINISHED", "{:?}", kinds(&events));
    assert_eq!(last.data["outcome"]["type"], "interrupt", "{}", last.data);
    let interrupts = last.data["outcome"]["interrupts"].as_array().expect("interrupts").clone();
    (events, interrupts)
}

fn resume(thread: &str, run: &str, entries: Value) -> Value {
    json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": [], "resume": entries})
}

/// `(id, status, decision)` of the thread's latest turn's interrupts, from the store.
async fn stored_interrupts(app: &TestApp, thread: &str) -> Vec<(String, String, Option<String>)> {
    let thread = app.store.find_thread("default", thread).await.expect("query").expect("thread");
    let turn = app.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    app.store
        .turn_interrupts(turn.pk)
        .await
        .expect("interrupts")
        .into_iter()
        .map(|i| (i.id, i.status.as_str().to_string(), i.decision))
        .collect()
}

async fn approving_a_tool_call_continues_the_same_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (events, interrupts) = run_until_interrupt(&app, "approver", "th-approve").await;
    assert_eq!(interrupts.len(), 1);
    let interrupt = &interrupts[0];
    let call = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("the call is shown");
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["toolCallId"], call.data["toolCallId"]);
    assert_eq!(interrupt["responseSchema"]["properties"]["approved"]["type"], "boolean");
    assert!(interrupt["responseSchema"]["properties"]["editedArgs"].is_object(), "editing is allowed");
    assert!(interrupt["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(interrupt["metadata"]["gateway/kind"], "tool_call");
    assert_eq!(interrupt["metadata"]["gateway/details"]["to"], "team@example.com");
    assert!(interrupt["id"].as_str().is_some_and(|id| id.len() > 30), "unguessable id");
    assert!(!kinds(&events).contains(&"TOOL_CALL_RESULT"), "nothing ran before the decision");
    let id = interrupt["id"].as_str().expect("id");
    assert_eq!(stored_interrupts(&app, "th-approve").await[0].1, "open");

    let resumed = app
        .run_to_end(
            "approver",
            &resume(
                "th-approve",
                "run-2",
                json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]),
            ),
        )
        .await;
    let kinds = kinds(&resumed);
    assert_eq!(kinds[0], "RUN_STARTED");
    assert_eq!(resumed[0].data["runId"], "run-2");
    assert_eq!(resumed[1].data["type"], "STATE_SNAPSHOT", "a resume run opens with the board");
    assert_eq!(resumed[2].data["name"], "gateway.resume");
    assert_eq!(
        resumed[2].data["value"],
        json!({"interruptId": id, "outcome": "decided", "approved": true, "decision": "approve"})
    );
    let result = resumed.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call ran");
    assert_eq!(result.data["toolCallId"], call.data["toolCallId"]);
    assert_eq!(result.data["content"], "sent");
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success");
    let first_ids: Vec<&Value> =
        events.iter().filter(|e| e.kind() == "TEXT_MESSAGE_START").map(|e| &e.data["messageId"]).collect();
    let resumed_start = resumed.iter().find(|e| e.kind() == "TEXT_MESSAGE_START").expect("an answer after the call");
    assert!(!first_ids.contains(&&resumed_start.data["messageId"]), "new message ids");
    let stored = stored_interrupts(&app, "th-approve").await;
    assert_eq!(stored[0].1, "decided");
    assert_eq!(app.counts().await.turns, 1, "a resume adds no turn");
}
on_both_stores!(approving_a_tool_call_continues_the_same_turn);

async fn the_same_resume_twice_decides_once(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-twice").await;
    let id = interrupts[0]["id"].as_str().expect("id").to_string();
    let entries = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]);
    app.run_to_end("approver", &resume("th-twice", "run-2", entries.clone())).await;
    let decided = stored_interrupts(&app, "th-twice").await;
    let again = app.run_to_end("approver", &resume("th-twice", "run-3", entries)).await;
    assert_eq!(again[2].data["value"], json!({"interruptId": id, "outcome": "already_decided"}));
    assert_eq!(stored_interrupts(&app, "th-twice").await, decided, "decided once");
    assert_eq!(kinds(&again).last(), Some(&"RUN_FINISHED"));
}
on_both_stores!(the_same_resume_twice_decides_once);

/// One interrupt answered twice in one resume (approved and cancelled, or approved twice) is
/// refused at once, `invalid_resume` naming it, and decides nothing: it used to be retried
/// without end, never answering and holding a core.
async fn a_resume_naming_one_interrupt_twice_is_refused_at_once_and_decides_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-dup").await;
    let id = interrupts[0]["id"].as_str().expect("id").to_string();
    let before = stored_interrupts(&app, "th-dup").await;
    assert_eq!(before[0].1, "open");
    let yes = json!({"interruptId": id, "status": "resolved", "payload": {"approved": true}});
    let no = json!({"interruptId": id, "status": "cancelled"});
    for (n, entries) in [json!([yes, no]), json!([yes, yes]), json!([no, yes])].into_iter().enumerate() {
        let answered = tokio::time::timeout(
            Duration::from_secs(10),
            app.run_to_end("approver", &resume("th-dup", &format!("dup-{n}"), entries.clone())),
        )
        .await
        .unwrap_or_else(|_| panic!("{entries}: no answer within 10 s"));
        assert_eq!(kinds(&answered), ["RUN_ERROR"], "{entries}");
        assert_eq!(answered[0].data["code"], "invalid_resume", "{}", answered[0].data);
        let message = answered[0].data["message"].as_str().unwrap_or("");
        assert!(message.contains(&id) && message.contains("twice"), "names the interrupt: {message}");
        assert_eq!(stored_interrupts(&app, "th-dup").await, before, "{entries}: nothing decided, still open");
    }
    // The interrupt is still there to answer, once.
    let events = app.run_to_end("approver", &resume("th-dup", "run-ok", json!([yes]))).await;
    assert_eq!(events[2].data["value"]["outcome"], "decided", "{:?}", kinds(&events));
    assert_eq!(stored_interrupts(&app, "th-dup").await[0].1, "decided");
}
on_both_stores!(a_resume_naming_one_interrupt_twice_is_refused_at_once_and_decides_nothing);

async fn a_denied_call_says_so_and_an_edited_call_runs_as_edited(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-deny").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    let denied = app
        .run_to_end("approver", &resume("th-deny", "run-2", json!([{"interruptId": id, "status": "cancelled"}])))
        .await;
    assert_eq!(denied[2].data["value"]["approved"], false);
    let result = denied.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("a result");
    assert!(result.data["content"].as_str().is_some_and(|c| c.contains("denied")), "{}", result.data);
    assert_eq!(denied.last().expect("end").data["outcome"]["type"], "success", "the agent goes on");

    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-edit").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    let edited = json!({"to": "boss@example.com", "body": "edited"});
    let payload = json!({"approved": true, "editedArgs": edited});
    let ran = app
        .run_to_end(
            "approver",
            &resume("th-edit", "run-2", json!([{"interruptId": id, "status": "resolved", "payload": payload}])),
        )
        .await;
    let args: Vec<&Value> = ran.iter().filter(|e| e.kind() == "TOOL_CALL_ARGS").map(|e| &e.data["delta"]).collect();
    assert_eq!(args, vec![&Value::String(edited.to_string())], "the edited call is shown and runs");
}
on_both_stores!(a_denied_call_says_so_and_an_edited_call_runs_as_edited);

async fn each_refusal_code_decides_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, pair) = run_until_interrupt(&app, "pair", "th-pair").await;
    assert_eq!(pair.len(), 2, "both calls wait");
    let (a, b) = (pair[0]["id"].as_str().expect("id"), pair[1]["id"].as_str().expect("id"));
    let yes = json!({"approved": true});
    let before = stored_interrupts(&app, "th-pair").await;
    let cases = [
        ("interrupts_open", json!([{"interruptId": a, "status": "resolved", "payload": yes}])),
        (
            "invalid_resume",
            json!([
            {"interruptId": a, "status": "resolved", "payload": yes},
            {"interruptId": b, "status": "resolved", "payload": yes},
            {"interruptId": "int_made_up", "status": "resolved", "payload": yes}]),
        ),
        (
            "invalid_resume",
            json!([
            {"interruptId": a, "status": "resolved", "payload": {"approved": "yes"}},
            {"interruptId": b, "status": "resolved", "payload": yes}]),
        ),
    ];
    for (n, (code, entries)) in cases.iter().enumerate() {
        let events = app.run_to_end("pair", &resume("th-pair", &format!("bad-{n}"), entries.clone())).await;
        assert_eq!(kinds(&events), ["RUN_ERROR"], "{code}");
        assert_eq!(events[0].data["code"], *code, "{}", events[0].data);
        assert_eq!(stored_interrupts(&app, "th-pair").await, before, "{code}: nothing decided");
    }

    // A new message while the turn waits for this caller.
    let pending = json!({"threadId": "th-pair", "runId": "new-msg", "messages": [
        {"id": "run-1-user", "role": "user", "content": "please do it"}, {"id": "u2", "role": "user", "content": "and?"}]});
    let events = app.run_to_end("pair", &pending).await;
    assert_eq!(events[0].data["code"], "interrupts_pending");
    assert_eq!(stored_interrupts(&app, "th-pair").await, before);

    // Four eyes: the person who started the turn may not decide, nor start another.
    let (_, held) = run_until_interrupt_for_others(&app, "foureyes", "th-4eyes").await;
    let id = held["interruptId"].as_str().expect("id");
    let before = stored_interrupts(&app, "th-4eyes").await;
    let events = app
        .run_to_end(
            "foureyes",
            &resume("th-4eyes", "r2", json!([{"interruptId": id, "status": "resolved", "payload": yes}])),
        )
        .await;
    assert_eq!(events[0].data["code"], "not_a_decider");
    let waiting = json!({"threadId": "th-4eyes", "runId": "r3", "messages": [
        {"id": "run-1-user", "role": "user", "content": "please do it"}, {"id": "u2", "role": "user", "content": "hurry"}]});
    let events = app.run_to_end("foureyes", &waiting).await;
    assert_eq!(events[0].data["code"], "turn_waiting");
    assert!(events[0].data["message"].as_str().is_some_and(|m| m.contains("finance")), "names who decides");
    assert_eq!(stored_interrupts(&app, "th-4eyes").await, before);

    // A changed call.
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-changed").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    execute_sql(&db.url, &format!("UPDATE interrupts SET status = 'superseded' WHERE id = '{id}'")).await;
    let before = stored_interrupts(&app, "th-changed").await;
    let events = app
        .run_to_end(
            "approver",
            &resume("th-changed", "r2", json!([{"interruptId": id, "status": "resolved", "payload": yes}])),
        )
        .await;
    assert_eq!(events[0].data["code"], "interrupt_changed");
    assert_eq!(stored_interrupts(&app, "th-changed").await, before);

    // An expired one: denied by the sweeper, then too late to answer.
    let (_, interrupts) = run_until_interrupt(&app, "hasty", "th-late").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    // ttl_secs = 1: the sweeper denies it a second after it was asked.
    let before = wait_for(PATIENCE, "the sweeper to expire the interrupt", || async {
        let stored = stored_interrupts(&app, "th-late").await;
        (stored[0].1 == "expired").then_some(stored)
    })
    .await;
    let events = app
        .run_to_end(
            "hasty",
            &resume("th-late", "r2", json!([{"interruptId": id, "status": "resolved", "payload": yes}])),
        )
        .await;
    assert_eq!(events[0].data["code"], "interrupt_expired");
    assert_eq!(stored_interrupts(&app, "th-late").await, before);
}
on_both_stores!(each_refusal_code_decides_nothing);

/// Starts `agent` and reads until the caller is told the turn waits for others; returns the
/// events and the first entry of `gateway.waiting`. The stream stays open: it is dropped here.
async fn run_until_interrupt_for_others(app: &TestApp, agent: &str, thread: &str) -> (Vec<SseEvent>, Value) {
    let mut response = app.post_run(agent, &first_run(thread, "run-1", "please do it")).await;
    let mut events = Vec::new();
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let Ok(Ok(Some(chunk))) = tokio::time::timeout(Duration::from_secs(5), response.chunk()).await else { break };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                let data: Value = serde_json::from_str(data).expect("json");
                let waiting = data["name"] == "gateway.waiting";
                events.push(SseEvent { id: None, data: data.clone() });
                if waiting {
                    // An absence: for 700 ms the stream stays open and carries nothing but
                    // keepalives (nothing ends the run for this caller). Read the whole window.
                    let window = tokio::time::Instant::now() + Duration::from_millis(700);
                    while let Ok(more) = tokio::time::timeout_at(window, response.chunk()).await {
                        assert!(
                            matches!(more, Ok(Some(ref c)) if c.starts_with(b": keepalive")),
                            "the run goes on: {more:?}"
                        );
                    }
                    return (events, data["value"]["waiting"][0].clone());
                }
            }
        }
    }
    panic!("no gateway.waiting in {:?}", kinds(&events));
}

#[tokio::test]
async fn an_expired_interrupt_is_denied_once_with_two_instances_running() {
    let (a, _b, _db) = two_apps().await;
    let (_, interrupts) = run_until_interrupt(&a, "hasty", "th-expire").await;
    let id = interrupts[0]["id"].as_str().expect("id").to_string();
    // Follow the turn as a reloaded page would, until it goes on and ends.
    let turn = a.store.find_thread("default", "th-expire").await.expect("q").expect("thread");
    let turn = a.store.thread_turns(turn.pk).await.expect("turns").pop().expect("turn");
    wait_until(PATIENCE, "the turn to go on and finish after the expiry", || async {
        a.store.turn_by_pk(turn.pk).await.expect("q").expect("turn").status.is_finished()
    })
    .await;
    let stored = a.store.turn_interrupts(turn.pk).await.expect("interrupts");
    assert_eq!(stored[0].id, id);
    assert_eq!(stored[0].status.as_str(), "expired");
    let decisions = a.store.events_after(turn.pk, 0, 10_000).await.expect("log");
    let markers = decisions.iter().filter(|e| e.kind == agui_gateway::store::EventKind::Resumed).count();
    assert_eq!(markers, 1, "denied exactly once");
    let results: Vec<String> = decisions
        .iter()
        .filter_map(|e| serde_json::from_slice::<Value>(&e.body).ok())
        .filter(|v| v["type"] == "TOOL_CALL_RESULT")
        .map(|v| v["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(results, vec!["not run: the call was expired".to_string()]);
}

#[tokio::test]
async fn concurrent_resumes_on_two_instances_decide_once() {
    let (a, b, _db) = two_apps().await;
    let (_, interrupts) = run_until_interrupt(&a, "approver", "th-race").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    let entries = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]);
    let (on_a, on_b) = (resume("th-race", "on-a", entries.clone()), resume("th-race", "on-b", entries));
    let (one, two) = tokio::join!(a.run_to_end("approver", &on_a), b.run_to_end("approver", &on_b));
    let outcomes: Vec<&Value> = [&one, &two].iter().map(|events| &events[2].data["value"]["outcome"]).collect();
    let decided = outcomes.iter().filter(|o| **o == "decided").count();
    let already = outcomes.iter().filter(|o| **o == "already_decided").count();
    assert_eq!((decided, already), (1, 1), "{outcomes:?}");
    for events in [&one, &two] {
        assert_eq!(kinds(events).last(), Some(&"RUN_FINISHED"), "both runs follow the turn to its end");
    }
    let thread = a.store.find_thread("default", "th-race").await.expect("q").expect("thread");
    let turn = a.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    let log = a.store.events_after(turn.pk, 0, 10_000).await.expect("log");
    assert_eq!(log.iter().filter(|e| e.kind == agui_gateway::store::EventKind::Resumed).count(), 1);
}

async fn a_question_is_answered_from_its_choices(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "asker", "th-ask").await;
    let question = &interrupts[0];
    assert_eq!(question["reason"], "input_required");
    assert_eq!(question["responseSchema"]["properties"]["answer"]["enum"], json!(["red", "blue"]));
    let id = question["id"].as_str().expect("id");
    let wrong = app
        .run_to_end(
            "asker",
            &resume("th-ask", "r2", json!([{"interruptId": id, "status": "resolved", "payload": {"answer": "green"}}])),
        )
        .await;
    assert_eq!(wrong[0].data["code"], "invalid_resume");
    let answered = app
        .run_to_end(
            "asker",
            &resume("th-ask", "r3", json!([{"interruptId": id, "status": "resolved", "payload": {"answer": "blue"}}])),
        )
        .await;
    let text: String = text_of(&answered);
    assert_eq!(text, "You chose blue.");
}
on_both_stores!(a_question_is_answered_from_its_choices);

async fn a_typed_confirmation_must_match(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "confirmer", "th-confirm").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    assert_eq!(interrupts[0]["responseSchema"]["required"], json!(["approved", "confirm"]));
    let sloppy = app
        .run_to_end(
            "confirmer",
            &resume(
                "th-confirm",
                "r2",
                json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true, "confirm": "delete"}}]),
            ),
        )
        .await;
    assert_eq!(sloppy[0].data["code"], "invalid_resume");
    let exact = app
        .run_to_end(
            "confirmer",
            &resume(
                "th-confirm",
                "r3",
                json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true, "confirm": "DELETE"}}]),
            ),
        )
        .await;
    assert_eq!(exact.last().expect("end").data["outcome"]["type"], "success");
}
on_both_stores!(a_typed_confirmation_must_match);

// One store: the older protocol is a rendering of the same log.
#[tokio::test]
async fn a_pre_1_0_client_gets_messages_snapshot_and_on_interrupt() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let mut input = first_run("th-old", "run-1", "please do it");
    input.as_object_mut().expect("object").remove("protocolVersion");
    let events = app.run_to_end("approver", &input).await;
    let tail: Vec<&str> = kinds(&events).into_iter().rev().take(3).collect();
    assert_eq!(tail, ["RUN_FINISHED", "CUSTOM", "MESSAGES_SNAPSHOT"]);
    let finished = events.last().expect("end");
    assert!(finished.data.get("outcome").is_none(), "no outcome for a pre-1.0 client");
    let on_interrupt = &events[events.len() - 2];
    assert_eq!(on_interrupt.data["name"], "on_interrupt");
    assert!(on_interrupt.data["value"]["id"].as_str().is_some_and(|id| id.starts_with("int_")));
    let snapshot = &events[events.len() - 3].data["messages"];
    assert_eq!(snapshot[0]["role"], "user");
    assert_eq!(snapshot[1]["toolCalls"][0]["function"]["name"], "send_email");
}

async fn the_decision_route_unblocks_a_waiting_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (first, interrupts) = run_until_interrupt(&app, "approver", "th-route").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    let answer_id = first
        .iter()
        .find(|event| event.kind() == "TEXT_MESSAGE_START")
        .and_then(|event| event.data["messageId"].as_str())
        .expect("the answer's message id")
        .to_string();
    let thread: Value = app.get_json("/v1/threads/th-route").await;
    assert_eq!(thread["status"], "waiting");
    assert_eq!(thread["interrupts"][0]["id"], id);
    let url = app.url(&format!("/v1/interrupts/{id}/decision"));
    let bad = app
        .client
        .post(&url)
        .json(&json!({"status": "resolved", "payload": {"approved": 1}}))
        .send()
        .await
        .expect("post");
    assert_eq!(bad.status(), 409);
    assert_eq!(bad.json::<Value>().await.expect("json")["error"]["code"], "invalid_resume");
    let decided = app
        .client
        .post(&url)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(decided.status(), 200);
    assert_eq!(decided.json::<Value>().await.expect("json")["outcome"], "decided");
    let missing = app
        .client
        .post(app.url("/v1/interrupts/int_nope/decision"))
        .json(&json!({"status": "cancelled"}))
        .send()
        .await
        .expect("post");
    assert_eq!(missing.status(), 403);
    // A reloaded page follows the turn from the decision to its end. It holds what the page
    // showed: the user message and the answer up to the approval, by the gateway's message id,
    // so it names this turn whether or not the turn has ended by now (the user message alone
    // would ask for another answer once it has: a regenerate, §6).
    let reload = json!({"threadId": "th-route", "runId": "after-reload", "messages": [
        {"id": "run-1-user", "role": "user", "content": "please do it"},
        {"id": answer_id, "role": "assistant", "content": "I will send it."},
    ]});
    let followed = app.run_to_end("approver", &reload).await;
    assert_eq!(kinds(&followed)[0], "RUN_STARTED");
    let end = &followed.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "success", "the reloaded page's run ended {end}: {:?}", kinds(&followed));
}
on_both_stores!(the_decision_route_unblocks_a_waiting_turn);

async fn the_decide_command_unblocks_a_turn_a_serving_gateway_then_finishes(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-cli").await;
    let id = interrupts[0]["id"].as_str().expect("id").to_string();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["decide", "--database", &db.url, "--as", "local", &id, "--approve"])
        .output()
        .await
        .expect("the command runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let outcome: Value = serde_json::from_slice(&output.stdout).expect("JSON outcome");
    assert_eq!(outcome["outcome"], "decided");
    // The serving gateway picks the released turn up and finishes it.
    let reload = json!({"threadId": "th-cli", "runId": "after-cli", "messages": [{"id": "run-1-user", "role": "user", "content": "please do it"}]});
    let followed =
        tokio::time::timeout(Duration::from_secs(20), app.run_to_end("approver", &reload)).await.expect("finished");
    assert_eq!(followed.last().expect("end").data["outcome"]["type"], "success");
    let thread = app.store.find_thread("default", "th-cli").await.expect("q").expect("thread");
    let turn = app.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    let audit = app.store.audit_rows(Some("default"), 0, 100).await.expect("audit");
    let row = audit.iter().find(|r| r.entry.action == "interrupt.decide").expect("audited");
    assert_eq!(row.entry.via.as_deref(), Some("cli"));
    assert!(row.entry.detail.contains(&turn.public_id));
}
on_both_stores!(the_decide_command_unblocks_a_turn_a_serving_gateway_then_finishes);

/// Taint (§8): a tool that sends data out asks a person first on a tainted turn by default —
/// `exfiltrates = true` alone is enough — unless its policy says `approval = "never"`.
async fn an_exfiltrating_tool_asks_by_default_unless_its_policy_says_otherwise(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let events = app.run_to_end("sender", &first_run("th-sender", "run-1", "the quarterly numbers")).await;
    let results: Vec<&str> =
        events.iter().filter(|e| e.kind() == "TOOL_CALL_RESULT").filter_map(|e| e.data["content"].as_str()).collect();
    assert_eq!(results, vec!["mirrored"], "the explicit `never` ran at once, nothing else did");
    let end = &events.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&events));
    let interrupt = &end["outcome"]["interrupts"][0];
    assert_eq!(interrupt["metadata"]["gateway/details"]["body"], "the quarterly numbers");
    let asked = events.iter().rfind(|e| e.kind() == "TOOL_CALL_START").expect("call");
    assert_eq!(asked.data["toolCallName"], "post_to_webhook");
    let why = interrupt["metadata"]["gateway/asks-because"].as_str().unwrap_or_default();
    assert!(why.contains("outside content") && why.contains("sends data out"), "the taint's reason: {why}");
    assert_eq!(interrupt["toolCallId"], asked.data["toolCallId"]);
}
on_both_stores!(an_exfiltrating_tool_asks_by_default_unless_its_policy_says_otherwise);

/// Taint (§8): a turn started through AG-UI is tainted (its text came from an app), so a tool
/// that exfiltrates asks a person first under `approval = "when_tainted"`; one that does not,
/// runs at once.
async fn an_exfiltrating_tool_asks_first_in_a_tainted_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let events = app.run_to_end("tainted", &first_run("th-taint", "run-1", "ship the notes")).await;
    let results: Vec<&str> =
        events.iter().filter(|e| e.kind() == "TOOL_CALL_RESULT").filter_map(|e| e.data["content"].as_str()).collect();
    assert_eq!(results, vec!["3 meetings"], "the harmless tool ran at once");
    let end = &events.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt");
    let interrupt = &end["outcome"]["interrupts"][0];
    assert_eq!(interrupt["metadata"]["gateway/details"]["body"], "ship the notes");
    let calls: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == "TOOL_CALL_START")
        .filter_map(|e| e.data["toolCallName"].as_str())
        .collect();
    assert_eq!(calls, vec!["read_calendar", "post_to_webhook"]);
    assert_eq!(
        interrupt["toolCallId"],
        events.iter().rfind(|e| e.kind() == "TOOL_CALL_START").expect("call").data["toolCallId"]
    );
    // The board notes of AG-UI turns say so too.
    let notes = app.run_to_end("demo", &first_run("th-taint-note", "run-1", "x")).await;
    let delta = notes.iter().find(|e| e.kind() == "STATE_DELTA").expect("a note");
    assert_eq!(delta.data["delta"][0]["value"]["tainted"], true);
    assert_eq!(delta.data["delta"][0]["value"]["taintedBecause"], "the turn's text came from an app through AG-UI");
}
on_both_stores!(an_exfiltrating_tool_asks_first_in_a_tainted_turn);

/// `gateway/console` (§5.1): with `console_url` configured, an interrupt links to where people
/// decide — on the stream, on `GET /v1/threads/{thread}` and on a `gateway.waiting` entry — and
/// without it the gateway's own console (`console = false` links nowhere: tests/api/inbox.rs).
// One store: the link comes from the configuration.
#[tokio::test]
async fn interrupts_link_to_the_console_where_one_is_configured() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.console_url = "https://console.example.com/decide".into();
    let app = TestApp::start_with(config).await;
    // Each link opens its interrupt's own item there.
    let link = |id: &Value| json!({ "label": "Decide in the console", "url": format!("https://console.example.com/decide#/interrupts/{}", id.as_str().unwrap_or_default()) });
    let (_, interrupts) = run_until_interrupt(&app, "approver", "th-console").await;
    assert_eq!(interrupts[0]["metadata"]["gateway/console"], link(&interrupts[0]["id"]));
    let thread: Value = app.get_json("/v1/threads/th-console").await;
    assert_eq!(thread["interrupts"][0]["metadata"]["gateway/console"], link(&interrupts[0]["id"]), "{thread}");
    let (_, waiting) = run_until_interrupt_for_others(&app, "foureyes", "th-console-others").await;
    assert_eq!(waiting["gateway/console"], link(&waiting["interruptId"]), "{waiting}");

    // Without `console_url`, the gateway's own console (served by default) is the link.
    let plain_db = TestDatabase::new(Backend::Sqlite).await;
    let plain = TestApp::start(&plain_db.url).await;
    let (_, interrupts) = run_until_interrupt(&plain, "approver", "th-own-console").await;
    let own = format!("/console/#/interrupts/{}", interrupts[0]["id"].as_str().unwrap_or_default());
    assert_eq!(interrupts[0]["metadata"]["gateway/console"]["url"], json!(own));
}

/// §5.1: an escalation is a `confirmation` interrupt asking `{"approved", "comment"?}`.
/// Approved, the turn goes on (the comment in its words); a payload the schema refuses decides
/// nothing; declined, the turn ends where it waited.
async fn an_escalation_asks_for_a_confirmation_and_a_decline_ends_the_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let (_, interrupts) = run_until_interrupt(&app, "escalator", "th-escalate").await;
    let interrupt = &interrupts[0];
    assert_eq!(interrupt["reason"], "confirmation", "{interrupt}");
    assert_eq!(interrupt["message"], "A refund of 900 is over the limit of 500: go on?");
    let schema = &interrupt["responseSchema"];
    assert_eq!(schema["required"], json!(["approved"]), "{schema}");
    assert_eq!(schema["properties"]["approved"]["type"], "boolean");
    let id = interrupt["id"].as_str().expect("id").to_string();

    let before = stored_interrupts(&app, "th-escalate").await;
    let bad = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": "yes"}}]);
    let refused = app.run_to_end("escalator", &resume("th-escalate", "run-bad", bad)).await;
    assert_eq!(kinds(&refused), ["RUN_ERROR"]);
    assert_eq!(refused[0].data["code"], "invalid_resume");
    assert_eq!(stored_interrupts(&app, "th-escalate").await, before, "nothing decided");

    let approve =
        json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true, "comment": "Manager ok."}}]);
    let approved = app.run_to_end("escalator", &resume("th-escalate", "run-2", approve)).await;
    assert_eq!(text_of(&approved), "Refunded. Manager ok.");
    assert_eq!(approved.last().expect("end").data["outcome"]["type"], "success");

    let (_, interrupts) = run_until_interrupt(&app, "escalator", "th-decline").await;
    let id = interrupts[0]["id"].as_str().expect("id");
    let decline = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": false}}]);
    let declined = app.run_to_end("escalator", &resume("th-decline", "run-2", decline)).await;
    assert_eq!(text_of(&declined), "", "the turn went no further: {:?}", kinds(&declined));
    assert_eq!(declined.last().expect("end").data["outcome"]["type"], "success");
}
on_both_stores!(an_escalation_asks_for_a_confirmation_and_a_decline_ends_the_turn);
