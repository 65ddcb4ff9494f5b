//! Threads a person can list and delete (SPEC §10, issue 25 item 8): `GET /v1/threads` in
//! cursor pages, newest activity first, filtered by agent and status and limited to the threads
//! the caller may read; `DELETE /v1/threads/{thread}` erasing every row of a thread and leaving
//! an audit row without content; the operator's `threads list|show|delete`; and the retention
//! sweep of idle threads.

use std::process::Command;
use std::time::Duration;

use agui_gateway::config::Config;
use agui_gateway::store::{AuditRow, KeyKind, RowCounts};
use serde_json::{json, Value};

use crate::auth::{auth_config, new_key, rsa_provider, scoped_token};
use crate::helpers::*;
use crate::on_both_stores;

/// `GET path` with an optional bearer credential: the status and the JSON body.
async fn get_json(app: &TestApp, path: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = app.client.get(app.url(path));
    if let Some(token) = bearer {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.expect("get");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `DELETE /v1/threads/{thread}?tenant=`: the status and the body (null for a 204).
async fn delete(app: &TestApp, thread: &str, tenant: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = app.client.delete(app.url(&format!("/v1/threads/{thread}?tenant={tenant}")));
    if let Some(token) = bearer {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.expect("delete");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Runs a first turn on `thread` of `tenant` as `bearer` and reads it to its end.
async fn run_as(app: &TestApp, agent: &str, tenant: &str, thread: &str, text: &str, bearer: Option<&str>) {
    let mut request = app
        .client
        .post(app.url(&format!("/v1/agui/agents/{agent}?tenant={tenant}")))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(first_run(thread, &unique("run"), text).to_string());
    if let Some(token) = bearer {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.expect("run");
    assert_eq!(response.status(), 200, "{agent} on {thread}");
    let events = read_events(response, None).await;
    assert!(matches!(kinds(&events).last(), Some(&"RUN_FINISHED")), "{thread}: {:?}", kinds(&events));
}

/// The ids of every page of `path` (a list URL without `cursor`), following `next_cursor`.
async fn every_page(app: &TestApp, path: &str, bearer: Option<&str>) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(cursor) => format!("{path}&cursor={cursor}"),
            None => path.to_string(),
        };
        let (status, page) = get_json(app, &url, bearer).await;
        assert_eq!(status, 200, "{url}: {page}");
        pages.push(ids(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return pages,
        }
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["threads"].as_array().expect("threads").iter().map(|t| t["id"].as_str().expect("id").to_string()).collect()
}

/// The id of the interrupt a waiting run ended with.
fn interrupt_of(events: &[SseEvent]) -> String {
    events.last().expect("end").data["outcome"]["interrupts"][0]["id"].as_str().expect("interrupt").to_string()
}

fn answer(thread: &str, interrupt: &str, approved: bool) -> Value {
    let status = if approved { "resolved" } else { "cancelled" };
    json!({"threadId": thread, "runId": unique("resume"), "protocolVersion": "1.0", "messages": [],
           "resume": [{"interruptId": interrupt, "status": status, "payload": {"approved": approved}}]})
}

/// Every table a thread has rows in.
fn thread_rows(counts: &RowCounts) -> (i64, i64, i64, i64, i64, i64) {
    (counts.threads, counts.turns, counts.runs, counts.events, counts.notes, counts.interrupts)
}

async fn audit_rows(app: &TestApp) -> Vec<AuditRow> {
    app.store.audit_rows(None, 0, 10_000).await.expect("audit rows")
}

async fn threads_are_listed_newest_activity_first_in_pages_without_a_duplicate_or_a_gap(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let made: Vec<String> = (0..7).map(|n| format!("th-list-{n}")).collect();
    for (n, thread) in made.iter().enumerate() {
        app.run_to_end("demo", &first_run(thread, "run-1", &format!("question {n}"))).await;
    }
    let pages = every_page(&app, "/v1/threads?tenant=default&limit=3", None).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 3, 1], "{pages:?}");
    let listed: Vec<String> = pages.concat();
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(listed, newest_first, "every thread once, newest first");

    let (_, first) = get_json(&app, "/v1/threads?tenant=default&limit=1", None).await;
    let entry = &first["threads"][0];
    assert_eq!(entry["id"], "th-list-6");
    assert_eq!(entry["agent"], "demo");
    assert_eq!(entry["status"], "succeeded");
    assert_eq!(entry["title"], "question 6", "the local person holds the content permission");
    for field in ["createdAt", "updatedAt"] {
        let at = entry[field].as_str().unwrap_or_else(|| panic!("{field}: {entry}"));
        assert!(at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T', "{field} is ISO 8601: {at}");
    }

    // A new turn on the oldest thread is the newest activity.
    let history: Value = app.get_json("/v1/threads/th-list-0/messages").await;
    let mut messages = history["messages"].as_array().expect("messages").clone();
    messages.push(json!({"id": "again", "role": "user", "content": "and now?"}));
    let next = json!({"threadId": "th-list-0", "runId": "run-2", "protocolVersion": "1.0", "messages": messages});
    app.run_to_end("demo", &next).await;
    let (_, page) = get_json(&app, "/v1/threads?tenant=default&limit=2", None).await;
    assert_eq!(ids(&page), vec!["th-list-0", "th-list-6"]);
    assert_eq!(page["threads"][0]["title"], "question 0", "the title stays the first message");
}
on_both_stores!(threads_are_listed_newest_activity_first_in_pages_without_a_duplicate_or_a_gap);

async fn threads_are_filtered_by_the_latest_turns_agent_and_status(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    app.run_to_end("demo", &first_run("th-done", "run-1", "hello")).await;
    app.run_to_end("failing", &first_run("th-failed", "run-1", "hello")).await;
    app.run_to_end("approver", &first_run("th-waiting", "run-1", "send it")).await;

    let listed = |query: &'static str| {
        let app = &app;
        async move {
            let (status, page) = get_json(app, &format!("/v1/threads?tenant=default&{query}"), None).await;
            assert_eq!(status, 200, "{query}: {page}");
            ids(&page)
        }
    };
    assert_eq!(listed("agent=approver").await, vec!["th-waiting"]);
    assert_eq!(listed("status=waiting").await, vec!["th-waiting"]);
    assert_eq!(listed("status=failed").await, vec!["th-failed"]);
    assert_eq!(listed("status=succeeded&agent=demo").await, vec!["th-done"]);
    assert!(listed("status=running").await.is_empty());
    assert!(listed("agent=nobody").await.is_empty());

    for query in ["status=sleeping", "limit=0", "limit=201", "limit=many", "agent=no%20such"] {
        let (status, body) = get_json(&app, &format!("/v1/threads?tenant=default&{query}"), None).await;
        assert_eq!(status, 400, "{query}");
        assert_eq!(body["error"]["code"], "bad_request", "{query}: {body}");
    }
}
on_both_stores!(threads_are_filtered_by_the_latest_turns_agent_and_status);

const EVERYTHING: &str = "threads:read threads:content agent:*";

async fn a_list_shows_only_the_callers_threads_and_titles_only_to_content_holders(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let ann = scoped_token("default", "ann", EVERYTHING);
    let bob = scoped_token("default", "bob", EVERYTHING);
    let (key, _) = new_key(&app, "default", &["demo"], KeyKind::Tenant).await;
    run_as(&app, "demo", "default", "th-ann", "ann's question", Some(&ann)).await;
    run_as(&app, "demo", "default", "th-bob", "bob's question", Some(&bob)).await;
    run_as(&app, "demo", "default", "th-tenant", "the tenant's question", Some(&key)).await;
    let ann_acme = scoped_token("acme", "ann", EVERYTHING);
    run_as(&app, "demo", "acme", "th-ann-acme", "ann at acme", Some(&ann_acme)).await;

    let (_, page) = get_json(&app, "/v1/threads?tenant=default", Some(&ann)).await;
    assert_eq!(ids(&page), vec!["th-tenant", "th-ann"], "her own and the tenant's, never bob's or acme's");
    assert_eq!(page["threads"][1]["title"], "ann's question");
    let (_, page) = get_json(&app, "/v1/threads?tenant=default", Some(&key)).await;
    assert_eq!(ids(&page), vec!["th-tenant"], "a key sees the tenant's threads only");
    let (_, page) = get_json(&app, "/v1/threads?tenant=acme", Some(&ann_acme)).await;
    assert_eq!(ids(&page), vec!["th-ann-acme"]);

    // Without the content permission: the threads, never their first message.
    let reader = scoped_token("default", "ann", "threads:read");
    let (status, page) = get_json(&app, "/v1/threads?tenant=default", Some(&reader)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), vec!["th-tenant", "th-ann"]);
    for entry in page["threads"].as_array().expect("threads") {
        assert!(entry.get("title").is_none(), "{entry}");
    }
    assert!(!page.to_string().contains("question"), "{page}");

    // No read permission, another tenant's credential, no credential.
    let (status, body) =
        get_json(&app, "/v1/threads?tenant=default", Some(&scoped_token("default", "ann", "agent:*"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("permission_denied")));
    let (status, _) = get_json(&app, "/v1/threads?tenant=acme", Some(&ann)).await;
    assert_eq!(status, 403);
    let (status, _) = get_json(&app, "/v1/threads?tenant=default", None).await;
    assert_eq!(status, 401);
}
on_both_stores!(a_list_shows_only_the_callers_threads_and_titles_only_to_content_holders);

async fn deleting_a_thread_erases_every_row_and_leaves_an_audit_row_without_content(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    // A thread that stays, then one with an interrupt, a note, two turns and several runs.
    app.run_to_end("demo", &first_run("th-keep", "run-1", "keep me")).await;
    let kept = app.counts().await;
    let asked = app.run_to_end("approver", &first_run("th-erase", "run-1", "the secret plan")).await;
    let resumed = app.run_to_end("approver", &answer("th-erase", &interrupt_of(&asked), true)).await;
    assert_eq!(kinds(&resumed).last(), Some(&"RUN_FINISHED"));
    let history: Value = app.get_json("/v1/threads/th-erase/messages").await;
    let mut messages = history["messages"].as_array().expect("messages").clone();
    messages.push(json!({"id": "u2", "role": "user", "content": "pin the plan"}));
    app.run_to_end(
        "demo",
        &json!({"threadId": "th-erase", "runId": "run-3", "protocolVersion": "1.0", "messages": messages}),
    )
    .await;
    let full = app.counts().await;
    assert!(full.interrupts > kept.interrupts && full.notes > kept.notes && full.turns == kept.turns + 2, "{full:?}");

    let (status, body) = delete(&app, "th-erase", "default", None).await;
    assert_eq!(status, 204, "{body}");
    let after = app.counts().await;
    assert_eq!(thread_rows(&after), thread_rows(&kept), "every row of the thread is gone, the other's stay");
    assert_eq!(after.audit, full.audit + 1, "one audit row");
    let row = audit_rows(&app).await.pop().expect("audit row").entry;
    assert_eq!(
        (row.action.as_str(), row.actor.as_str(), row.tenant.as_str()),
        ("thread.delete", "person:local", "default")
    );
    let detail: Value = serde_json::from_str(&row.detail).expect("detail");
    assert_eq!(detail["thread"], "th-erase");
    for content in ["secret plan", "pin the plan", "team@example.com"] {
        assert!(!row.detail.contains(content), "the audit row holds no content: {}", row.detail);
    }
    let now = agui_gateway::clock::Clock::now_ms(&agui_gateway::clock::SystemClock);
    assert!((now - row.at_ms).abs() < 60_000, "it says when");

    assert_eq!(get_json(&app, "/v1/threads/th-erase", None).await.0, 403, "gone like a thread that never was");
    assert_eq!(ids(&get_json(&app, "/v1/threads?tenant=default", None).await.1), vec!["th-keep"]);
    assert_eq!(get_json(&app, "/v1/threads/th-keep", None).await.0, 200);
    assert_eq!(delete(&app, "th-erase", "default", None).await.0, 403, "a second delete finds nothing");
    // The id can start a new conversation.
    app.run_to_end("demo", &first_run("th-erase", "run-1", "a fresh start")).await;
}
on_both_stores!(deleting_a_thread_erases_every_row_and_leaves_an_audit_row_without_content);

async fn a_delete_cancels_a_waiting_or_running_turn_and_erases_the_thread(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    // A waiting turn: its interrupt is withdrawn, the turn ends `cancelled` in its log, then
    // the thread goes with everything of it.
    let asked = app.run_to_end("approver", &first_run("th-busy", "run-1", "send it")).await;
    let interrupt = interrupt_of(&asked);
    let audited = audit_rows(&app).await.len();
    let (status, body) = delete(&app, "th-busy", "default", None).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(thread_rows(&app.counts().await), (0, 0, 0, 0, 0, 0), "every row of it is gone");
    assert_eq!(audit_rows(&app).await.len(), audited + 1, "one audit row for the delete, no decision row");
    // Nobody can decide the withdrawn interrupt afterwards.
    let late = app
        .client
        .post(app.url(&format!("/v1/interrupts/{interrupt}/decision")))
        .json(&json!({"approved": true}))
        .send()
        .await
        .expect("decision");
    assert_ne!(late.status(), 200);

    // A running turn is cancelled by the delete, which answers once it has ended: the stream
    // that watched it ends as on a cancel, and nothing of the thread stays.
    let stream = open_until_waiting(&app, "waiter", &first_run("th-running", "run-1", "wait")).await;
    let audited = audit_rows(&app).await.len();
    let (status, body) = delete(&app, "th-running", "default", None).await;
    assert_eq!(status, 204, "{body}");
    let watched = tokio::time::timeout(PATIENCE, stream.rest()).await.expect("the watching stream ends");
    assert_eq!(watched.last().expect("events").data["outcome"], json!({"type": "cancelled"}));
    assert_eq!(app.counts().await.threads, 0);
    assert_eq!(thread_rows(&app.counts().await), (0, 0, 0, 0, 0, 0), "every row of it is gone");
    let rows = audit_rows(&app).await;
    assert_eq!(rows.len(), audited + 1, "one audit row for the delete");
    assert_eq!(rows.last().map(|r| r.entry.action.as_str()), Some("thread.delete"));
    assert_eq!(get_json(&app, "/v1/threads/th-running", None).await.0, 403, "gone like a thread that never was");
}
on_both_stores!(a_delete_cancels_a_waiting_or_running_turn_and_erases_the_thread);

/// The delete reaches a turn another instance runs: it is cancelled there (through the bus),
/// its stream there ends as on a cancel, and the thread is gone for both.
#[tokio::test]
async fn a_delete_on_one_instance_stops_the_turn_another_runs() {
    let (a, b, _db) = two_apps().await;
    let stream = open_until_waiting(&a, "waiter", &first_run("th-far", "run-1", "wait")).await;
    let (status, body) = delete(&b, "th-far", "default", None).await;
    assert_eq!(status, 204, "{body}");
    let watched = tokio::time::timeout(PATIENCE, stream.rest()).await.expect("the stream on the runner ends");
    assert_eq!(watched.last().expect("events").data["outcome"], json!({"type": "cancelled"}));
    assert_eq!(thread_rows(&a.counts().await), (0, 0, 0, 0, 0, 0));
    assert_eq!(get_json(&a, "/v1/threads/th-far", None).await.0, 403);
}

async fn a_thread_the_caller_may_not_delete_answers_like_one_that_does_not_exist(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let ann = scoped_token("default", "ann", EVERYTHING);
    let bob = scoped_token("default", "bob", EVERYTHING);
    let (key, _) = new_key(&app, "default", &["demo"], KeyKind::Tenant).await;
    run_as(&app, "demo", "default", "th-ann", "ann's", Some(&ann)).await;
    run_as(&app, "demo", "default", "th-tenant", "the tenant's", Some(&key)).await;
    let before = app.counts().await;

    let (status, unknown) = delete(&app, "th-nobody", "default", Some(&bob)).await;
    assert_eq!(status, 403);
    let (status, forbidden) = delete(&app, "th-ann", "default", Some(&bob)).await;
    assert_eq!(status, 403);
    assert_eq!(forbidden, unknown, "another person's thread answers exactly like a missing one");
    assert_eq!(delete(&app, "th-ann", "default", Some(&key)).await, (403, unknown.clone()), "a key erases no person's");
    let (status, _) = delete(&app, "th-ann", "acme", Some(&scoped_token("acme", "ann", EVERYTHING))).await;
    assert_eq!(status, 403, "not through another tenant");
    // A person reads the tenant's threads but does not erase them; reading only is not enough.
    assert_eq!(delete(&app, "th-tenant", "default", Some(&ann)).await.0, 403);
    assert_eq!(delete(&app, "th-ann", "default", Some(&scoped_token("default", "ann", "threads:read"))).await.0, 403);
    assert_eq!(delete(&app, "th-ann", "default", None).await.0, 401);
    assert_eq!(app.counts().await, before, "nothing changed");

    assert_eq!(delete(&app, "th-ann", "default", Some(&ann)).await.0, 204, "her own");
    assert_eq!(delete(&app, "th-tenant", "default", Some(&key)).await.0, 204, "the tenant's, with its key");
    assert_eq!(app.counts().await.threads, 0);
}
on_both_stores!(a_thread_the_caller_may_not_delete_answers_like_one_that_does_not_exist);

async fn a_bad_cursor_is_a_400_with_the_error_body_and_changes_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    app.run_to_end("demo", &first_run("th-c", "run-1", "hi")).await;
    let before = app.counts().await;
    for cursor in ["not-a-cursor", "djI6MTox", "djE6eDo0Mg", ""] {
        let (status, body) = get_json(&app, &format!("/v1/threads?tenant=default&cursor={cursor}"), None).await;
        assert_eq!(status, 400, "{cursor:?}: {body}");
        assert_eq!(body["error"]["code"], "bad_request");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("cursor")), "{body}");
    }
    assert_eq!(app.counts().await, before);
}
on_both_stores!(a_bad_cursor_is_a_400_with_the_error_body_and_changes_nothing);

