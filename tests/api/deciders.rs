//! Interrupts decided by people other than the caller (§5.1–§5.3 with real callers): four
//! eyes, two deciders racing on two instances, an API key that may not resume, the audit trail.

use std::time::Duration;

use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, rsa_provider};
use crate::helpers::*;
use crate::on_both_stores;

fn token(sub: &str, roles: &[&str]) -> String {
    let mut claims = claims("default", sub);
    claims["roles"] = json!(roles);
    app_token(&claims)
}

async fn post_as(app: &TestApp, token: &str, agent: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.run_url(agent))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent")
}

async fn four_eyes_the_starter_waits_and_another_person_with_the_role_decides(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let (alice, bob) = (token("alice", &[]), token("bob", &["finance"]));
    let response = post_as(&app, &alice, "foureyes", &first_run("th-4e", "run-1", "wire it")).await;
    assert_eq!(response.status(), 200);
    let reader = tokio::spawn(read_events(response, None));
    // Alice's stream says who the turn waits for, and stays open.
    let thread: Value = wait_for(PATIENCE, "the thread to wait for a decision", || async {
        let thread: Value = app
            .client
            .get(app.url("/v1/threads/th-4e"))
            .bearer_auth(&alice)
            .send()
            .await
            .expect("get")
            .json()
            .await
            .expect("json");
        (thread["status"] == "waiting").then_some(thread)
    })
    .await;
    assert_eq!(thread["interrupts"], json!([]), "alice may not decide her own wire");
    let row = app.store.find_thread("default", "th-4e").await.expect("q").expect("thread");
    let turn = app.store.thread_turns(row.pk).await.expect("turns").pop().expect("turn");
    let interrupt_id = app.store.turn_interrupts(turn.pk).await.expect("interrupts").first().map(|i| i.id.clone());
    let id = interrupt_id.expect("the turn waits");
    assert!(!reader.is_finished(), "the starter's run goes on while others decide");
    let url = app.url(&format!("/v1/interrupts/{id}/decision"));
    let by_alice = app
        .client
        .post(&url)
        .bearer_auth(&alice)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(by_alice.status(), 403);
    assert_eq!(by_alice.json::<Value>().await.expect("json")["error"]["code"], "not_a_decider");
    let by_bob = app
        .client
        .post(&url)
        .bearer_auth(&bob)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(by_bob.status(), 200);
    assert_eq!(by_bob.json::<Value>().await.expect("json")["outcome"], "decided");
    let events =
        tokio::time::timeout(Duration::from_secs(10), reader).await.expect("alice's run ends").expect("reader");
    let kinds = kinds(&events);
    assert!(kinds.contains(&"CUSTOM"), "{kinds:?}");
    assert_eq!(events.iter().find(|e| e.kind() == "CUSTOM").expect("waiting").data["name"], "gateway.waiting");
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    assert_eq!(events.iter().filter(|e| e.kind() == "TOOL_CALL_RESULT").count(), 1, "the wire ran once approved");
    // The decision is Bob's in the audit trail.
    let audit = app.store.audit_rows(Some("default"), 0, 100).await.expect("audit");
    let decision = audit.iter().find(|row| row.entry.action == "interrupt.decide").expect("a decision row");
    assert_eq!(decision.entry.actor, "person:bob");
    assert!(decision.entry.detail.contains(&id));
}
on_both_stores!(four_eyes_the_starter_waits_and_another_person_with_the_role_decides);

// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn two_people_resuming_at_once_on_two_instances_decide_once_and_a_key_may_not_resume() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let mut config = auth_config(&db.url, &rsa_provider());
    config.console_url = "https://console.example.com".into();
    let a = TestApp::start_with(config.clone()).await;
    let b = TestApp::start_with(config).await;
    // A tenant key starts the turn: a tenant thread, which every person of the tenant reads.
    let (key, _) = crate::auth::new_key(&a, "default", &["foureyes"], agui_gateway::store::KeyKind::Tenant).await;
    let events =
        read_events(post_as(&a, &key, "foureyes", &first_run("th-race2", "run-1", "wire it")).await, None).await;
    let last = events.last().expect("end");
    assert_eq!(last.data["outcome"]["type"], "interrupt", "a key sees every open interrupt");
    let id = last.data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string();
    let entries = json!([{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]);
    let resume = |run: &str| json!({"threadId": "th-race2", "runId": run, "messages": [], "resume": entries.clone()});

    let by_key = post_as(&a, &key, "foureyes", &resume("by-key")).await;
    assert_eq!(by_key.status(), 403);
    let body: Value = by_key.json().await.expect("json");
    assert_eq!(body["error"]["code"], "permission_denied");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("console.example.com")), "{body}");

    let (bob, carol) = (token("bob", &["finance"]), token("carol", &["finance"]));
    let (on_a, on_b) = (resume("by-bob"), resume("by-carol"));
    let (one, two) = tokio::join!(post_as(&a, &bob, "foureyes", &on_a), post_as(&b, &carol, "foureyes", &on_b));
    let (one, two) = (read_events(one, None).await, read_events(two, None).await);
    let outcomes: Vec<Value> = [&one, &two].iter().map(|e| e[2].data["value"]["outcome"].clone()).collect();
    assert!(outcomes.contains(&json!("decided")) && outcomes.contains(&json!("already_decided")), "{outcomes:?}");
    let thread = a.store.find_thread("default", "th-race2").await.expect("q").expect("thread");
    let turn = a.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    let decided: Vec<_> = a
        .store
        .turn_interrupts(turn.pk)
        .await
        .expect("interrupts")
        .into_iter()
        .filter(|i| i.status.as_str() == "decided")
        .collect();
    assert_eq!(decided.len(), 1);
    let audit = a.store.audit_rows(Some("default"), 0, 100).await.expect("audit");
    assert_eq!(audit.iter().filter(|row| row.entry.action == "interrupt.decide").count(), 1, "one decision recorded");
}

/// §5.1: a waiting call's arguments (`gateway/details`) are content: a person whose token holds
/// `threads:read` without `threads:content` sees that the call waits and who decides, never what
/// it would send — on `GET /v1/threads/{thread}` as on a stream.
// One store: what a caller is shown is decided when the stream is rendered.
#[tokio::test]
async fn a_waiting_calls_arguments_are_shown_only_with_the_content_permission() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = token("alice", &[]);
    let events =
        read_events(post_as(&app, &alice, "approver", &first_run("th-details", "run-1", "mail it")).await, None).await;
    let shown = &events.last().expect("end").data["outcome"]["interrupts"][0];
    assert_eq!(shown["metadata"]["gateway/details"]["to"], "team@example.com", "a content holder sees them");
    let mut reading = claims("default", "alice");
    reading["scope"] = json!("threads:read");
    let reader = app_token(&reading);
    let thread = |token: String| {
        let request = app.client.get(app.url("/v1/threads/th-details")).bearer_auth(token);
        async move { request.send().await.expect("get").json::<Value>().await.expect("json") }
    };
    let full = thread(alice.clone()).await;
    assert_eq!(full["interrupts"][0]["metadata"]["gateway/details"]["to"], "team@example.com");
    let limited = thread(reader).await;
    let interrupt = &limited["interrupts"][0];
    assert_eq!(interrupt["id"], shown["id"], "the call is shown waiting: {limited}");
    assert!(interrupt["metadata"]["gateway/deciders"].is_string(), "and who decides: {interrupt}");
    assert!(interrupt["metadata"].get("gateway/details").is_none(), "never its arguments: {interrupt}");
    assert!(!limited.to_string().contains("team@example.com"), "{limited}");
}

/// §10 with §5.2: a person erases her thread while its turn waits for someone else's
/// decision. Her stream, which showed `gateway.waiting` and went on, ends as on a cancel; the
/// interrupt nobody decided is gone with the thread.
// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn erasing_a_thread_that_waits_for_another_person_ends_the_waiting_stream() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = token("alice", &[]);
    let response = post_as(&app, &alice, "foureyes", &first_run("th-4e-gone", "run-1", "wire it")).await;
    assert_eq!(response.status(), 200);
    let mut stream = EventStream::new(response);
    stream.until("gateway.waiting", |e| e.data["name"] == "gateway.waiting").await;
    let erased = app
        .client
        .delete(app.url("/v1/threads/th-4e-gone?tenant=default"))
        .bearer_auth(&alice)
        .send()
        .await
        .expect("delete");
    assert_eq!(erased.status(), 204);
    let rest = tokio::time::timeout(PATIENCE, stream.rest()).await.expect("the waiting stream ends");
    let last = rest.last().expect("events");
    assert_eq!(
        (last.kind(), &last.data["outcome"]),
        ("RUN_FINISHED", &json!({"type": "cancelled"})),
        "{:?}",
        kinds(&rest)
    );
    assert!(app.store.find_thread("default", "th-4e-gone").await.expect("q").is_none());
    assert_eq!(app.counts().await.interrupts, 0);
}
