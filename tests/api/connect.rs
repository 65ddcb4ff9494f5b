//! Threads that reopen and can be watched: a run on a thread with earlier turns restates the
//! conversation (`MESSAGES_SNAPSHOT`), and `POST /v1/agui/agents/{agent}/connect` streams the
//! thread across its turns, resumable at every event with `Last-Event-ID`, on any instance.

use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, scoped_token};
use crate::helpers::*;
use crate::on_both_stores;

async fn messages_of(app: &TestApp, thread: &str) -> Vec<Value> {
    let body: Value = app.get_json(&format!("/v1/threads/{thread}/messages")).await;
    body["messages"].as_array().expect("messages").clone()
}

/// A next turn's input: the thread's recorded conversation and a new user message.
pub(crate) async fn next_input(app: &TestApp, thread: &str, run: &str, text: &str) -> Value {
    let mut history = messages_of(app, thread).await;
    history.push(json!({"id": format!("{run}-user"), "role": "user", "content": text}));
    json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": history})
}

fn connect_input(thread: &str, run: &str) -> Value {
    json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": []})
}

pub(crate) async fn connect(app: &TestApp, thread: &str, run: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url("/v1/agui/agents/demo/connect"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(connect_input(thread, run).to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("connect sent")
}

fn count(events: &[SseEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

fn ends_run(event: &SseEvent) -> bool {
    matches!(event.kind(), "RUN_FINISHED" | "RUN_ERROR")
}

/// Reads the connect stream until `runs` runs have ended (RUN_FINISHED or RUN_ERROR).
pub(crate) async fn until_runs_ended(stream: &mut EventStream, runs: usize) {
    while stream.events.iter().filter(|e| ends_run(e)).count() < runs {
        let ended: Vec<Option<String>> = stream.events.iter().filter(|e| ends_run(e)).map(|e| e.id.clone()).collect();
        stream.until(&format!("{runs} ended runs"), move |e| ends_run(e) && !ended.contains(&e.id)).await;
    }
}

/// The official client's verdict on a recorded stream.
async fn official_client_accepts(events: &[SseEvent], input: &Value) {
    let (url, server) = serve_recorded_stream(sse_body(events)).await;
    let (passed, report) = agui_check(&url, input).await;
    server.abort();
    assert!(passed, "the official client refused the stream:\n{report}");
}

/// Reconnects after every event of `events` (on `apps` in turn) and checks that what follows
/// is exactly the rest of the uncut stream.
async fn every_cut_continues_exactly(apps: &[&TestApp], thread: &str, run: &str, events: &[SseEvent]) {
    for cut in 0..events.len() - 1 {
        let app = apps[cut % apps.len()];
        let id = events[cut].id.clone().expect("every event has an id");
        let response = connect(app, thread, run, &[("last-event-id", &id)]).await;
        assert_eq!(response.status(), 200, "reconnect after {id}");
        let rest = read_events(response, Some(events.len() - cut - 1)).await;
        assert_eq!(rest, events[cut + 1..], "the stream continued after {id} differs from the uncut one");
    }
}

async fn a_second_turn_opens_with_the_recorded_conversation(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let first = app.run_to_end("demo", &first_run("th-reopen", "run-1", "one")).await;
    assert_eq!(count(&first, "MESSAGES_SNAPSHOT"), 0, "a thread's first turn has nothing to restate");
    let before = messages_of(&app, "th-reopen").await;

    let input = next_input(&app, "th-reopen", "run-2", "two").await;
    let second = app.run_to_end("demo", &input).await;
    assert_eq!(kinds(&second)[..3], ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]);
    let snapshot = second[1].data["messages"].as_array().expect("messages").clone();
    let after = messages_of(&app, "th-reopen").await;
    assert_eq!(snapshot[..], after[..before.len() + 1], "the snapshot is the recorded conversation");
    assert_eq!(snapshot[..before.len()], before[..]);
    assert_eq!(snapshot.last().expect("user")["id"], "run-2-user", "with this turn's user message");

    // The snapshot has a part id on RUN_STARTED's event, so a reconnect after either is exact.
    let started = second[0].id.clone().expect("id");
    assert!(started.ends_with(".1.1"), "{started}");
    let rest = read_events(app.post_run_with("demo", &input, &[("last-event-id", &started)]).await, None).await;
    assert_eq!(rest, second[1..]);
    let (passed, report) = agui_check(&app.run_url("demo"), &input).await;
    assert!(passed, "{report}");
}
on_both_stores!(a_second_turn_opens_with_the_recorded_conversation);

async fn a_connect_stream_opens_with_the_thread_and_follows_later_turns_failed_ones_too(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    app.run_to_end("demo", &first_run("th-watch", "run-1", "one")).await;
    let recorded = messages_of(&app, "th-watch").await;

    let response = connect(&app, "th-watch", "watch-1", &[]).await;
    assert_eq!(response.status(), 200);
    let mut stream = EventStream::new(response);
    stream.until_kind("RUN_FINISHED").await;
    assert_eq!(kinds(&stream.events), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert_eq!(stream.events[0].data["runId"], "watch-1");
    assert_eq!(stream.events[1].data["messages"], Value::Array(recorded), "the thread as GET …/messages has it");
    assert_eq!(stream.events[2].data["snapshot"]["board"]["notes"][0]["text"], "Asked about: one");

    // A later turn, started by a run: the connect stream shows it as a run of its own.
    let second = app.run_to_end("demo", &next_input(&app, "th-watch", "run-2", "two").await).await;
    until_runs_ended(&mut stream, 2).await;
    let watched: Vec<SseEvent> = stream.events[4..].to_vec();
    assert_eq!(kinds(&watched), kinds(&second));
    for (seen, sent) in watched.iter().zip(&second) {
        assert_eq!(seen.id, sent.id, "the same log positions");
        if !matches!(seen.kind(), "RUN_STARTED" | "RUN_FINISHED") {
            assert_eq!(seen.data, sent.data);
        }
    }

    // A failed turn ends its run with RUN_ERROR; the next turn opens a new run.
    let failed = app.run_to_end("failing", &next_input(&app, "th-watch", "run-3", "three").await).await;
    assert_eq!(kinds(&failed).last(), Some(&"RUN_ERROR"));
    until_runs_ended(&mut stream, 3).await;
    app.run_to_end("demo", &next_input(&app, "th-watch", "run-4", "four").await).await;
    until_runs_ended(&mut stream, 4).await;
    let events = stream.events.clone();
    drop(stream);
    assert_eq!(count(&events, "RUN_ERROR"), 1);
    let error_at = events.iter().position(|e| e.kind() == "RUN_ERROR").expect("error");
    assert_eq!(events[error_at + 1].kind(), "RUN_STARTED");
    assert!(events.iter().all(|e| e.id.is_some()), "every event has an id");

    official_client_accepts(&events, &connect_input("th-watch", "watch-1")).await;
    every_cut_continues_exactly(&[&app], "th-watch", "watch-1", &events).await;
}
on_both_stores!(a_connect_stream_opens_with_the_thread_and_follows_later_turns_failed_ones_too);

#[tokio::test]
async fn a_connect_stream_on_one_instance_follows_turns_run_on_another() {
    let (a, b, _db) = two_apps().await;
    let input = first_run("th-x-watch", "run-1", "watch me");
    let mut on_a = EventStream::new(a.post_run("slow", &input).await);
    on_a.until_kind("TEXT_MESSAGE_CONTENT").await;

    // B connects while A runs the turn: it streams the turn live from its start.
    let response = connect(&b, "th-x-watch", "watch-b", &[]).await;
    assert_eq!(response.status(), 200);
    let mut watching = EventStream::new(response);
    watching.until_kind("RUN_FINISHED").await;
    let whole = on_a.rest().await;
    let first_run_seen: Vec<SseEvent> = watching.events.clone();
    assert_eq!(kinds(&first_run_seen)[..3], ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]);
    assert_eq!(first_run_seen[1].data["messages"].as_array().map(Vec::len), Some(1), "the user message");
    let without_snapshot: Vec<&str> =
        kinds(&first_run_seen).into_iter().filter(|k| *k != "MESSAGES_SNAPSHOT").collect();
    assert_eq!(without_snapshot, kinds(&whole), "B streamed the turn A ran");

    // The next turn, started on A, reaches B's connect stream too.
    let next = a.run_to_end("demo", &next_input(&a, "th-x-watch", "run-2", "and more").await).await;
    until_runs_ended(&mut watching, 2).await;
    let events = watching.events.clone();
    drop(watching);
    assert_eq!(kinds(&events[first_run_seen.len()..]), kinds(&next));

    official_client_accepts(&events, &connect_input("th-x-watch", "watch-b")).await;
    every_cut_continues_exactly(&[&a, &b], "th-x-watch", "watch-b", &events).await;
}

async fn a_caller_without_content_permission_gets_no_messages(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, "")).await;
    let token = |sub: &str, scope: &str| format!("Bearer {}", scoped_token("default", sub, scope));
    let full = token("nina", "threads:read threads:content agent:demo");
    let response = app.post_run_with("demo", &first_run("th-thin", "run-1", "one"), &[("authorization", &full)]).await;
    assert_eq!(kinds(&read_events(response, None).await).last(), Some(&"RUN_FINISHED"));
    let opening = read_events(connect(&app, "th-thin", "w", &[("authorization", &full)]).await, Some(2)).await;
    assert_eq!(kinds(&opening), ["RUN_STARTED", "MESSAGES_SNAPSHOT"]);

    // Watching a thread shows its messages: without `threads:content` there is no stream at all
    // (as for following a run), never one with the conversation left out.
    let before = app.counts().await;
    let thin = token("nina", "threads:read agent:demo");
    let refused = connect(&app, "th-thin", "w", &[("authorization", &thin)]).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "permission_denied");

    // Someone else's thread is not theirs to watch.
    let oscar = token("oscar", "threads:read threads:content agent:demo");
    let refused = connect(&app, "th-thin", "w", &[("authorization", &oscar)]).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "permission_denied");
    assert_eq!(app.counts().await, before, "a refused connect stores nothing");
}
on_both_stores!(a_caller_without_content_permission_gets_no_messages);