/// Runs `agui-gateway <args> --database <url> --config <the test config>`.
fn cli(database_url: &str, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, TEST_CONFIG).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(args)
        .arg("--database")
        .arg(database_url)
        .arg("--config")
        .arg(&config)
        .env("AGUI_GATEWAY_LOG_FILTER", "warn")
        .output()
        .expect("the gateway binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

async fn the_operator_lists_shows_and_deletes_threads_from_the_command_line(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    app.run_to_end("demo", &first_run("th-cli", "run-1", "from the terminal")).await;
    app.run_to_end("approver", &first_run("th-cli-waits", "run-1", "send it")).await;
    let url = db.url.clone();

    let (ok, out, err) =
        tokio::task::spawn_blocking(move || cli(&url, &["threads", "list", "--tenant", "default"])).await.expect("cli");
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).expect("the list is JSON");
    assert_eq!(ids(&listed), vec!["th-cli-waits", "th-cli"]);
    assert_eq!(listed["threads"][1]["title"], "from the terminal");
    assert_eq!(listed["threads"][1]["owner"], "person:local");
    let url = db.url.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        cli(&url, &["threads", "list", "--tenant", "default", "--status", "waiting", "--limit", "1"])
    })
    .await
    .expect("cli");
    assert!(ok, "{err}");
    assert_eq!(ids(&serde_json::from_str(&out).expect("json")), vec!["th-cli-waits"]);

    let url = db.url.clone();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || cli(&url, &["threads", "show", "--tenant", "default", "th-cli"]))
            .await
            .expect("cli");
    assert!(ok && out.contains("from the terminal"), "{out}{err}");

    // A waiting thread too: the command holds no lease, so the serving gateway takes the
    // cancelled turn over and ends it; the command erases the thread once it has ended.
    let url = db.url.clone();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || cli(&url, &["threads", "delete", "--tenant", "default", "th-cli-waits"]))
            .await
            .expect("cli");
    assert!(ok && out.contains("deleted thread th-cli-waits"), "{out}{err}");
    assert_eq!(ids(&get_json(&app, "/v1/threads?tenant=default", None).await.1), vec!["th-cli"]);

    let url = db.url.clone();
    let (ok, out, err) =
        tokio::task::spawn_blocking(move || cli(&url, &["threads", "delete", "--tenant", "default", "th-cli"]))
            .await
            .expect("cli");
    assert!(ok && out.contains("deleted thread th-cli"), "{out}{err}");
    assert!(ids(&get_json(&app, "/v1/threads?tenant=default", None).await.1).is_empty());
    let row = audit_rows(&app).await.pop().expect("audit").entry;
    assert_eq!((row.action.as_str(), row.actor.as_str()), ("thread.delete", "cli"));
    assert!(!row.detail.contains("terminal"), "{}", row.detail);

    let url = db.url.clone();
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || cli(&url, &["threads", "delete", "--tenant", "default", "th-cli"]))
            .await
            .expect("cli");
    assert!(!ok && err.contains("no thread"), "{err}");
}
on_both_stores!(the_operator_lists_shows_and_deletes_threads_from_the_command_line);

