//! The CopilotKit runtime's routes, served by the gateway itself (SPEC §2, issue 40):
//! `/v1/copilotkit/{tenant}/info`, `agent/{agent}/run|connect|stop/{thread}`, the single-route
//! envelope at `/v1/copilotkit/{tenant}`, and the thread routes of `useThreads`.

use agui_gateway::store::{AuditRow, KeyKind};
use serde_json::{json, Value};

use crate::auth::{app_token, auth_config, claims, new_key, rsa_provider};
use crate::helpers::*;
use crate::on_both_stores;

pub(crate) fn base(tenant: &str) -> String {
    format!("/v1/copilotkit/{tenant}")
}

/// A request to the runtime with an optional bearer credential.
pub(crate) fn request(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut request = app.client.request(method, app.url(path));
    if let Some(token) = bearer {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    request
}

/// POSTs a stream request (run, connect, envelope) as CopilotKit's `HttpAgent` does.
pub(crate) async fn post_stream(app: &TestApp, path: &str, body: &Value, bearer: Option<&str>) -> reqwest::Response {
    request(app, reqwest::Method::POST, path, bearer)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .expect("sent")
}

pub(crate) async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn get(app: &TestApp, path: &str, bearer: Option<&str>) -> (u16, Value) {
    json_of(request(app, reqwest::Method::GET, path, bearer).send().await.expect("sent")).await
}

pub(crate) async fn send_json(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: &Value,
    bearer: Option<&str>,
) -> (u16, Value) {
    let response = request(app, method, path, bearer)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent");
    json_of(response).await
}

/// Runs `agent` through the runtime's run route to its end.
pub(crate) async fn run_through_runtime(
    app: &TestApp,
    tenant: &str,
    agent: &str,
    input: &Value,
    bearer: Option<&str>,
) -> Vec<SseEvent> {
    let response = post_stream(app, &format!("{}/agent/{agent}/run", base(tenant)), input, bearer).await;
    assert_eq!(response.status(), 200, "run answered {}", response.status());
    read_events(response, None).await
}

async fn audit_rows(app: &TestApp) -> Vec<AuditRow> {
    app.store.audit_rows(None, 0, 10_000).await.expect("audit rows")
}

fn listed(page: &Value) -> Vec<String> {
    page["threads"].as_array().expect("threads").iter().map(|t| t["id"].as_str().expect("id").to_string()).collect()
}

// One store: `info` comes from the configuration and the caller.
#[tokio::test]
async fn info_describes_the_callers_agents_as_copilotkit_reads_them() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let (status, info) = get(&app, &format!("{}/info", base("default")), None).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["agents"]["demo"]["name"], "demo", "{info}");
    assert!(info["agents"]["demo"]["description"].is_string(), "{info}");
    assert_eq!(info["mode"], "sse");
    assert!(info["version"].is_string());
    assert_eq!(info["threadEndpoints"]["list"], true);
    assert_eq!(info["threadEndpoints"]["mutations"], true);
    assert_eq!(info["threadEndpoints"]["realtimeMetadata"], true);
    let socket = info["intelligence"]["wsUrl"].as_str().unwrap_or_default();
    assert_eq!(socket, format!("//{}/v1/copilotkit/default/threads/realtime", app.address), "{info}");
    let (status, error) = get(&app, &format!("{}/info", base("nowhere")), None).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("not_found")), "{error}");
}

