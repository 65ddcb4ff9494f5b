//! The `agui` agent (§9.3) in front of two real AG-UI servers whose protocol code is the
//! official packages': one on `@ag-ui/encoder` (Node), one on `ag-ui-protocol` (Python). Each
//! scenario runs against both: a normal run, an upstream interrupt answered through the
//! gateway, and upstreams that send an invalid or out-of-order event.

use std::path::PathBuf;
use std::process::{Child, Command};

use agui_gateway::config::TlsConfig;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::tls_support::{address_of, server_config, TestCa, TlsFront};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Upstream {
    Node,
    Python,
}

/// A running upstream server, stopped on drop.
pub(crate) struct UpstreamServer {
    child: Child,
    pub(crate) url: String,
}

impl Drop for UpstreamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn upstream_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstream")
}

impl UpstreamServer {
    pub(crate) fn start(kind: Upstream) -> UpstreamServer {
        let dir = upstream_dir();
        let command = match kind {
            Upstream::Node => {
                assert!(
                    dir.join("node/node_modules/@ag-ui/encoder").exists(),
                    "run `npm ci --prefix tests/upstream/node` (scripts/test does)"
                );
                let mut command = Command::new("node");
                command.arg(dir.join("node/server.mjs"));
                command
            }
            Upstream::Python => {
                let python = dir.join("python/.venv/bin/python");
                assert!(python.exists(), "create tests/upstream/python/.venv (scripts/test does)");
                let mut command = Command::new(python);
                command.arg(dir.join("python/server.py"));
                command
            }
        };
        let (child, url) = start_listening(command, "the upstream server");
        UpstreamServer { child, url }
    }

    pub(crate) async fn requests(&self) -> Vec<Value> {
        let answer = crate::tls_support::get(format!("{}/requests", self.url)).await.expect("requests");
        answer.json().await.expect("JSON")
    }
}

/// A gateway whose agent `upstream` fronts `route` of the upstream server.
pub(crate) async fn gateway_in_front_of(upstream: &UpstreamServer, route: &str, db: &TestDatabase) -> TestApp {
    gateway_at(&upstream.url, route, db, TlsConfig::default()).await
}

/// A gateway whose agent `upstream` fronts `route` of the AG-UI server at `base` (http:// or
/// https://), with `tls` as its outbound TLS settings.
async fn gateway_at(base: &str, route: &str, db: &TestDatabase, tls: TlsConfig) -> TestApp {
    let mut config = test_config(&db.url);
    config.tls = tls;
    let toml = format!(
        r#"
name = "upstream"
kind = "agui"
url = "{}/agents/{route}"
timeout_secs = 20
secret_headers = {{ authorization = "AGUI_TEST_UPSTREAM_AUTHORIZATION" }}
"#,
        base
    );
    config.agents.push(toml::from_str(&toml).expect("agent config"));
    TestApp::start_with(config).await
}

pub(crate) fn upstream_of(kind: Upstream) -> UpstreamServer {
    // The secret header's value comes from the environment; the stream never shows it.
    std::env::set_var("AGUI_TEST_UPSTREAM_AUTHORIZATION", "Bearer upstream-secret");
    UpstreamServer::start(kind)
}

/// The store a scenario of the relay that goes through the store runs on: each upstream its
/// own, so those scenarios cover both stores without running each four times.
fn store_of(kind: Upstream) -> Backend {
    match kind {
        Upstream::Node => Backend::Sqlite,
        Upstream::Python => Backend::Postgres,
    }
}

