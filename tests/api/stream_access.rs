//! A stream lives only as long as its caller's right to read (SPEC §2.1): a person's token that
//! expires while a stream is open ends it with `RUN_ERROR revoked` saying so, the turn runs on,
//! and a reconnect with a fresh token and `Last-Event-ID` continues exactly. A thread erased
//! while streams show it ends them the same way (on any instance: the erasure is read from the
//! audit trail); a thread started again under the same id is another thread.

use std::time::Duration;

use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, rsa_provider};
use crate::helpers::*;

fn token_for(seconds: u64) -> String {
    let mut claims = claims("default", "alice");
    let now = claims["iat"].as_u64().expect("iat");
    claims["exp"] = json!(now + seconds);
    app_token(&claims)
}

async fn follow(app: &TestApp, token: &str, input: &Value, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.run_url("pauser"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(input.to_string());
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    request.send().await.expect("sent")
}

async fn an_expired_token_ends_its_open_stream_and_a_fresh_one_continues_it(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = auth_config(&db.url, &rsa_provider());
    config.auth.leeway_secs = 0;
    let pauser = "name = \"pauser\"\nkind = \"script\"\nsteps = [ { say = \"before\" }, { wait_ms = 4000 }, { say = \"after\" } ]";
    config.agents.push(toml::from_str(pauser).expect("agent"));
    let app = TestApp::start_with(config).await;
    let input = first_run("th-expiry", "run-1", "wait for it");
    let short = token_for(2);
    let started = std::time::Instant::now();
    let response = follow(&app, &short, &input, None).await;
    assert_eq!(response.status(), 200);
    let head = tokio::time::timeout(Duration::from_secs(10), read_events(response, None)).await.expect("it ends");
    let end = &head.last().expect("end").data;
    assert_eq!((end["type"].as_str(), end["code"].as_str()), (Some("RUN_ERROR"), Some("revoked")), "{end}");
    assert!(end["message"].as_str().is_some_and(|m| m.contains("expired")), "{end}");
    assert!(started.elapsed() < Duration::from_secs(4), "ended at the expiry, before the turn's pause was over");
    let text: String = text_of(&head);
    assert_eq!(text, "before");

    // The turn ran on; a fresh token continues the stream right after the last event shown.
    // (The lone RUN_ERROR is not of the log: its id is `0`.)
    let last = head.iter().rev().filter_map(|e| e.id.clone()).find(|id| id != "0").expect("an id");
    let again = follow(&app, &token_for(600), &input, Some(&last)).await;
    assert_eq!(again.status(), 200);
    let tail = read_events(again, None).await;
    assert_eq!(tail.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&tail));
    let seq = |e: &SseEvent| e.id.as_deref().and_then(|id| id.rsplit('.').next()?.parse::<i64>().ok());
    let first_after = tail.iter().find_map(seq).expect("ids");
    let last_shown = head.iter().rev().filter(|e| e.id.as_deref() != Some("0")).find_map(seq);
    assert_eq!(Some(first_after - 1), last_shown, "nothing missed, nothing twice");
    let text: String = text_of(&tail);
    assert_eq!(text, "after");
}
crate::on_both_stores!(an_expired_token_ends_its_open_stream_and_a_fresh_one_continues_it);

/// Starts a turn on `thread` as `token` and reads it to its end.
async fn run_to_end_as(app: &TestApp, token: &str, thread: &str) {
    let input = first_run(thread, &unique("run"), "hello");
    let response = app
        .client
        .post(app.run_url("demo"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .expect("run");
    assert_eq!(response.status(), 200);
    let events = read_events(response, None).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"), "{thread}: {:?}", kinds(&events));
}

/// A connect stream on `thread` as `token`, read until it has shown the thread's last turn.
async fn watch(app: &TestApp, token: &str, thread: &str) -> EventStream {
    let input = json!({ "threadId": thread, "runId": unique("watch"), "protocolVersion": "1.0", "messages": [] });
    let response = app
        .client
        .post(app.url("/v1/agui/agents/demo/connect"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .expect("connect");
    assert_eq!(response.status(), 200);
    let mut stream = EventStream::new(response);
    stream.until_kind("RUN_FINISHED").await;
    stream
}

/// Reads `stream` for `window`: true when it stayed open and ended no run with an error.
async fn stays_open(stream: &mut EventStream, window: Duration) -> bool {
    let before = stream.events.len();
    let open = tokio::time::timeout(window, async { while stream.read_chunk().await {} }).await.is_err();
    open && stream.events[before..].iter().all(|e| e.kind() != "RUN_ERROR")
}

async fn a_thread_erased_while_streams_show_it_ends_those_streams_only(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let config = auth_config(&db.url, &rsa_provider());
    let check = Duration::from_millis(config.auth.revocation_check_ms);
    let app = TestApp::start_with(config).await;
    let token = token_for(600);
    run_to_end_as(&app, &token, "th-erased").await;
    run_to_end_as(&app, &token, "th-kept").await;
    let mut erased = watch(&app, &token, "th-erased").await;
    let mut kept = watch(&app, &token, "th-kept").await;

    let deleted = app
        .client
        .delete(app.url("/v1/threads/th-erased?tenant=default"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 204);
    let ended = tokio::time::timeout(check * 10, async { while erased.read_chunk().await {} }).await;
    assert!(ended.is_ok(), "the stream on the erased thread ended within the check interval (and a margin)");
    let end = &erased.events.last().expect("an end").data;
    assert_eq!((end["type"].as_str(), end["code"].as_str()), (Some("RUN_ERROR"), Some("revoked")), "{end}");
    assert!(end["message"].as_str().is_some_and(|m| m.contains("deleted")), "{end}");
    assert!(stays_open(&mut kept, check * 4).await, "a stream on another thread goes on");

    // The same id started again is another thread: the erasure of the first one ends nothing.
    run_to_end_as(&app, &token, "th-erased").await;
    let mut again = watch(&app, &token, "th-erased").await;
    assert!(stays_open(&mut again, check * 4).await, "a stream on the new thread of that id goes on");
}
crate::on_both_stores!(a_thread_erased_while_streams_show_it_ends_those_streams_only);