async fn a_run_through_the_runtime_is_the_agui_run(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-ck-run", "run-1", "hello runtime");
    let events = run_through_runtime(&app, "default", "demo", &input, None).await;
    assert_eq!(kinds(&events).first(), Some(&"RUN_STARTED"));
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
    assert!(text_of(&events).contains("You said: \"hello runtime\""), "{}", text_of(&events));
    assert!(events.iter().all(|e| e.id.is_some()), "every event has its log id");
    let counts = app.counts().await;
    assert_eq!((counts.threads, counts.turns), (1, 1));
    assert!(audit_rows(&app).await.iter().any(|row| row.entry.action == "run.start"), "the run is audited");

    // The same runId again follows the same turn: no second turn.
    let again = run_through_runtime(&app, "default", "demo", &input, None).await;
    assert_eq!(text_of(&again), text_of(&events));
    assert_eq!(app.counts().await.turns, 1);

    // The history check: an empty copy of a thread with turns is refused, nothing stored.
    let before = app.counts().await;
    let stale = first_run("th-ck-run", "run-2", "and again");
    let refused = run_through_runtime(&app, "default", "demo", &stale, None).await;
    assert_eq!(kinds(&refused), vec!["RUN_ERROR"], "{refused:?}");
    assert_eq!(refused[0].data["code"], "history_mismatch");
    assert_eq!(app.counts().await, before);

    // The route's own checks: an unknown agent, a bad body.
    let response = post_stream(&app, &format!("{}/agent/nobody/run", base("default")), &input, None).await;
    assert_eq!(response.status(), 404);
    let response =
        post_stream(&app, &format!("{}/agent/demo/run", base("default")), &json!({"threadId": 5}), None).await;
    let (status, body) = json_of(response).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("bad_request")), "{body}");
    assert_eq!(app.counts().await, before);
}
on_both_stores!(a_run_through_the_runtime_is_the_agui_run);

async fn connect_restores_the_thread_and_ends_with_its_opening_run(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let connect = format!("{}/agent/demo/connect", base("default"));
    run_through_runtime(&app, "default", "demo", &first_run("th-ck-back", "run-1", "remember me"), None).await;

    let response = post_stream(&app, &connect, &json!({"threadId": "th-ck-back", "runId": "c1"}), None).await;
    assert_eq!(response.status(), 200);
    // The stream ends by itself (read to its end), with its one opening run.
    let events = read_events(response, None).await;
    assert_eq!(kinds(&events), vec!["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    let messages = events[1].data["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["content"], "remember me");
    assert!(messages.iter().any(|m| m["role"] == "assistant"), "{messages:?}");

    // A thread with no turn and another tenant's thread alike: an empty stream.
    for (tenant, thread) in [("default", "th-ck-never"), ("acme", "th-ck-back")] {
        let url = format!("{}/agent/demo/connect", base(tenant));
        let response = post_stream(&app, &url, &json!({"threadId": thread}), None).await;
        assert_eq!(response.status(), 200, "{tenant}/{thread}");
        assert_eq!(response.text().await.expect("body"), "", "{tenant}/{thread}");
    }

    // A waiting turn comes back with its interrupt, and the stream ends there.
    let waiting =
        run_through_runtime(&app, "default", "approver", &first_run("th-ck-wait", "run-1", "mail"), None).await;
    assert_eq!(waiting.last().expect("end").data["outcome"]["type"], "interrupt");
    let url = format!("{}/agent/approver/connect", base("default"));
    let body = json!({"threadId": "th-ck-wait", "protocolVersion": "1.0"});
    let events = read_events(post_stream(&app, &url, &body, None).await, None).await;
    let end = events.last().expect("end");
    assert_eq!(end.kind(), "RUN_FINISHED", "{:?}", kinds(&events));
    assert_eq!(
        end.data["outcome"]["interrupts"][0]["id"],
        waiting.last().expect("end").data["outcome"]["interrupts"][0]["id"]
    );
    // CopilotKit's own client (pre-1.0): the interrupt as its `on_interrupt` event.
    let body = json!({"threadId": "th-ck-wait"});
    let events = read_events(post_stream(&app, &url, &body, None).await, None).await;
    assert!(events.iter().any(|e| e.kind() == "CUSTOM" && e.data["name"] == "on_interrupt"), "{:?}", kinds(&events));
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
}
on_both_stores!(connect_restores_the_thread_and_ends_with_its_opening_run);

/// A page whose run stream drops mid-answer gets the rest of the turn through connect: the
/// whole answer once, ending with the turn.
async fn a_dropped_run_is_completed_through_connect(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-ck-cut", "run-1", "cut me");
    let response = post_stream(&app, &format!("{}/agent/slow/run", base("default")), &input, None).await;
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_CONTENT").await;
    drop(stream);

    let url = format!("{}/agent/slow/connect", base("default"));
    let events = read_events(post_stream(&app, &url, &json!({"threadId": "th-ck-cut"}), None).await, None).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&events));
    let text = text_of(&events);
    let whole = "Streaming slowly so a client can drop mid-message: cut meAnd a second answer after the tool.";
    // Either the turn went on live (every delta once) or it had ended (its snapshot holds it).
    let snapshot_text: String = events
        .iter()
        .filter(|e| e.kind() == "MESSAGES_SNAPSHOT")
        .flat_map(|e| e.data["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert!(text == whole || (text.is_empty() && snapshot_text == whole), "live: {text:?} snapshot: {snapshot_text:?}");
    assert_eq!(app.counts().await.turns, 1);
}
on_both_stores!(a_dropped_run_is_completed_through_connect);

#[tokio::test]
async fn connect_on_another_instance_follows_the_running_turn() {
    let (a, b, _db) = two_apps().await;
    let input = first_run("th-ck-other", "run-1", "across");
    let response = post_stream(&a, &format!("{}/agent/slow/run", base("default")), &input, None).await;
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_CONTENT").await;
    let url = format!("{}/agent/slow/connect", base("default"));
    let events = read_events(post_stream(&b, &url, &json!({"threadId": "th-ck-other"}), None).await, None).await;
    let whole = stream.rest().await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&events));
    let live = text_of(&events);
    assert!(live.is_empty() || live == text_of(&whole), "{live:?}");
    assert_eq!(events.last().expect("end").id, whole.last().expect("end").id, "the same end of the same log");
}