fn retention_config(database_url: &str) -> Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    let text = format!("{TEST_CONFIG}\n[retention]\nthread_idle_days = 30\ninterval_secs = 1\nbatch = 1\n");
    std::fs::write(&path, text).expect("write config");
    let mut config = Config::load(Some(&path), std::iter::empty()).expect("retention config loads");
    config.database.url = database_url.to_string();
    config
}

async fn retention_erases_idle_threads_waiting_ones_too_and_keeps_fresh_and_running_ones(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(retention_config(&db.url)).await;
    for thread in ["th-old-1", "th-old-2", "th-fresh"] {
        app.run_to_end("demo", &first_run(thread, "run-1", "hello")).await;
    }
    app.run_to_end("approver", &first_run("th-old-waiting", "run-1", "send it")).await;
    let running = open_until_waiting(&app, "waiter", &first_run("th-old-running", "run-1", "wait")).await;
    // Their last activity 31 days ago, as the clock will say of any thread left alone.
    execute_sql(
        &db.url,
        "UPDATE threads SET updated_at_ms = updated_at_ms - 2678400000 \
         WHERE thread_id IN ('th-old-1', 'th-old-2', 'th-old-waiting', 'th-old-running')",
    )
    .await;
    // One thread per pass (batch = 1): the old ones go within a few passes, the waiting one
    // with its turn cancelled and its interrupt withdrawn.
    wait_until(PATIENCE, "the idle threads to be erased", || async {
        let mut gone = true;
        for thread in ["th-old-1", "th-old-2", "th-old-waiting"] {
            gone &= app.store.find_thread("default", thread).await.expect("find").is_none();
        }
        gone
    })
    .await;
    holds_throughout(Duration::from_millis(1500), "the fresh and the running thread stay", || async {
        app.store.find_thread("default", "th-fresh").await.expect("find").is_some()
            && app.store.find_thread("default", "th-old-running").await.expect("find").is_some()
    })
    .await;
    let counts = app.counts().await;
    assert_eq!(counts.threads, 2);
    assert_eq!(counts.turns, 2, "the erased threads' turns went with them");
    assert_eq!(counts.interrupts, 0, "the waiting thread's interrupt went with it");
    let erased: Vec<Value> = audit_rows(&app)
        .await
        .into_iter()
        .filter(|row| row.entry.action == "thread.delete")
        .map(|row| {
            assert_eq!(row.entry.actor, "gateway");
            serde_json::from_str(&row.entry.detail).expect("detail")
        })
        .collect();
    assert_eq!(erased.len(), 3, "{erased:?}");
    assert!(erased.iter().all(|detail| detail["reason"] == "retention"), "{erased:?}");
    drop(running);
}
on_both_stores!(retention_erases_idle_threads_waiting_ones_too_and_keeps_fresh_and_running_ones);