async fn bad_connects_are_refused_clearly_and_store_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let events = app.run_to_end("demo", &first_run("th-bad", "run-1", "one")).await;
    let before = app.counts().await;
    let expect = |status: u16, code: &'static str| {
        move |response: reqwest::Response| async move {
            assert_eq!(response.status(), status);
            let body: Value = response.json().await.expect("error body");
            assert_eq!(body["error"]["code"], code, "{body}");
        }
    };
    // A thread with no turn yet is not waited for (its first run creates it), and is answered
    // as another person's thread is: no hint whether it exists.
    expect(403, "permission_denied")(connect(&app, "th-none", "w", &[]).await).await;
    let wrong_tenant =
        app.post_json("/v1/agui/agents/demo/connect?tenant=nope", connect_input("th-bad", "w").to_string()).await;
    expect(404, "not_found")(wrong_tenant).await;
    let no_thread = app.post_json("/v1/agui/agents/demo/connect", r#"{"runId":"w"}"#).await;
    expect(400, "bad_request")(no_thread).await;
    let other_turn = "t0123456789abcdef0123456789".get(..25).expect("id").to_string() + ".1";
    expect(400, "bad_last_event_id")(connect(&app, "th-bad", "w", &[("last-event-id", &other_turn)]).await).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("turn");
    let too_far = format!("{turn}.{}", events.len() + 5);
    expect(400, "bad_last_event_id")(connect(&app, "th-bad", "w", &[("last-event-id", &too_far)]).await).await;
    assert_eq!(app.counts().await, before, "a refused connect stores nothing");
}
on_both_stores!(bad_connects_are_refused_clearly_and_store_nothing);