async fn stop_cancels_the_running_turn(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-ck-stop", "run-1", "wait");
    let response = post_stream(&app, &format!("{}/agent/waiter/run", base("default")), &input, None).await;
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let reader = tokio::spawn(stream.rest());
    let stop = format!("{}/agent/waiter/stop/th-ck-stop", base("default"));
    let (status, answer) = send_json(&app, reqwest::Method::POST, &stop, &json!({"runId": "run-1"}), None).await;
    assert_eq!((status, &answer["stopped"]), (200, &json!(true)), "{answer}");
    let events = reader.await.expect("reader");
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "cancelled");
    let (status, answer) = send_json(&app, reqwest::Method::POST, &stop, &json!({}), None).await;
    assert_eq!((status, &answer["stopped"]), (200, &json!(false)), "nothing runs any more: {answer}");
    // Another tenant's thread (unknown there): refused as on every thread route.
    let other = format!("{}/agent/waiter/stop/th-ck-stop", base("acme"));
    let (status, _) = send_json(&app, reqwest::Method::POST, &other, &json!({}), None).await;
    assert_eq!(status, 403);
}
on_both_stores!(stop_cancels_the_running_turn);

async fn the_single_route_envelope_serves_each_method(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let route = base("default");
    let (status, info) = send_json(&app, reqwest::Method::POST, &route, &json!({"method": "info"}), None).await;
    assert_eq!(status, 200);
    assert_eq!(info["agents"]["demo"]["name"], "demo");

    let input = first_run("th-ck-single", "run-1", "one route");
    let run = json!({"method": "agent/run", "params": {"agentId": "demo"}, "body": input});
    let events = read_events(post_stream(&app, &route, &run, None).await, None).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
    assert!(text_of(&events).contains("one route"));

    let connect =
        json!({"method": "agent/connect", "params": {"agentId": "demo"}, "body": {"threadId": "th-ck-single"}});
    let events = read_events(post_stream(&app, &route, &connect, None).await, None).await;
    assert_eq!(kinds(&events), vec!["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);

    let stop = json!({"method": "agent/stop", "params": {"agentId": "demo", "threadId": "th-ck-single"}});
    let (status, answer) = send_json(&app, reqwest::Method::POST, &route, &stop, None).await;
    assert_eq!((status, &answer["stopped"]), (200, &json!(false)));

    // Refusals: nothing stored by any of them.
    let before = app.counts().await;
    for (envelope, code) in [
        (json!({"method": "agent/launch"}), 400),
        (json!({"method": "agent/run", "body": first_run("th-ck-x", "r", "x")}), 400),
        (json!({"method": "agent/run", "params": {"agentId": "nobody"}, "body": first_run("th-ck-x", "r", "x")}), 404),
        (json!({"method": "agent/run", "params": {"agentId": "demo"}}), 400),
        (json!({"params": {}}), 400),
    ] {
        let (status, body) = send_json(&app, reqwest::Method::POST, &route, &envelope, None).await;
        assert_eq!(status, code, "{envelope}: {body}");
        assert!(body["error"]["code"].is_string(), "{body}");
    }
    assert_eq!(app.counts().await, before);
}
on_both_stores!(the_single_route_envelope_serves_each_method);

/// `useThreads`: a person lists only their own threads, renames and archives them (audited);
/// another person can neither see nor change them.
async fn threads_are_listed_renamed_and_archived_by_their_owner(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = app_token(&claims("acme", "alice"));
    let bob = app_token(&claims("acme", "bob"));
    for thread in ["th-ck-a1", "th-ck-a2"] {
        run_through_runtime(
            &app,
            "acme",
            "demo",
            &first_run(thread, "run-1", &format!("{thread} question")),
            Some(&alice),
        )
        .await;
    }
    run_through_runtime(&app, "acme", "demo", &first_run("th-ck-b1", "run-1", "bob asks"), Some(&bob)).await;

    let threads = format!("{}/threads?agentId=demo", base("acme"));
    let (status, page) = get(&app, &threads, Some(&alice)).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(listed(&page), vec!["th-ck-a2", "th-ck-a1"], "alice's own, newest first");
    assert_eq!(page["threads"][0]["name"], "th-ck-a2 question");
    assert_eq!(page["threads"][0]["agentId"], "demo");
    assert_eq!(page["threads"][0]["archived"], false);
    let (_, page) = get(&app, &threads, Some(&bob)).await;
    assert_eq!(listed(&page), vec!["th-ck-b1"]);

    // Rename: the list shows the name; one audit row, without the name.
    let one = format!("{}/threads/th-ck-a1", base("acme"));
    let (status, renamed) =
        send_json(&app, reqwest::Method::PATCH, &one, &json!({"agentId": "demo", "name": "Trip plans"}), Some(&alice))
            .await;
    assert_eq!((status, &renamed["name"]), (200, &json!("Trip plans")), "{renamed}");
    let (_, page) = get(&app, &threads, Some(&alice)).await;
    assert_eq!(page["threads"][1]["name"], "Trip plans");
    let rows = audit_rows(&app).await;
    let rename = rows.iter().find(|r| r.entry.action == "thread.rename").expect("a thread.rename row");
    assert_eq!(rename.entry.actor, "person:alice");
    assert!(
        rename.entry.detail.contains("th-ck-a1") && !rename.entry.detail.contains("Trip"),
        "{}",
        rename.entry.detail
    );

    // Another person: as if the thread did not exist, and nothing changes.
    let before = (app.counts().await, every_table_as_text(&db.url).await);
    for (method, path, body) in [
        (reqwest::Method::PATCH, one.clone(), json!({"name": "Mine now"})),
        (reqwest::Method::POST, format!("{one}/archive"), json!({"agentId": "demo"})),
        (reqwest::Method::GET, format!("{one}/messages"), json!({})),
        (reqwest::Method::GET, one.clone(), json!({})),
        (reqwest::Method::DELETE, one.clone(), json!({})),
    ] {
        let (status, body) = send_json(&app, method.clone(), &path, &body, Some(&bob)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (403, Some("permission_denied")), "{method} {path}");
    }
    // Bad input from the owner: a clear error, nothing changes either.
    for body in [json!({"name": ""}), json!({"name": "x".repeat(201)}), json!({"agentId": "demo"}), json!({"name": 7})]
    {
        let (status, answer) = send_json(&app, reqwest::Method::PATCH, &one, &body, Some(&alice)).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("bad_request")), "{body}: {answer}");
    }
    assert_eq!((app.counts().await, every_table_as_text(&db.url).await), before);

    // Archive: left out of the list unless asked for; unarchive brings it back.
    let (status, archived) =
        send_json(&app, reqwest::Method::POST, &format!("{one}/archive"), &json!({"agentId": "demo"}), Some(&alice))
            .await;
    assert_eq!((status, &archived["archived"]), (200, &json!(true)), "{archived}");
    let (_, page) = get(&app, &threads, Some(&alice)).await;
    assert_eq!(listed(&page), vec!["th-ck-a2"]);
    let (_, page) = get(&app, &format!("{threads}&includeArchived=true"), Some(&alice)).await;
    assert_eq!(listed(&page), vec!["th-ck-a2", "th-ck-a1"]);
    assert_eq!(page["threads"][1]["archived"], true);
    let (status, _) =
        send_json(&app, reqwest::Method::PATCH, &one, &json!({"agentId": "demo", "archived": false}), Some(&alice))
            .await;
    assert_eq!(status, 200);
    let (_, page) = get(&app, &threads, Some(&alice)).await;
    assert_eq!(listed(&page), vec!["th-ck-a2", "th-ck-a1"]);
    let actions: Vec<String> = audit_rows(&app).await.into_iter().map(|r| r.entry.action).collect();
    assert!(
        actions.contains(&"thread.archive".to_string()) && actions.contains(&"thread.unarchive".to_string()),
        "{actions:?}"
    );

    // The thread's messages, in the runtime's shape.
    let (status, messages) = get(&app, &format!("{one}/messages"), Some(&alice)).await;
    assert_eq!(status, 200);
    let messages = messages["messages"].as_array().expect("messages").clone();
    assert_eq!(messages[0]["content"], "th-ck-a1 question");
    let call = messages.iter().find_map(|m| m["toolCalls"].as_array().map(|c| c[0].clone())).expect("a tool call");
    assert_eq!(call["name"], "lookup", "{call}");
    assert!(call["args"].is_string(), "{call}");

    // Erasing it takes its name along.
    let (status, _) = send_json(&app, reqwest::Method::DELETE, &one, &json!({"agentId": "demo"}), Some(&alice)).await;
    assert_eq!(status, 204);
    let (_, page) = get(&app, &format!("{threads}&includeArchived=true"), Some(&alice)).await;
    assert_eq!(listed(&page), vec!["th-ck-a2"]);
    assert!(!every_table_as_text(&db.url).await.contains("Trip plans"), "the name went with the thread");
}
on_both_stores!(threads_are_listed_renamed_and_archived_by_their_owner);

