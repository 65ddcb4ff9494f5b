//! The CopilotKit runtime's routes behind a balancer without affinity (SPEC §2, issue 40): the
//! live thread list's join grant is kept in the database, so the socket opens on whichever
//! instance it reaches and ends there when the caller's access does; a grant that is unknown,
//! ended (on the gateway's clock), of another tenant or of a key revoked since opens nothing;
//! and a page whose run stream dropped gets the rest of the turn through `connect` on another
//! instance, exactly once. The list also tells a page when a thread's turn starts or stops
//! (`thread_run_activity`), wherever the turn runs.

use std::time::Duration;

use agui_gateway::auth::keys;
use agui_gateway::clock::{Clock, TestClock};
use agui_gateway::store::KeyKind;
use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, new_key, rsa_provider};
use crate::copilotkit_runtime::{
    base, get, next_frame, post_stream, pushes_until, run_through_runtime, send_frame, send_json, Socket,
};
use crate::helpers::*;
use crate::on_both_stores;

/// `POST {base}/threads/subscribe` on `app`: the join token.
async fn grant(app: &TestApp, tenant: &str, bearer: Option<&str>) -> String {
    let path = format!("{}/threads/subscribe", base(tenant));
    let (status, body) = send_json(app, reqwest::Method::POST, &path, &json!({}), bearer).await;
    assert_eq!(status, 200, "{body}");
    body["joinToken"].as_str().expect("joinToken").to_string()
}

/// Opens the live list's socket of `tenant` on `app` with `token`: the socket, or the status
/// it was refused with.
async fn open_socket(app: &TestApp, tenant: &str, token: &str) -> Result<Socket, u16> {
    let url = format!("ws://{}{}/threads/realtime/websocket?join_token={token}&vsn=2.0.0", app.address, base(tenant));
    match tokio_tungstenite::connect_async(url).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(other) => panic!("the socket neither opened nor was refused: {other}"),
    }
}

/// Joins the channel of `demo`'s list (its `joinCode`, as the list route names it on `app`).
async fn join(app: &TestApp, socket: &mut Socket, tenant: &str, bearer: Option<&str>) {
    join_agent(app, socket, tenant, "demo", bearer).await;
}

/// Joins the channel of `agent`'s list.
async fn join_agent(app: &TestApp, socket: &mut Socket, tenant: &str, agent: &str, bearer: Option<&str>) {
    let (status, page) = get(app, &format!("{}/threads?agentId={agent}", base(tenant)), bearer).await;
    assert_eq!(status, 200, "{page}");
    let topic = format!("user_meta:{}", page["joinCode"].as_str().expect("joinCode"));
    send_frame(socket, json!(["1", "1", topic, "phx_join", {}])).await;
    let reply = next_frame(socket).await;
    assert_eq!(reply, json!(["1", "1", topic, "phx_reply", {"status": "ok", "response": {}}]));
}