async fn connect_streams_count_against_the_stream_limits(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.limits.max_streams_per_thread = 1;
    let app = TestApp::start_with(config).await;
    app.run_to_end("demo", &first_run("th-limit", "run-1", "one")).await;
    let mut open = EventStream::new(connect(&app, "th-limit", "w1", &[]).await);
    open.until_kind("RUN_FINISHED").await;
    let refused = connect(&app, "th-limit", "w2", &[]).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "too_many_streams");
    drop(open);
    // The slot is given back once the dropped stream's body is gone.
    wait_until(PATIENCE, "the connect stream's slot given back", || async {
        connect(&app, "th-limit", "w3", &[]).await.status() == 200
    })
    .await;
}
on_both_stores!(connect_streams_count_against_the_stream_limits);

async fn a_connect_stream_shows_a_wait_and_the_run_its_decision_opens(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let asked = app.run_to_end("approver", &first_run("th-wait", "run-1", "mail the team")).await;
    let outcome = &asked.last().expect("events").data["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{outcome}");
    let id = outcome["interrupts"][0]["id"].as_str().expect("interrupt id").to_string();

    // Connected while the turn waits for this caller: the turn from its start, ending with the
    // interrupt outcome as a following run shows it; the stream stays open.
    let mut stream = EventStream::new(connect(&app, "th-wait", "watch-w", &[]).await);
    stream.until_kind("RUN_FINISHED").await;
    assert_eq!(kinds(&stream.events)[..3], ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]);
    assert_eq!(stream.events.last().expect("end").data["outcome"]["type"], "interrupt");

    // Decided on another route: the decision opens the next run, which the turn finishes.
    let decided = app
        .client
        .post(app.url(&format!("/v1/interrupts/{id}/decision")))
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(decided.status(), 200);
    until_runs_ended(&mut stream, 2).await;
    let events = stream.events.clone();
    drop(stream);
    let opened = events.iter().position(|e| e.kind() == "RUN_FINISHED").expect("first end") + 1;
    assert_eq!(kinds(&events[opened..])[..2], ["RUN_STARTED", "MESSAGES_SNAPSHOT"]);
    let resumed = events[opened..].iter().find(|e| e.kind() == "CUSTOM").expect("gateway.resume");
    assert_eq!(resumed.data["name"], "gateway.resume");
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");

    official_client_accepts(&events, &connect_input("th-wait", "watch-w")).await;
    every_cut_continues_exactly(&[&app], "th-wait", "watch-w", &events).await;
}
on_both_stores!(a_connect_stream_shows_a_wait_and_the_run_its_decision_opens);