/// The provider's `headers` are the credential; the refusals are those of every route; CORS is
/// the tenant's.
async fn the_runtime_refuses_as_the_agui_route_and_answers_the_tenants_origin(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = app_token(&claims("acme", "alice"));
    let of_default = app_token(&claims("default", "carol"));
    let input = first_run("th-ck-auth", "run-1", "hi");
    let run = format!("{}/agent/demo/run", base("acme"));
    for (path, bearer, status) in [
        (format!("{}/info", base("acme")), None, 401),
        (format!("{}/info", base("acme")), Some("not-a-token"), 401),
        (format!("{}/info", base("acme")), Some(of_default.as_str()), 403),
        (format!("{}/threads?agentId=demo", base("acme")), None, 401),
        (format!("{}/threads?agentId=demo", base("acme")), Some(of_default.as_str()), 403),
    ] {
        let (got, body) = get(&app, &path, bearer).await;
        assert_eq!(got, status, "{path} {bearer:?}: {body}");
    }
    let before = app.counts().await;
    let response = post_stream(&app, &run, &input, None).await;
    assert_eq!(response.status(), 401);
    let response = post_stream(&app, &run, &input, Some(&of_default)).await;
    assert_eq!(response.status(), 403);
    assert_eq!(app.counts().await, before, "no refused run stored anything");
    let events = run_through_runtime(&app, "acme", "demo", &input, Some(&alice)).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));

    // A tenant API key in the provider's headers: its agents only, its runs the tenant's.
    let (key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (status, info) = get(&app, &format!("{}/info", base("acme")), Some(&key)).await;
    assert_eq!(status, 200, "{info}");
    let agents: Vec<&String> = info["agents"].as_object().expect("agents").keys().collect();
    assert_eq!(agents, vec!["demo"]);
    let by_key = first_run("th-ck-key", "run-1", "by key");
    let events = run_through_runtime(&app, "acme", "demo", &by_key, Some(&key)).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
    let response = post_stream(&app, &format!("{}/agent/mailer/run", base("acme")), &by_key, Some(&key)).await;
    assert_eq!(response.status(), 403, "an agent the key does not name");
    let (_, page) = get(&app, &format!("{}/threads?agentId=demo", base("acme")), Some(&key)).await;
    assert_eq!(listed(&page), vec!["th-ck-key"], "the tenant's threads, not alice's");

    // CORS: acme's origin is allowed on acme's runtime routes, not on another tenant's.
    let preflight = |tenant: &str| {
        app.client
            .request(reqwest::Method::OPTIONS, app.url(&format!("{}/agent/demo/run", base(tenant))))
            .header("origin", "https://app.acme.test")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization, content-type")
            .send()
    };
    let allowed = preflight("acme").await.expect("preflight");
    assert_eq!(
        allowed.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()),
        Some("https://app.acme.test")
    );
    let other = preflight("default").await.expect("preflight");
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let patch = app
        .client
        .request(reqwest::Method::OPTIONS, app.url(&format!("{}/threads/th-ck-auth", base("acme"))))
        .header("origin", "https://app.acme.test")
        .header("access-control-request-method", "PATCH")
        .send()
        .await
        .expect("preflight");
    let methods = patch.headers().get("access-control-allow-methods").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(methods.contains("PATCH"), "{methods}");
}
on_both_stores!(the_runtime_refuses_as_the_agui_route_and_answers_the_tenants_origin);

