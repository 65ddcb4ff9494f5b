//! `GET /v1/threads/{thread}/audit` (§8, the console): a tenant's admins read any of its
//! threads' audit trails — that thread's rows only; everyone else, a thread that does not
//! exist and another tenant's admin are refused alike, and reading writes nothing.

use serde_json::{json, Value};

use crate::auth::{auth_config, person_token as token, rsa_provider};
use crate::helpers::*;
use crate::on_both_stores;

async fn run_as(app: &TestApp, token: &str, agent: &str, thread: &str) -> Vec<SseEvent> {
    let response = app
        .client
        .post(app.run_url(agent))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(first_run(thread, "run-1", "ship it").to_string())
        .send()
        .await
        .expect("sent");
    read_events(response, None).await
}

async fn audit_as(app: &TestApp, token: &str, path: &str) -> (u16, Value) {
    let response = app.client.get(app.url(path)).bearer_auth(token).send().await.expect("get");
    (response.status().as_u16(), response.json().await.expect("json"))
}

async fn an_admin_reads_a_threads_trail_and_nobody_else_does(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = auth_config(&db.url, &rsa_provider());
    for tenant in &mut config.tenants {
        tenant.admin_roles = vec!["admin".into()];
    }
    let app = TestApp::start_with(config).await;
    let alice = token("default", "alice", &[]);
    let erin = token("default", "erin", &["admin"]);
    let events = run_as(&app, &alice, "approver", "th-trail").await;
    let id = events.last().expect("an end").data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string();
    let decided = app
        .client
        .post(app.url(&format!("/v1/interrupts/{id}/decision")))
        .bearer_auth(&alice)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(decided.status(), 200);
    run_as(&app, &alice, "demo", "th-other").await;
    // The decided turn goes on after the decision's answer: it ends before the counting starts.
    app.wait_thread_turns_ended("th-trail").await;

    let before = app.counts().await;
    let (status, trail) = audit_as(&app, &erin, "/v1/threads/th-trail/audit").await;
    assert_eq!(status, 200, "{trail}");
    assert_eq!(trail["threadId"], "th-trail");
    let rows = trail["audit"].as_array().expect("rows");
    let actions: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["action"].as_str().unwrap_or(""), r["actor"].as_str().unwrap_or(""))).collect();
    assert_eq!(actions.first(), Some(&("run.start", "person:alice")), "{trail}");
    assert!(actions.contains(&("interrupt.decide", "person:alice")), "{trail}");
    assert!(rows.iter().all(|r| r["detail"]["thread"] != "th-other"), "only this thread's rows: {trail}");
    assert_eq!(rows[0]["detail"]["door"], "agui");
    assert_eq!(app.counts().await, before, "reading the trail writes nothing");

    // Not an admin, no such thread, another tenant's admin: the same refusal.
    let (status, refused) = audit_as(&app, &alice, "/v1/threads/th-trail/audit").await;
    assert_eq!((status, refused["error"]["code"].clone()), (403, json!("permission_denied")));
    let (status, missing) = audit_as(&app, &erin, "/v1/threads/th-nothing/audit").await;
    assert_eq!((status, &missing), (403, &refused), "unknown and forbidden answer alike");
    let acme_admin = token("acme", "olga", &["admin"]);
    let (status, _) = audit_as(&app, &acme_admin, "/v1/threads/th-trail/audit?tenant=default").await;
    assert_eq!(status, 403);
    let (status, bad) = audit_as(&app, &erin, "/v1/threads/no%20spaces/audit").await;
    assert_eq!((status, bad["error"]["code"].clone()), (400, json!("bad_request")));
}
on_both_stores!(an_admin_reads_a_threads_trail_and_nobody_else_does);