/// Whether the gateway ends the socket within `within` (pushes meanwhile are passed over).
async fn ends_within(socket: &mut Socket, within: Duration) -> bool {
    use futures_util::StreamExt;
    let ended = async {
        loop {
            match socket.next().await {
                None | Some(Err(_)) | Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    };
    tokio::time::timeout(within, ended).await.is_ok()
}

/// Two gateways on one fresh PostgreSQL database with authentication on, as two instances of
/// one deployment behind a balancer without affinity.
// One store: two instances share one database, which is PostgreSQL's part.
async fn two_secured_apps() -> (TestApp, TestApp, TestDatabase) {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let b = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    (a, b, db)
}

/// A token an app exchanged for `sub`: it lives only as long as the app key `akid`.
fn exchanged_token(tenant: &str, sub: &str, akid: &str) -> String {
    let mut claims = claims(tenant, sub);
    claims["akid"] = json!(akid);
    claims["via"] = json!("app:test key");
    claims["scope"] = json!("threads:read threads:content agent:demo");
    app_token(&claims)
}

#[tokio::test]
async fn a_grant_minted_on_one_instance_opens_the_live_list_on_another() {
    let (a, b, _db) = two_secured_apps().await;
    let alice = app_token(&claims("acme", "alice"));
    run_through_runtime(&a, "acme", "demo", &first_run("th-far-grant", "run-1", "hello"), Some(&alice)).await;

    let token = grant(&a, "acme", Some(&alice)).await;
    let mut socket = open_socket(&b, "acme", &token).await.expect("the socket opens on the other instance");
    join(&b, &mut socket, "acme", Some(&alice)).await;

    // Renamed through the instance that minted the grant: the socket on the other one tells it.
    let path = format!("{}/threads/th-far-grant", base("acme"));
    let (status, _) =
        send_json(&a, reqwest::Method::PATCH, &path, &json!({"agentId": "demo", "name": "Named on a"}), Some(&alice))
            .await;
    assert_eq!(status, 200);
    let told = pushes_until(&mut socket, |p| p["thread"]["name"] == "Named on a").await;
    let last = told.last().expect("a push");
    assert_eq!((&last["operation"], &last["threadId"]), (&json!("updated"), &json!("th-far-grant")), "{told:?}");

    // The same grant opens a second socket on either instance (the page reconnects).
    for app in [&a, &b] {
        assert!(open_socket(app, "acme", &token).await.is_ok(), "a second socket with the grant");
    }
}

#[tokio::test]
async fn a_revoked_key_ends_a_live_list_opened_on_another_instance() {
    let (a, b, _db) = two_secured_apps().await;
    let (tenant_key, tenant_key_id) = new_key(&a, "acme", &["demo"], KeyKind::Tenant).await;
    let (_, app_key_id) = new_key(&a, "acme", &["demo"], KeyKind::App).await;
    let erin = exchanged_token("acme", "erin", &app_key_id);
    let mut sockets = Vec::new();
    for bearer in [&tenant_key, &erin] {
        let token = grant(&a, "acme", Some(bearer)).await;
        let mut socket = open_socket(&b, "acme", &token).await.expect("the socket opens on the other instance");
        join(&b, &mut socket, "acme", Some(bearer)).await;
        sockets.push((socket, token));
    }

    // Revoked where the grants were minted: the sockets on the other instance end, and the
    // grants open nothing any more, on either instance.
    for (id, (socket, token)) in [&tenant_key_id, &app_key_id].into_iter().zip(sockets.iter_mut()) {
        assert!(keys::revoke(a.store.as_ref(), a.auth.clock().as_ref(), "acme", id, "cli").await.expect("revoke"));
        assert!(ends_within(socket, Duration::from_secs(5)).await, "the socket of {id} ended within 5 s");
        for app in [&a, &b] {
            assert_eq!(open_socket(app, "acme", token).await.err(), Some(401), "{id}'s grant after its revocation");
        }
    }
}

/// A grant opens sockets for a day, or until the caller's credential ends if that is sooner,
/// on the gateway's clock; an unknown token, another tenant's grant, or a grant of a key
/// revoked since, opens nothing. Only the token's hash is stored; ended grants are deleted as
/// new ones are made, and a caller keeps at most its newest 100.
async fn a_join_token_opens_nothing_unknown_ended_or_of_another_tenant(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let config = auth_config(&db.url, &rsa_provider());
    let leeway_ms = i64::try_from(config.auth.leeway_secs).expect("leeway") * 1000;
    let clock = TestClock::starting_now();
    let app = TestApp::start_with_clock(config, clock.clone()).await;
    let token_claims = claims("acme", "alice");
    let alice = app_token(&token_claims);
    let (key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (revoked_key, revoked_key_id) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (_, app_key_id) = new_key(&app, "acme", &["demo"], KeyKind::App).await;
    // The clock stands still until moved: every grant is minted at this time.
    let minted_ms = clock.now_ms();
    let alices = grant(&app, "acme", Some(&alice)).await;
    let keys = grant(&app, "acme", Some(&key)).await;
    let revokeds = grant(&app, "acme", Some(&revoked_key)).await;
    let erins = grant(&app, "acme", Some(&exchanged_token("acme", "erin", &app_key_id))).await;

    let stored = every_table_as_text(&db.url).await;
    for token in [&alices, &keys, &revokeds, &erins] {
        assert_eq!(token.len(), 64, "{token}");
        assert!(!stored.contains(token.as_str()), "a join token is stored as it was handed out");
    }

    let unknown = "0123456789abcdef".repeat(4);
    for (what, token) in [("unknown", unknown.as_str()), ("malformed", "nope"), ("missing", "")] {
        assert_eq!(open_socket(&app, "acme", token).await.err(), Some(401), "{what}");
    }
    assert_eq!(open_socket(&app, "default", &keys).await.err(), Some(401), "acme's grant on default's socket");

    for (id, token) in [(&revoked_key_id, &revokeds), (&app_key_id, &erins)] {
        assert!(open_socket(&app, "acme", token).await.is_ok(), "{id}'s grant before its revocation");
        assert!(keys::revoke(app.store.as_ref(), clock.as_ref(), "acme", id, "cli").await.expect("revoke"));
        assert_eq!(open_socket(&app, "acme", token).await.err(), Some(401), "{id}'s grant once it is revoked");
    }

    // A person's grant ends with their token (its leeway included).
    let token_ends_ms = token_claims["exp"].as_i64().expect("exp") * 1000 + leeway_ms;
    clock.set(token_ends_ms - 1);
    assert!(open_socket(&app, "acme", &alices).await.is_ok(), "alice's grant while her token holds");
    clock.set(token_ends_ms);
    assert_eq!(open_socket(&app, "acme", &alices).await.err(), Some(401), "alice's grant once her token ended");

    // A key's grant, a day after it was minted.
    clock.set(minted_ms + 86_400_000 - 1);
    assert!(open_socket(&app, "acme", &keys).await.is_ok(), "the key's grant within its day");
    clock.set(minted_ms + 86_400_000);
    assert_eq!(open_socket(&app, "acme", &keys).await.err(), Some(401), "the key's grant after its day");

    // Ended grants are deleted when the next is made; a caller keeps its newest 100.
    assert_eq!(grant_rows(&db.url).await, 4);
    let first = grant(&app, "acme", Some(&key)).await;
    assert_eq!(grant_rows(&db.url).await, 1, "the ended grants were deleted");
    let mut newest = first.clone();
    for _ in 0..100 {
        newest = grant(&app, "acme", Some(&key)).await;
    }
    assert_eq!(grant_rows(&db.url).await, 100);
    assert_eq!(open_socket(&app, "acme", &first).await.err(), Some(401), "the caller's oldest grant made room");
    assert!(open_socket(&app, "acme", &newest).await.is_ok(), "the newest grant");
}

/// The grants stored, ended or not.
async fn grant_rows(database_url: &str) -> i64 {
    const COUNT: &str = "SELECT COUNT(*) FROM live_list_grants";
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        sqlx::query_scalar(COUNT).fetch_one(&mut connection).await.expect("count")
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        sqlx::query_scalar(COUNT).fetch_one(&mut connection).await.expect("count")
    }
}
on_both_stores!(a_join_token_opens_nothing_unknown_ended_or_of_another_tenant);

/// An agent that answers slowly, a few characters at a time, with a pause between two messages:
/// a page loses its stream mid-answer and reconnects well before the turn ends. `first_steps`
/// (TOML step tables) come before the slow message `said` (`{input}` in it is the user's words).
fn trickling_agent(name: &str, first_steps: &[&str], said: &str) -> agui_gateway::config::AgentConfig {
    let mut steps: Vec<String> = first_steps.iter().map(|step| step.to_string()).collect();
    steps.push(format!("{{ say = {said:?} }}"));
    steps.push("{ wait_ms = 300 }".to_string());
    steps.push(r#"{ say = "And a second message after the pause." }"#.to_string());
    let steps = steps.join(",\n  ");
    let text =
        format!("name = {name:?}\nkind = \"script\"\nchunk_chars = 3\nchunk_delay_ms = 25\nsteps = [\n  {steps},\n]\n");
    toml::from_str(&text).unwrap_or_else(|error| panic!("agent config {text}: {error}"))
}

fn trickle_agent() -> agui_gateway::config::AgentConfig {
    trickling_agent("trickle", &[], "One few characters at a time, so that a page can lose its stream halfway: {input}")
}

/// What AG-UI's client makes of events, for the assistant's text: a `MESSAGES_SNAPSHOT` replaces
/// the messages, `TEXT_MESSAGE_START` adds one, `TEXT_MESSAGE_CONTENT` extends it.
fn apply(messages: &mut Vec<Value>, events: &[SseEvent]) {
    for event in events {
        match event.kind() {
            "MESSAGES_SNAPSHOT" => *messages = event.data["messages"].as_array().cloned().unwrap_or_default(),
            "TEXT_MESSAGE_START" => messages.push(
                json!({"id": event.data["messageId"], "role": event.data["role"].as_str().unwrap_or("assistant"), "content": ""}),
            ),
            "TEXT_MESSAGE_CONTENT" => {
                let message = messages.iter_mut().rev().find(|m| m["id"] == event.data["messageId"]);
                let message = message.unwrap_or_else(|| panic!("a delta of an unknown message: {}", event.data));
                let text = format!("{}{}", message["content"].as_str().unwrap_or(""), event.data["delta"].as_str().unwrap_or(""));
                message["content"] = json!(text);
            }
            _ => {}
        }
    }
}

/// The assistant's messages with text, as `(id, text)`.
fn answers(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| {
            Some((m["id"].as_str()?.to_string(), m["content"].as_str().filter(|c| !c.is_empty())?.to_string()))
        })
        .collect()
}

// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn connect_on_another_instance_completes_a_dropped_answer_exactly_once() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let start = || {
        let mut config = test_config(&db.url);
        config.agents.push(trickle_agent());
        TestApp::start_with(config)
    };
    let (a, b) = (start().await, start().await);
    let input = first_run("th-ck-far-resume", "run-1", "resume me");
    let response = post_stream(&a, &format!("{}/agent/trickle/run", base("default")), &input, None).await;
    assert_eq!(response.status(), 200);
    let mut stream = EventStream::new(response);
    until_three_deltas(&mut stream).await;
    // What the page had when its stream dropped.
    let mut messages = input["messages"].as_array().cloned().expect("messages");
    apply(&mut messages, &stream.events);
    let had = stream.events.clone();
    drop(stream);
    let thread = a.store.find_thread("default", "th-ck-far-resume").await.expect("read").expect("thread");
    let turn = a.store.thread_turns(thread.pk).await.expect("turns").remove(0);
    assert_eq!(turn.status.as_str(), "running", "the page reconnects while the turn runs");

    let url = format!("{}/agent/trickle/connect", base("default"));
    let body = json!({"threadId": "th-ck-far-resume", "runId": "run-1"});
    let resumed = read_events(post_stream(&b, &url, &body, None).await, None).await;
    assert_eq!(kinds(&resumed).first(), Some(&"RUN_STARTED"), "{:?}", kinds(&resumed));
    assert_eq!(kinds(&resumed).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&resumed));
    assert!(resumed.iter().any(|e| e.kind() == "TEXT_MESSAGE_CONTENT"), "the turn was followed live");
    let ids: Vec<&str> = resumed.iter().filter_map(|e| e.id.as_deref()).collect();
    assert_eq!(ids.len(), resumed.len(), "every event has its id");
    let unique: std::collections::HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no event twice: {ids:?}");
    apply(&mut messages, &resumed);

    // The whole turn as the thread keeps it, read once it ended.
    let ended = read_events(post_stream(&a, &url, &json!({"threadId": "th-ck-far-resume"}), None).await, None).await;
    let whole = ended.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    let whole = answers(whole.data["messages"].as_array().expect("messages"));
    assert_eq!(whole.len(), 2, "{whole:?}");
    assert_eq!(answers(&messages), whole, "the page's answer, from {} events before the drop", had.len());
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "{messages:?}");
}