/// `copilotkit_path` publishes the runtime under another base: info, a run and the threads
/// answer there (the socket's address too), and the default base is no route any more.
async fn the_runtime_answers_under_a_configured_base_path(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.copilotkit_path = "/api/copilotkit".to_string();
    let app = TestApp::start_with(config).await;

    let (status, info) = get(&app, "/api/copilotkit/default/info", None).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["agents"]["demo"]["name"], "demo", "{info}");
    let socket = info["intelligence"]["wsUrl"].as_str().unwrap_or_default();
    assert!(socket.ends_with("/api/copilotkit/default/threads/realtime"), "{info}");

    let input = first_run("th-ck-based", "run-1", "hello there");
    let response = post_stream(&app, "/api/copilotkit/default/agent/demo/run", &input, None).await;
    assert_eq!(response.status(), 200);
    let events = read_events(response, None).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&events));
    assert!(text_of(&events).contains("You said: \"hello there\""), "{}", text_of(&events));

    let (status, page) = get(&app, "/api/copilotkit/default/threads?agentId=demo&limit=5", None).await;
    assert_eq!((status, listed(&page)), (200, vec!["th-ck-based".to_string()]), "{page}");
    let (status, one) = get(&app, "/api/copilotkit/default/threads/th-ck-based", None).await;
    assert_eq!((status, &one["id"]), (200, &json!("th-ck-based")), "{one}");

    for old in ["/v1/copilotkit/default/info", "/v1/copilotkit/default/threads?agentId=demo"] {
        let (status, error) = get(&app, old, None).await;
        assert_eq!((status, error["error"]["code"].as_str()), (404, Some("not_found")), "{old}: {error}");
    }
    let response = post_stream(&app, "/v1/copilotkit/default/agent/demo/run", &input, None).await;
    assert_eq!(response.status(), 404);
    // The gateway's other routes are where they were.
    let (status, thread) = get(&app, "/v1/threads/th-ck-based", None).await;
    assert_eq!(status, 200, "{thread}");
}
on_both_stores!(the_runtime_answers_under_a_configured_base_path);

