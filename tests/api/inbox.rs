//! `GET /v1/interrupts` (the inbox the console shows) and the console's page itself: each person
//! sees what they may decide across the tenant's threads — also on threads they may not read —
//! and, apart, what waits on their own threads for others; nothing of anyone else's; the call's
//! arguments only with the content permission; bad requests answered with their code and
//! nothing changed. The page is served from the binary with a strict CSP, or not at all.

use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, person_token as token, rsa_provider};
use crate::helpers::*;
use crate::on_both_stores;

async fn start_as(app: &TestApp, token: &str, agent: &str, thread: &str) -> EventStream {
    let response = app
        .client
        .post(app.run_url(agent))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(first_run(thread, "run-1", "pay the invoice").to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    EventStream::new(response)
}

async fn get_as(app: &TestApp, token: &str, path: &str) -> reqwest::Response {
    app.client.get(app.url(path)).bearer_auth(token).send().await.expect("get")
}

async fn inbox_of(app: &TestApp, token: &str, tenant: &str) -> Value {
    let response = get_as(app, token, &format!("/v1/interrupts?tenant={tenant}")).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

fn ids(entries: &Value, key: &str) -> Vec<String> {
    entries
        .as_array()
        .expect("a list")
        .iter()
        .map(|entry| match key {
            "interrupt" => entry["interrupt"]["id"].as_str().expect("id").to_string(),
            _ => entry[key].as_str().expect("id").to_string(),
        })
        .collect()
}

async fn open_interrupt_of(app: &TestApp, thread: &str) -> String {
    let row = app.store.find_thread("default", thread).await.expect("query").expect("thread");
    let turn = app.store.thread_turns(row.pk).await.expect("turns").pop().expect("turn");
    let interrupts = app.store.turn_interrupts(turn.pk).await.expect("interrupts");
    interrupts.first().expect("the turn waits").id.clone()
}

async fn each_person_sees_what_they_decide_and_what_waits_on_their_threads(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = token("default", "alice", &[]);
    let bob = token("default", "bob", &["finance"]);
    let carol = token("default", "carol", &[]);
    // Alice's two approvals (hers to decide) and her four-eyes wire (finance decides, not her).
    let mut first = start_as(&app, &alice, "approver", "th-inbox-1").await;
    first.until_kind("RUN_FINISHED").await;
    let mut second = start_as(&app, &alice, "approver", "th-inbox-2").await;
    second.until_kind("RUN_FINISHED").await;
    let mut wire = start_as(&app, &alice, "foureyes", "th-inbox-wire").await;
    wire.until("gateway.waiting", |e| e.kind() == "CUSTOM" && e.data["name"] == "gateway.waiting").await;
    let (approval_1, approval_2) =
        (open_interrupt_of(&app, "th-inbox-1").await, open_interrupt_of(&app, "th-inbox-2").await);
    let wire_id = open_interrupt_of(&app, "th-inbox-wire").await;

    let before = app.counts().await;
    let hers = inbox_of(&app, &alice, "default").await;
    assert_eq!(ids(&hers["interrupts"], "interrupt"), [approval_1.clone(), approval_2.clone()], "oldest first: {hers}");
    let entry = &hers["interrupts"][0];
    assert_eq!(entry["threadId"], "th-inbox-1");
    assert_eq!(entry["startedBy"], "alice");
    assert_eq!(entry["agent"], "approver");
    assert_eq!(entry["threadReadable"], true);
    assert_eq!(entry["fourEyes"], false);
    assert_eq!(entry["deciders"], "the person who started the turn");
    assert_eq!(entry["interrupt"]["reason"], "tool_call");
    assert_eq!(
        entry["interrupt"]["metadata"]["gateway/details"]["to"], "team@example.com",
        "content holders see the call"
    );
    assert_eq!(
        entry["interrupt"]["metadata"]["gateway/console"]["url"],
        format!("/console/#/interrupts/{approval_1}"),
        "the link opens the item in the gateway's own console"
    );
    assert_eq!(ids(&hers["waitingForOthers"], "interruptId"), vec![wire_id.as_str()], "{hers}");
    let waiting = &hers["waitingForOthers"][0];
    assert_eq!(waiting["deciders"], "anyone with the role finance (not the person who started the turn)");
    assert_eq!(waiting["threadId"], "th-inbox-wire");
    assert_eq!(waiting["fourEyes"], true);

    // Bob decides the wire without reading Alice's thread, and sees nothing else of hers.
    let his = inbox_of(&app, &bob, "default").await;
    assert_eq!(ids(&his["interrupts"], "interrupt"), vec![wire_id.as_str()], "{his}");
    assert_eq!(his["interrupts"][0]["threadReadable"], false);
    assert_eq!(his["interrupts"][0]["startedBy"], "alice");
    assert_eq!(his["waitingForOthers"], json!([]));
    let thread = get_as(&app, &bob, "/v1/threads/th-inbox-wire").await;
    assert_eq!(thread.status(), 403, "deciding is not reading the thread");

    // Carol neither decides nor owns any of it.
    assert_eq!(inbox_of(&app, &carol, "default").await, json!({"interrupts": [], "waitingForOthers": []}));
    assert_eq!(app.counts().await, before, "reading an inbox writes nothing");

    // Once Bob decides, it leaves both inboxes and Alice's wire goes on.
    let decided = app
        .client
        .post(app.url(&format!("/v1/interrupts/{wire_id}/decision")))
        .bearer_auth(&bob)
        .json(&json!({"status": "resolved", "payload": {"approved": true}}))
        .send()
        .await
        .expect("post");
    assert_eq!(decided.status(), 200);
    assert_eq!(inbox_of(&app, &bob, "default").await["interrupts"], json!([]));
    assert_eq!(inbox_of(&app, &alice, "default").await["waitingForOthers"], json!([]));
    let rest = wire.rest().await;
    assert_eq!(rest.last().map(|e| e.data["outcome"]["type"].clone()), Some(json!("success")));
}
on_both_stores!(each_person_sees_what_they_decide_and_what_waits_on_their_threads);

/// Another tenant's decider sees nothing of this tenant's interrupts, and a credential of one
/// tenant reads no other's inbox; without `threads:content` the call's arguments stay out.
async fn an_inbox_holds_its_tenant_only_and_the_arguments_for_content_holders_only(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = token("default", "alice", &[]);
    let mut wire = start_as(&app, &alice, "foureyes", "th-tenant-wire").await;
    wire.until("gateway.waiting", |e| e.kind() == "CUSTOM" && e.data["name"] == "gateway.waiting").await;
    let mut approval = start_as(&app, &alice, "approver", "th-tenant-approval").await;
    approval.until_kind("RUN_FINISHED").await;

    let acme_finance = token("acme", "dora", &["finance"]);
    assert_eq!(inbox_of(&app, &acme_finance, "acme").await, json!({"interrupts": [], "waitingForOthers": []}));
    let across = get_as(&app, &acme_finance, "/v1/interrupts?tenant=default").await;
    assert_eq!(across.status(), 403, "another tenant's credential");

    let mut reader = claims("default", "alice");
    reader["scope"] = json!("threads:read");
    let without_content = inbox_of(&app, &app_token(&reader), "default").await;
    let interrupt = &without_content["interrupts"][0]["interrupt"];
    assert_eq!(interrupt["reason"], "tool_call", "{without_content}");
    assert!(interrupt["metadata"].get("gateway/details").is_none(), "no content, no arguments: {interrupt}");
}
on_both_stores!(an_inbox_holds_its_tenant_only_and_the_arguments_for_content_holders_only);

/// Bad requests: each its status and code, and nothing stored changes.
// One store: the request is refused before any store is read.
#[tokio::test]
async fn a_bad_inbox_request_is_refused_and_changes_nothing() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = token("default", "alice", &[]);
    let mut approval = start_as(&app, &alice, "approver", "th-bad-inbox").await;
    approval.until_kind("RUN_FINISHED").await;
    let before = app.counts().await;
    let no_read = {
        let mut claims = claims("default", "alice");
        claims["scope"] = json!("agent:approver");
        app_token(&claims)
    };
    let cases: [(&str, Option<&str>, u16, &str); 4] = [
        ("/v1/interrupts", None, 401, "unauthenticated"),
        ("/v1/interrupts?tenant=nope", Some(&alice), 403, "permission_denied"),
        ("/v1/interrupts?tenant=default", Some("not-a-token"), 401, "unauthenticated"),
        ("/v1/interrupts?tenant=default", Some(&no_read), 403, "permission_denied"),
    ];
    for (path, credential, status, code) in cases {
        let mut request = app.client.get(app.url(path));
        if let Some(credential) = credential {
            request = request.bearer_auth(credential);
        }
        let response = request.send().await.expect("get");
        assert_eq!(response.status().as_u16(), status, "{path}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
    }
    let posted = app.client.post(app.url("/v1/interrupts")).bearer_auth(&alice).send().await.expect("post");
    assert_eq!(posted.status(), 405);
    assert_eq!(app.counts().await, before, "nothing changed");
    assert_eq!(inbox_of(&app, &alice, "default").await["interrupts"].as_array().map(Vec::len), Some(1));
}

/// The console's page: from the binary, with a strict CSP and revalidation; `console = false`
/// serves none of it (and links nowhere).
// One store: the console's page and headers come from the configuration.
#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_or_not_at_all() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let moved = plain.get(app.url("/console")).send().await.expect("get");
    assert_eq!(moved.status(), 308);
    assert_eq!(moved.headers()["location"], "/console/");
    for (path, media_type) in
        [("/console/", "text/html"), ("/console/console.js", "text/javascript"), ("/console/console.css", "text/css")]
    {
        let page = plain.get(app.url(path)).send().await.expect("get");
        assert_eq!(page.status(), 200, "{path}");
        let headers = page.headers().clone();
        assert!(headers["content-type"].to_str().expect("ascii").starts_with(media_type), "{path}");
        let policy = headers["content-security-policy"].to_str().expect("ascii");
        assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
        assert_eq!(headers["cache-control"], "no-cache");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let etag = headers["etag"].clone();
        let again = plain.get(app.url(path)).header("if-none-match", etag).send().await.expect("get");
        assert_eq!(again.status(), 304, "{path}: unchanged, not sent again");
    }
    let missing = plain.get(app.url("/console/other.js")).send().await.expect("get");
    assert_eq!(missing.status(), 404);

    // In local development the console needs no token: the loopback person's inbox.
    app.run_to_end("approver", &first_run("th-local", "run-1", "x")).await;
    let inbox: Value = plain.get(app.url("/v1/interrupts")).send().await.expect("get").json().await.expect("json");
    assert_eq!(inbox["interrupts"][0]["startedBy"], "local", "{inbox}");
    assert_eq!(inbox["interrupts"][0]["threadId"], "th-local");

    let off_db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&off_db.url);
    config.console = false;
    let off = TestApp::start_with(config).await;
    let page = plain.get(off.url("/console/")).send().await.expect("get");
    assert_eq!(page.status(), 404);
    let events = off.run_to_end("approver", &first_run("th-no-console", "run-1", "x")).await;
    let outcome = &events.last().expect("an end").data["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{outcome}");
    assert!(outcome["interrupts"][0]["metadata"].get("gateway/console").is_none(), "no console, no link");
}