/// As [`trickle_agent`], after an approval: a turn that waited, was decided, and runs on.
fn trickle_approver_agent() -> agui_gateway::config::AgentConfig {
    trickling_agent(
        "trickle_approver",
        &[
            r#"{ say = "Let me send that." }"#,
            r#"{ tool = "send_email", args = { body = "{input}" }, result = "sent", approval = "always" }"#,
        ],
        "Sending it now, a few characters at a time, so that a page can lose its stream: {input}",
    )
}

/// A page whose stream of a resumed turn (an approval decided, the turn running on) dropped
/// reconnects, on another instance where the store is shared: the connect goes past the wait
/// the turn already left and follows the turn to its end, every answer exactly once.
async fn connect_follows_a_decided_turn_past_its_wait_to_its_end(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let start = || {
        let mut config = test_config(&db.url);
        config.agents.push(trickle_approver_agent());
        TestApp::start_with(config)
    };
    let a = start().await;
    let other;
    let b = match backend {
        Backend::Postgres => {
            other = start().await;
            &other
        }
        Backend::Sqlite => &a,
    };
    let run = format!("{}/agent/trickle_approver/run", base("default"));
    let mut input = first_run("th-ck-decided", "run-1", "the report");
    input["protocolVersion"] = json!("1.0");
    let asked = read_events(post_stream(&a, &run, &input, None).await, None).await;
    let outcome = &asked.last().expect("the end").data["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{:?}", kinds(&asked));
    let interrupt = outcome["interrupts"][0]["id"].clone();
    let mut messages = input["messages"].as_array().cloned().expect("messages");
    apply(&mut messages, &asked);

    let resume = json!({"threadId": "th-ck-decided", "runId": "run-2", "protocolVersion": "1.0", "messages": [],
        "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]});
    let mut stream = EventStream::new(post_stream(&a, &run, &resume, None).await);
    until_three_deltas(&mut stream).await;
    apply(&mut messages, &stream.events);
    drop(stream);

    let connect = format!("{}/agent/trickle_approver/connect", base("default"));
    let body = json!({"threadId": "th-ck-decided", "runId": "run-2", "protocolVersion": "1.0"});
    let resumed = read_events(post_stream(b, &connect, &body, None).await, None).await;
    let end = resumed.last().expect("the end");
    assert_eq!(end.kind(), "RUN_FINISHED", "{:?}", kinds(&resumed));
    assert_ne!(
        end.data["outcome"]["type"],
        "interrupt",
        "the connect ended at the wait the turn left: {:?}",
        kinds(&resumed)
    );
    apply(&mut messages, &resumed);
    let thread = a.store.find_thread("default", "th-ck-decided").await.expect("read").expect("thread");
    let turn = a.store.thread_turns(thread.pk).await.expect("turns").remove(0);
    assert_eq!(turn.status.as_str(), "succeeded");

    let ended = read_events(post_stream(&a, &connect, &json!({"threadId": "th-ck-decided"}), None).await, None).await;
    let whole = ended.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    let whole = answers(whole.data["messages"].as_array().expect("messages"));
    assert_eq!(whole.len(), 3, "{whole:?}");
    assert_eq!(answers(&messages), whole);
}
on_both_stores!(connect_follows_a_decided_turn_past_its_wait_to_its_end);

/// The run-activity pushes of the socket up to and including the first that `until` accepts
/// (the list's own `thread_metadata` pushes are passed over).
async fn activity_until(socket: &mut Socket, until: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut told = Vec::new();
    loop {
        let frame = next_frame(socket).await;
        if frame[3] == "thread_metadata" {
            continue;
        }
        assert_eq!(frame[3], "thread_run_activity", "{frame}");
        assert_eq!(frame[0], "1", "pushed on the joined channel: {frame}");
        let done = until(&frame[4]);
        told.push(frame[4].clone());
        if done {
            return told;
        }
    }
}

/// `<CopilotChat>` showing a thread hears when its turn starts and stops (and connects to catch
/// up): a run started on one instance is told on a socket open on another where the store is
/// shared, with the run's id, so the page that made it knows it for its own; another person's
/// runs are never told.
async fn the_live_list_tells_when_a_threads_turn_starts_and_stops(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let a = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let other;
    let b = match backend {
        Backend::Postgres => {
            other = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
            &other
        }
        Backend::Sqlite => &a,
    };
    let alice = app_token(&claims("acme", "alice"));
    let bob = app_token(&claims("acme", "bob"));
    let token = grant(&a, "acme", Some(&alice)).await;
    let mut socket = open_socket(b, "acme", &token).await.expect("the socket opens");
    join_agent(b, &mut socket, "acme", "waiter", Some(&alice)).await;

    // Bob's turn first, then alice's: only alice's is told.
    let run = format!("{}/agent/waiter/run", base("acme"));
    let mut bobs = EventStream::new(post_stream(&a, &run, &first_run("th-act-bob", "run-b", "wait"), Some(&bob)).await);
    bobs.until_kind("TEXT_MESSAGE_END").await;
    let mut alices =
        EventStream::new(post_stream(&a, &run, &first_run("th-act", "run-a1", "wait"), Some(&alice)).await);
    alices.until_kind("TEXT_MESSAGE_END").await;
    let started = activity_until(&mut socket, |p| p["threadId"] == "th-act").await;
    assert_eq!(
        started.last(),
        Some(&json!({"threadId": "th-act", "agentId": "waiter", "runId": "run-a1", "eventType": "RUN_STARTED"})),
        "{started:?}"
    );

    // Stopped: the run ends as its stream ends it (cancelled: `RUN_FINISHED`).
    let stop = format!("{}/agent/waiter/stop/th-act", base("acme"));
    let (status, answer) = send_json(&a, reqwest::Method::POST, &stop, &json!({}), Some(&alice)).await;
    assert_eq!((status, &answer["stopped"]), (200, &json!(true)), "{answer}");
    let stopped = activity_until(&mut socket, |p| p["threadId"] == "th-act").await;
    assert_eq!(
        stopped.last(),
        Some(&json!({"threadId": "th-act", "agentId": "waiter", "runId": "run-a1", "eventType": "RUN_FINISHED"})),
        "{stopped:?}"
    );
    let told = format!("{started:?}{stopped:?}");
    assert!(!told.contains("th-act-bob"), "alice heard of bob's run: {told}");
    drop((bobs, alices));
}
on_both_stores!(the_live_list_tells_when_a_threads_turn_starts_and_stops);

/// Reads `stream` until three pieces of the answer's text have come (a stream to cut mid-answer).
async fn until_three_deltas(stream: &mut EventStream) {
    let deltas = std::cell::Cell::new(0);
    stream
        .until("three deltas", |event| {
            deltas.set(deltas.get() + usize::from(event.kind() == "TEXT_MESSAGE_CONTENT"));
            deltas.get() >= 3
        })
        .await;
}