pub(crate) type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the live thread list's socket as `@copilotkit/core` does: a join token from
/// `POST …/threads/subscribe`, the Phoenix socket at `{wsUrl}/websocket`, the channel of the
/// list's `joinCode` joined.
async fn open_live_list(app: &TestApp, tenant: &str, bearer: Option<&str>) -> Socket {
    let (status, info) = get(app, &format!("{}/info", base(tenant)), bearer).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["threadEndpoints"]["realtimeMetadata"], true, "{info}");
    let socket = info["intelligence"]["wsUrl"].as_str().expect("wsUrl").to_string();
    let (status, page) = get(app, &format!("{}/threads?agentId=demo", base(tenant)), bearer).await;
    assert_eq!(status, 200, "{page}");
    let code = page["joinCode"].as_str().expect("joinCode").to_string();
    let (status, grant) =
        send_json(app, reqwest::Method::POST, &format!("{}/threads/subscribe", base(tenant)), &json!({}), bearer).await;
    assert_eq!(status, 200, "{grant}");
    let token = grant["joinToken"].as_str().expect("joinToken");
    let url = format!("ws:{socket}/websocket?join_token={token}&vsn=2.0.0");
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.expect("the socket opens");
    send_frame(&mut socket, json!(["1", "1", format!("user_meta:{code}"), "phx_join", {}])).await;
    let reply = next_frame(&mut socket).await;
    assert_eq!(reply, json!(["1", "1", format!("user_meta:{code}"), "phx_reply", {"status": "ok", "response": {}}]));
    socket
}