async fn a_normal_run_is_relayed_under_the_gateways_ids(kind: Upstream) {
    let server = upstream_of(kind);
    let db = TestDatabase::new(store_of(kind)).await;
    let app = gateway_in_front_of(&server, "chat", &db).await;
    let events = app.run_to_end("upstream", &first_run("th-up", "run-1", "hello there")).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "TEXT_MESSAGE_CONTENT")
        .map(|e| e.data["delta"].as_str().unwrap_or(""))
        .collect();
    assert!(text.starts_with("Upstream heard: hello there"), "{text}");
    assert!(text.ends_with("Done after 1 messages."), "{text}");
    let start = events.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("a tool call");
    assert_eq!(start.data["toolCallName"], "get_weather");
    assert_eq!(start.data["toolCallId"], format!("{turn}:c1"), "the gateway's id, not the upstream's");
    let args: String = events
        .iter()
        .filter(|e| e.kind() == "TOOL_CALL_ARGS")
        .map(|e| e.data["delta"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#);
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("result");
    assert_eq!(
        (result.data["toolCallId"].as_str(), result.data["content"].as_str()),
        (Some(&*format!("{turn}:c1")), Some("sunny"))
    );
    assert!(events.iter().any(|e| e.kind() == "STATE_SNAPSHOT" && e.data["snapshot"]["upstream"].is_object()));
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    let raw = serde_json::to_string(&events.iter().map(|e| &e.data).collect::<Vec<_>>()).expect("json");
    assert!(!raw.contains("upstream-secret"), "a secret header reached the stream");

    // What the upstream got: the gateway's thread (per tenant), its ids, the secret header.
    let requests = server.requests().await;
    let first = &requests.last().expect("a request")["body"];
    assert_eq!(first["threadId"], "default:th-up");
    assert_eq!(first["messages"][0]["id"], "run-1-user", "the user message under the client's id");
    let headers = &requests.last().expect("a request")["headers"];
    assert_eq!(headers["authorization"], "Bearer upstream-secret");

    // A second turn: the upstream gets the thread's history from the gateway's record.
    let mut second = first_run("th-up", "run-2", "and again");
    let messages = app.client.get(app.url("/v1/threads/th-up/messages")).send().await.expect("messages");
    let mut history: Vec<Value> =
        messages.json::<Value>().await.expect("json")["messages"].as_array().expect("list").clone();
    history.push(second["messages"][0].clone());
    second["messages"] = Value::Array(history.clone());
    let again = app.run_to_end("upstream", &second).await;
    assert_eq!(again.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&again));
    let requests = server.requests().await;
    let body = &requests.last().expect("request")["body"];
    let sent: Vec<&str> =
        body["messages"].as_array().expect("messages").iter().filter_map(|m| m["id"].as_str()).collect();
    let recorded: Vec<&str> = history.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(sent.len(), recorded.len(), "the whole record goes upstream: {sent:?} vs {recorded:?}");
    // What the upstream said goes back under its own ids (its first run was `<turn>-1`); the
    // user's messages keep theirs.
    let theirs = |suffix: &str| format!("{turn}-1-{suffix}");
    assert_eq!(
        sent,
        ["run-1-user", &theirs("heard"), &theirs("weather-result"), &theirs("done"), "run-2-user"],
        "the upstream's own ids: {recorded:?}"
    );
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages[1]["toolCalls"][0]["id"], theirs("weather"), "its call, under its id");
    assert_eq!(messages[2]["toolCallId"], theirs("weather"), "the result names it so");

    // And the official client accepts the relayed stream.
    let (ok, report) = agui_check(&app.run_url("upstream"), &first_run("th-up-check", "run-1", "check me")).await;
    assert!(ok, "{report}");
}

async fn an_upstream_interrupt_is_decided_through_the_gateway(kind: Upstream) {
    let server = upstream_of(kind);
    let db = TestDatabase::new(store_of(kind)).await;
    let app = gateway_in_front_of(&server, "approval", &db).await;
    let first = app.run_to_end("upstream", &first_run("th-up-int", "run-1", "mail the team")).await;
    let end = &first.last().expect("end").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&first));
    let interrupt = &end["outcome"]["interrupts"][0];
    let id = interrupt["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("int_"), "a gateway id: {id}");
    assert_eq!(interrupt["reason"], "tool_approval");
    let call = first.iter().find(|e| e.kind() == "TOOL_CALL_START").expect("call");
    assert_eq!(interrupt["toolCallId"], call.data["toolCallId"], "the call under the gateway's id");
    assert_eq!(interrupt["responseSchema"]["required"], json!(["approved"]));
    assert!(interrupt["expiresAt"].is_string());

    // A payload the upstream's schema refuses never reaches it, and decides nothing.
    let before = server.requests().await.len();
    let resume = |run: &str, payload: Value| {
        json!({ "threadId": "th-up-int", "runId": run, "messages": [],
                "resume": [{ "interruptId": id, "status": "resolved", "payload": payload }] })
    };
    let refused = app.run_to_end("upstream", &resume("run-2", json!({ "approved": "yes" }))).await;
    assert_eq!(refused.last().expect("end").data["code"], "invalid_resume");
    assert_eq!(server.requests().await.len(), before, "the upstream was not asked");

    let resumed = app.run_to_end("upstream", &resume("run-3", json!({ "approved": true, "note": "ship it" }))).await;
    assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&resumed));
    let result = resumed.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result.data["toolCallId"], call.data["toolCallId"]);
    assert_eq!(result.data["content"], "sent");
    let text: String = resumed
        .iter()
        .filter(|e| e.kind() == "TEXT_MESSAGE_CONTENT")
        .map(|e| e.data["delta"].as_str().unwrap_or(""))
        .collect();
    assert!(text.contains("Sent. Note: ship it"), "{text}");
    let requests = server.requests().await;
    let forwarded = &requests.last().expect("request")["body"]["resume"];
    assert_eq!(
        forwarded,
        &json!([{ "interruptId": "up-approval-1", "status": "resolved", "payload": { "approved": true, "note": "ship it" } }])
    );
}