/// 31 days, in milliseconds: past the retention configs' 30.
const MONTH_AND_A_DAY_MS: i64 = 31 * 86_400_000;

async fn retention_never_erases_a_thread_a_turn_started_on_after_its_pass_listed_it(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    for thread in ["th-listed", "th-idle"] {
        app.run_to_end("demo", &first_run(thread, "run-1", "hello")).await;
    }
    execute_sql(&db.url, &format!("UPDATE threads SET updated_at_ms = updated_at_ms - {MONTH_AND_A_DAY_MS}")).await;
    // A retention pass lists both threads as idle for 30 days...
    let before = agui_gateway::clock::Clock::now_ms(&agui_gateway::clock::SystemClock) - 30 * 86_400_000;
    let listed = app.store.idle_threads(before, 10).await.expect("the pass's listing");
    assert_eq!(listed.len(), 2);
    // ...then, before it erases them, a person continues one: a new turn that waits for approval.
    let body: Value = app.get_json("/v1/threads/th-listed/messages").await;
    let mut history = body["messages"].as_array().expect("messages").clone();
    history.push(json!({"id": "next", "role": "user", "content": "send it"}));
    let input = json!({"threadId": "th-listed", "runId": "run-2", "protocolVersion": "1.0", "messages": history});
    let waiting = app.run_to_end("approver", &input).await;
    let end = &waiting.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{end}");
    let interrupt = end["outcome"]["interrupts"][0]["id"].as_str().expect("interrupt id").to_string();

    // The pass goes on with its listing: the idle thread goes, the active one stays whole.
    assert_eq!(app.engine.erase_idle_threads(&listed, before).await.expect("the pass"), 1);
    assert!(app.store.find_thread("default", "th-idle").await.expect("find").is_none());
    let thread = app.store.find_thread("default", "th-listed").await.expect("find").expect("not erased");
    let turns = app.store.thread_turns(thread.pk).await.expect("turns");
    assert_eq!(turns.len(), 2);
    let turn = turns.last().expect("the new turn");
    assert_eq!(turn.status.as_str(), "waiting", "the new turn was not cancelled");
    // Nor does retention's cancel of a waiting turn touch one that waits since after its listing.
    let cancelled = app.store.cancel_waiting_turn(turn.pk, "retention-test", Some(before)).await.expect("cancel");
    assert_eq!(cancelled, None);
    let interrupts = app.store.turn_interrupts(turn.pk).await.expect("interrupts");
    assert_eq!(interrupts[0].status.as_str(), "open", "nobody decided or withdrew it");
    let erased: Vec<AuditRow> =
        audit_rows(&app).await.into_iter().filter(|row| row.entry.action == "thread.delete").collect();
    assert_eq!(erased.len(), 1, "one erase recorded");

    // The person's decision still counts: the call runs and the turn ends.
    let resume = json!({"threadId": "th-listed", "runId": "run-3", "protocolVersion": "1.0", "messages": [],
        "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": true}}]});
    let resumed = app.run_to_end("approver", &resume).await;
    assert!(kinds(&resumed).contains(&"TOOL_CALL_RESULT"), "{:?}", kinds(&resumed));
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success");
    let (ok, report) = agui_check(&app.run_url("approver"), &resume).await;
    assert!(ok, "the resumed run passes the official client: {report}");
}
on_both_stores!(retention_never_erases_a_thread_a_turn_started_on_after_its_pass_listed_it);