pub(crate) async fn send_frame(socket: &mut Socket, frame: Value) {
    use futures_util::SinkExt;
    let message = tokio_tungstenite::tungstenite::Message::Text(frame.to_string().into());
    socket.send(message).await.expect("sent");
}

/// The next text frame, within ten seconds (the socket reads again every two).
pub(crate) async fn next_frame(socket: &mut Socket) -> Value {
    use futures_util::StreamExt;
    loop {
        let message = tokio::time::timeout(std::time::Duration::from_secs(10), socket.next())
            .await
            .expect("a frame within 10 s")
            .expect("the socket is open")
            .expect("a frame");
        if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).expect("a JSON frame");
        }
    }
}

/// The `thread_metadata` pushes up to and including the first that `until` accepts (the
/// `thread_run_activity` pushes between them are passed over).
pub(crate) async fn pushes_until(socket: &mut Socket, until: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut pushes = Vec::new();
    loop {
        let frame = next_frame(socket).await;
        if frame[3] == "thread_run_activity" {
            continue;
        }
        assert_eq!(frame[3], "thread_metadata", "{frame}");
        assert_eq!(frame[0], "1", "pushed on the joined channel: {frame}");
        let done = until(&frame[4]);
        pushes.push(frame[4].clone());
        if done {
            return pushes;
        }
    }
}