// One store: the upstream's events are checked before any store.
async fn an_upstream_that_breaks_the_protocol_fails_the_turn(kind: Upstream) {
    let server = upstream_of(kind);
    for (route, expect) in [("invalid", "invalid event"), ("out-of-order", "not open")] {
        let db = TestDatabase::new(Backend::Sqlite).await;
        let app = gateway_in_front_of(&server, route, &db).await;
        let events = app.run_to_end("upstream", &first_run("th-bad", "run-1", "x")).await;
        let end = &events.last().expect("end").data;
        assert_eq!(end["type"], "RUN_ERROR", "{route}: {:?}", kinds(&events));
        assert_eq!(end["code"], "failed");
        assert!(end["message"].as_str().is_some_and(|m| m.contains(expect)), "{route}: {end}");
        // The bad event itself never reached the client.
        assert!(events.iter().all(|e| e.data["delta"] != Value::Null || e.kind() != "TEXT_MESSAGE_CONTENT"));
        let (ok, report) = agui_check(&app.run_url("upstream"), &first_run("th-bad-check", "run-1", "x")).await;
        assert!(ok, "{route}: the official client accepts the gateway's stream: {report}");
    }
}

/// The upstream served over HTTPS (a TLS front before the real server): with its CA trusted
/// through `tls.extra_ca_file` the run is relayed and the official client accepts it; with a
/// certificate from a CA trusted nowhere, the run ends in a `RUN_ERROR` naming the problem and
/// the upstream is never asked.
// One store: outbound TLS is in front of any store.
async fn an_https_upstream_is_reached_over_verified_tls(kind: Upstream) {
    let server = upstream_of(kind);
    let ca = TestCa::new("upstream");
    let stranger = TestCa::new("stranger");
    let backend = address_of(&server.url);
    let trusted = TlsFront::start(backend, server_config(&ca.server("upstream", &["127.0.0.1"]), None)).await;
    let untrusted = TlsFront::start(backend, server_config(&stranger.server("upstream", &["127.0.0.1"]), None)).await;
    let tls = TlsConfig { extra_ca_file: ca.ca_file().display().to_string(), ..TlsConfig::default() };

    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway_at(&trusted.url(""), "chat", &db, tls.clone()).await;
    let events = app.run_to_end("upstream", &first_run("th-up-tls", "run-1", "hello over tls")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let text: String = events
        .iter()
        .filter(|e| e.kind() == "TEXT_MESSAGE_CONTENT")
        .map(|e| e.data["delta"].as_str().unwrap_or(""))
        .collect();
    assert!(text.starts_with("Upstream heard: hello over tls"), "{text}");
    let (ok, report) = agui_check(&app.run_url("upstream"), &first_run("th-up-tls-check", "run-1", "check")).await;
    assert!(ok, "{report}");
    let asked = server.requests().await.len();

    let other = TestDatabase::new(Backend::Sqlite).await;
    let refusing = gateway_at(&untrusted.url(""), "chat", &other, tls).await;
    let events = refusing.run_to_end("upstream", &first_run("th-up-tls", "run-1", "hello")).await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(&events));
    let message = end["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "the upstream agent could not be reached: certificate not trusted (UnknownIssuer) for host 127.0.0.1"
        ),
        "{message}"
    );
    assert_eq!(server.requests().await.len(), asked, "the untrusted front passed nothing on");
}