/// A page that waits for another person's approval sees `gateway.waiting` on its connect stream,
/// and the turn go on in the same run once they decide.
async fn a_connect_stream_shows_waiting_for_others_and_the_turn_going_on(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, "")).await;
    let person = |sub: &str, roles: &[&str]| {
        let mut claims = claims("default", sub);
        claims["roles"] = json!(roles);
        format!("Bearer {}", app_token(&claims))
    };
    let (alice, bob) = (person("alice", &[]), person("bob", &["finance"]));
    let started = app
        .post_run_with("foureyes", &first_run("th-4e-watch", "run-1", "wire it"), &[("authorization", &alice)])
        .await;
    let mut run = EventStream::new(started);
    run.until("gateway.waiting", |e| e.data["name"] == "gateway.waiting").await;

    let mut watching = EventStream::new(connect(&app, "th-4e-watch", "watch-a", &[("authorization", &alice)]).await);
    watching.until("gateway.waiting", |e| e.data["name"] == "gateway.waiting").await;
    assert_eq!(count(&watching.events, "RUN_FINISHED"), 0, "waiting for others does not end the run");

    let row = app.store.find_thread("default", "th-4e-watch").await.expect("q").expect("thread");
    let turn = app.store.thread_turns(row.pk).await.expect("turns").pop().expect("turn");
    let id = app.store.turn_interrupts(turn.pk).await.expect("interrupts").first().map(|i| i.id.clone()).expect("id");
    let decided = app
        .client
        .post(app.url(&format!("/v1/interrupts/{id}/decision")))
        .header("authorization", &bob)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(decided.status(), 200);
    watching.until_kind("RUN_FINISHED").await;
    let events = watching.events.clone();
    drop(watching);
    assert_eq!(count(&events, "RUN_STARTED"), 1, "one run through the wait");
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    assert_eq!(count(&events, "TOOL_CALL_RESULT"), 1, "the wire ran once approved");
    official_client_accepts(&events, &connect_input("th-4e-watch", "watch-a")).await;
}
on_both_stores!(a_connect_stream_shows_waiting_for_others_and_the_turn_going_on);