/// `useThreads`' live list: a thread created, renamed, archived and erased elsewhere reaches the
/// subscribed socket without a new list; another person's thread never does; a heartbeat is
/// answered; a socket needs a grant of its tenant.
async fn the_live_thread_list_tells_the_owner_what_changed_and_no_one_else(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let alice = app_token(&claims("acme", "alice"));
    let bob = app_token(&claims("acme", "bob"));
    run_through_runtime(&app, "acme", "demo", &first_run("th-live-1", "run-1", "first"), Some(&alice)).await;
    let mut socket = open_live_list(&app, "acme", Some(&alice)).await;

    send_frame(&mut socket, json!([null, "2", "phoenix", "heartbeat", {}])).await;
    let reply = next_frame(&mut socket).await;
    assert_eq!(reply, json!([null, "2", "phoenix", "phx_reply", {"status": "ok", "response": {}}]));

    // Bob's thread first, then alice's: only alice's is told.
    run_through_runtime(&app, "acme", "demo", &first_run("th-live-bob", "run-1", "bob's"), Some(&bob)).await;
    run_through_runtime(&app, "acme", "demo", &first_run("th-live-2", "run-1", "second"), Some(&alice)).await;
    let told = pushes_until(&mut socket, |p| p["threadId"] == "th-live-2" && p["thread"]["status"] != "running").await;
    let created = told.iter().find(|p| p["threadId"] == "th-live-2").expect("th-live-2 told");
    assert_eq!((&created["operation"], &created["thread"]["agentId"]), (&json!("created"), &json!("demo")), "{told:?}");
    let mut alices = told;

    let one = format!("{}/threads/th-live-1", base("acme"));
    let (status, _) =
        send_json(&app, reqwest::Method::PATCH, &one, &json!({"agentId": "demo", "name": "Renamed"}), Some(&alice))
            .await;
    assert_eq!(status, 200);
    let told = pushes_until(&mut socket, |p| p["thread"]["name"] == "Renamed").await;
    alices.extend(told.clone());
    assert_eq!(
        told.last().map(|p| (p["operation"].clone(), p["threadId"].clone())),
        Some((json!("updated"), json!("th-live-1")))
    );

    let (status, _) =
        send_json(&app, reqwest::Method::POST, &format!("{one}/archive"), &json!({"agentId": "demo"}), Some(&alice))
            .await;
    assert_eq!(status, 200);
    let told = pushes_until(&mut socket, |p| p["operation"] == "archived").await;
    alices.extend(told.clone());
    assert_eq!(told.last().map(|p| p["thread"]["archived"].clone()), Some(json!(true)), "{told:?}");

    let two = format!("{}/threads/th-live-2", base("acme"));
    let (status, _) = send_json(&app, reqwest::Method::DELETE, &two, &json!({"agentId": "demo"}), Some(&alice)).await;
    assert_eq!(status, 204);
    let told = pushes_until(&mut socket, |p| p["operation"] == "deleted").await;
    alices.extend(told.clone());
    assert_eq!(told.last().map(|p| p["deleted"]["id"].clone()), Some(json!("th-live-2")), "{told:?}");

    // Bob's own socket hears of his thread and never of alice's.
    let mut bobs = open_live_list(&app, "acme", Some(&bob)).await;
    let (status, _) = send_json(
        &app,
        reqwest::Method::PATCH,
        &format!("{}/threads/th-live-bob", base("acme")),
        &json!({"name": "Bob's name"}),
        Some(&bob),
    )
    .await;
    assert_eq!(status, 200);
    let told = pushes_until(&mut bobs, |p| p["thread"]["name"] == "Bob's name").await;
    let all = format!("{told:?}");
    assert!(!all.contains("th-live-1") && !all.contains("th-live-2"), "{all}");

    // A socket without a grant, or with another tenant's, is refused before it opens.
    let (_, info) = get(&app, &format!("{}/info", base("acme")), Some(&alice)).await;
    let socket_url = info["intelligence"]["wsUrl"].as_str().expect("wsUrl").to_string();
    let refused =
        tokio_tungstenite::connect_async(format!("ws:{socket_url}/websocket?join_token=nope&vsn=2.0.0")).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("an unknown join token opened a socket: {:?}", other.map(|(_, r)| r.status())),
    }
    let (_, grant) = send_json(
        &app,
        reqwest::Method::POST,
        &format!("{}/threads/subscribe", base("acme")),
        &json!({}),
        Some(&alice),
    )
    .await;
    let token = grant["joinToken"].as_str().expect("joinToken");
    let elsewhere = socket_url.replace("/acme/", "/default/");
    let refused = tokio_tungstenite::connect_async(format!("ws:{elsewhere}/websocket?join_token={token}")).await;
    assert!(
        matches!(&refused, Err(tokio_tungstenite::tungstenite::Error::Http(r)) if r.status() == 401),
        "a grant of acme opened default's socket"
    );
    drop(socket);
    assert!(!format!("{alices:?}").contains("th-live-bob"), "alice heard of bob's thread: {alices:?}");
}
on_both_stores!(the_live_thread_list_tells_the_owner_what_changed_and_no_one_else);

/// A rename on another instance reaches a socket open on this one (read from the database).
#[tokio::test]
async fn the_live_thread_list_hears_of_a_change_made_on_another_instance() {
    let (a, b, _db) = two_apps().await;
    run_through_runtime(&a, "default", "demo", &first_run("th-live-far", "run-1", "far"), None).await;
    let mut socket = open_live_list(&a, "default", None).await;
    let path = format!("{}/threads/th-live-far", base("default"));
    let (status, _) = send_json(&b, reqwest::Method::PATCH, &path, &json!({"name": "Named on b"}), None).await;
    assert_eq!(status, 200);
    let told = pushes_until(&mut socket, |p| p["thread"]["name"] == "Named on b").await;
    assert_eq!(told.last().map(|p| p["threadId"].clone()), Some(json!("th-live-far")));
}