/// An upstream's reasoning and activity are relayed under the gateway's ids, in order, and
/// pass the official client; the activity is kept in the thread (its last state), the reasoning not.
async fn upstream_reasoning_and_activity_are_relayed(kind: Upstream) {
    let server = upstream_of(kind);
    let db = TestDatabase::new(store_of(kind)).await;
    let app = gateway_in_front_of(&server, "thinking", &db).await;
    let input = first_run("th-up-think", "run-1", "decide for me");
    let events = app.run_to_end("upstream", &input).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let relayed: Vec<(String, String)> = events
        .iter()
        .filter(|e| {
            e.kind().starts_with("REASONING_") || e.kind().starts_with("ACTIVITY_") || e.kind().starts_with("TEXT_")
        })
        .map(|e| (e.kind().to_string(), e.data["messageId"].as_str().unwrap_or("").to_string()))
        .collect();
    let ours = |suffix: &str| format!("{turn}:{suffix}");
    let expected: Vec<(String, String)> = [
        ("REASONING_START", ours("reasoning1")),
        ("REASONING_MESSAGE_START", ours("thought1")),
        ("REASONING_MESSAGE_CONTENT", ours("thought1")),
        ("REASONING_MESSAGE_CONTENT", ours("thought1")),
        ("REASONING_MESSAGE_END", ours("thought1")),
        ("REASONING_END", ours("reasoning1")),
        ("ACTIVITY_SNAPSHOT", ours("a1")),
        ("ACTIVITY_DELTA", ours("a1")),
        ("TEXT_MESSAGE_START", ours("m1")),
        ("TEXT_MESSAGE_CONTENT", ours("m1")),
        ("TEXT_MESSAGE_END", ours("m1")),
    ]
    .into_iter()
    .map(|(k, id)| (k.to_string(), id))
    .collect();
    assert_eq!(relayed, expected);
    let thought: String = deltas(&events, "REASONING_MESSAGE_CONTENT");
    assert_eq!(thought, "Weighing the options.");
    let snapshot = events.iter().find(|e| e.kind() == "ACTIVITY_SNAPSHOT").expect("snapshot");
    assert_eq!(snapshot.data["activityType"], "plan");
    assert_eq!(snapshot.data["content"], json!({"steps": ["search", "answer"], "done": 0}));
    let delta = events.iter().find(|e| e.kind() == "ACTIVITY_DELTA").expect("delta");
    assert_eq!(delta.data["patch"], json!([{"op": "replace", "path": "/done", "value": 1}]));
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");

    // The thread keeps the activity (its last state, the delta applied), never the reasoning.
    let body: Value = app.get_json("/v1/threads/th-up-think/messages").await;
    let roles: Vec<&str> =
        body["messages"].as_array().expect("list").iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "activity", "assistant"], "{body}");
    assert_eq!(
        body["messages"][1],
        json!({"id": ours("a1"), "role": "activity", "activityType": "plan",
               "content": {"steps": ["search", "answer"], "done": 1}})
    );

    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}

/// An upstream run that fails after its model spent tokens: the gateway's RUN_ERROR carries
/// them (AG-UI 1.0), and the official client accepts it.
// One store: what is checked is the upstream's usage on the wire.
async fn a_failed_upstream_runs_usage_reaches_the_client(kind: Upstream) {
    let server = upstream_of(kind);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway_in_front_of(&server, "fails", &db).await;
    let input = first_run("th-up-fails", "run-1", "look into it");
    let events = app.run_to_end("upstream", &input).await;
    let end = events.last().expect("end");
    assert_eq!(end.kind(), "RUN_ERROR", "{:?}", kinds(&events));
    assert!(end.data["message"].as_str().is_some_and(|m| m.contains("the model stopped")), "{}", end.data);
    assert_eq!(
        end.data["usage"],
        json!([{ "provider": "acme", "model": "m-1", "inputTokens": 7, "outputTokens": 3, "totalTokens": 10 }])
    );
    let (ok, report) = agui_check(&app.run_url("upstream"), &input).await;
    assert!(ok, "{report}");
}

macro_rules! on_both_upstreams {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn node() {
                super::$name(super::Upstream::Node).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn python() {
                super::$name(super::Upstream::Python).await
            }
        }
    };
}
pub(crate) use on_both_upstreams;

on_both_upstreams!(a_normal_run_is_relayed_under_the_gateways_ids);
on_both_upstreams!(an_upstream_interrupt_is_decided_through_the_gateway);
on_both_upstreams!(an_upstream_that_breaks_the_protocol_fails_the_turn);
on_both_upstreams!(an_https_upstream_is_reached_over_verified_tls);
on_both_upstreams!(upstream_reasoning_and_activity_are_relayed);
on_both_upstreams!(a_failed_upstream_runs_usage_reaches_the_client);

/// The events of one read of the upstream's stream reach the log as one append, not one append
/// each: a run the upstream writes to its socket at once costs the log writer a few appends,
/// whatever its length (counted by the writer's own metric, one observation per append).
// One store: what is counted is the relay's appends to the writer, before any store.
#[tokio::test]
async fn the_events_of_one_upstream_read_are_one_append() {
    let server = upstream_of(Upstream::Node);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = gateway_in_front_of(&server, "one-write", &db).await;
    let appends = |metrics: &std::collections::HashMap<String, f64>| metrics["agui_log_queue_seconds{}"];
    let before = appends(&crate::metrics::scrape(&app).await);
    let events = app.run_to_end("upstream", &first_run("th-one-write", "run-1", "all at once")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let after = appends(&crate::metrics::scrape(&app).await);
    let relayed = events.len() - 2;
    assert!(relayed >= 10, "a run of some length: {:?}", kinds(&events));
    assert!(
        after - before <= 5.0,
        "{} appends for {} relayed events written upstream in one write",
        after - before,
        relayed
    );
}
