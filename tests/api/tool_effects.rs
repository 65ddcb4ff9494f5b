//! Exactly-once tool effects (docs/agents.md): every tool call carries an idempotency key
//! derived from its turn and call, the same when another instance re-issues a call whose
//! result was never recorded, so a tool can make its effect once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};

use crate::gateway_process;
use crate::helpers::*;
use crate::openai::start_model;

/// What an idempotent tool saw: the key of every request, in order, and its effects (one per
/// new key).
#[derive(Default)]
struct Ledger {
    keys: Vec<String>,
    acted_on: BTreeSet<String>,
    effects: usize,
}

/// A tool that acts once per idempotency key and answers a repeated key with the first
/// result. Its very first request is slow: it never answers, so the instance making it can be
/// killed in the middle of the call.
async fn start_idempotent_tool() -> (String, Arc<Mutex<Ledger>>) {
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let shared = ledger.clone();
    let app = axum::Router::new().route(
        "/charge",
        post(move |headers: HeaderMap, Json(_args): Json<Value>| {
            let shared = shared.clone();
            async move {
                let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                let first_request = {
                    let mut ledger = shared.lock().unwrap_or_else(|p| p.into_inner());
                    ledger.keys.push(key.clone());
                    if ledger.acted_on.insert(key) {
                        ledger.effects += 1;
                    }
                    ledger.keys.len() == 1
                };
                if first_request {
                    std::future::pending::<()>().await;
                }
                "charged 42 EUR"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/charge", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, ledger)
}

/// The instance running an LLM turn is killed (SIGKILL) inside a slow tool call; another
/// instance takes the turn over (PostgreSQL) and re-issues the call under the same key: the
/// tool saw one key, at most twice, and acted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cut_by_a_crash_is_reissued_under_its_key_and_acts_once() {
    let model = start_model(vec![("charge_card", json!({"amount": 42}))], "Charged.", false).await;
    let (tool_url, ledger) = start_idempotent_tool().await;
    let db = TestDatabase::new(Backend::Postgres).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[turns]
lease_ms = 2000
heartbeat_ms = 400
sweep_ms = 300

[[agents]]
name = "assistant"
kind = "openai"
base_url = "{}"
model = "scripted"
[[agents.tools]]
name = "charge_card"
url = "{tool_url}"
timeout_secs = 60
"#,
            model.url
        ),
    )
    .expect("config");
    gateway_process::migrate(&db.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut a = gateway_process::spawn_instance(&config, &db.url, logs.clone());
    let mut b = gateway_process::spawn_instance(&config, &db.url, logs.clone());
    let client = crate::tls_support::http_client().build().expect("client");
    let input = first_run("th-once", "run-1", "charge my card");
    let post = |address: &str, last_event_id: Option<String>| {
        let mut request = client
            .post(format!("http://{address}/v1/agui/agents/assistant"))
            .header("content-type", "application/json")
            .body(input.to_string());
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send()
    };
    let reader = tokio::spawn(read_events(post(&a.address, None).await.expect("run on A"), None));
    wait_until(std::time::Duration::from_secs(20), "the tool to receive A's call", || {
        let seen = ledger.lock().unwrap_or_else(|p| p.into_inner()).keys.len();
        async move { seen >= 1 }
    })
    .await;
    a.child.kill().expect("SIGKILL");
    let _ = a.child.wait();
    let head = reader.await.expect("reader");
    let last_id = head.last().and_then(|e| e.id.clone());
    let tail = tokio::time::timeout(
        std::time::Duration::from_secs(40),
        read_events(post(&b.address, last_id).await.expect("resume on B"), None),
    )
    .await
    .expect("B finished the turn");
    let mut joined = head;
    joined.extend(tail);
    let _ = b.child.kill();
    let _ = b.child.wait();

    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let result = joined.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result.data["content"], "charged 42 EUR");
    let ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
    assert!((1..=2).contains(&ledger.keys.len()), "at most twice: {:?}", ledger.keys);
    let key = &ledger.keys[0];
    assert!(key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()), "a hex key: {key:?}");
    assert!(ledger.keys.iter().all(|k| k == key), "one key for every attempt: {:?}", ledger.keys);
    assert_eq!(ledger.effects, 1, "the tool acted once");
}

/// Two calls of one turn carry different keys, and a call's key does not change when the
/// model is asked again: each call is its own effect.
#[tokio::test]
async fn each_tool_call_carries_its_own_idempotency_key() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = start_model(
            vec![("charge_card", json!({"amount": 1})), ("charge_card", json!({"amount": 2}))],
            "Charged twice.",
            false,
        )
        .await;
        let keys: Arc<Mutex<Vec<String>>> = Arc::default();
        let recorded = keys.clone();
        let app = axum::Router::new().route(
            "/charge",
            post(move |headers: HeaderMap| {
                let recorded = recorded.clone();
                async move {
                    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default();
                    recorded.lock().unwrap_or_else(|p| p.into_inner()).push(key.to_string());
                    "charged"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let tool_url = format!("http://{}/charge", listener.local_addr().expect("address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let db = TestDatabase::new(backend).await;
        let mut config = test_config(&db.url);
        let mut agent = crate::openai::openai_agent(&model.url, &tool_url, "never");
        if let agui_gateway::config::AgentKindConfig::Openai(openai) = &mut agent.kind {
            openai.tools[0].name = "charge_card".into();
            openai.tools[0].parameters = json!({"type": "object"});
        }
        config.agents.push(agent);
        let app = TestApp::start_with(config).await;
        let events = app.run_to_end("assistant", &first_run("th-keys", "run-1", "charge twice")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        let keys = keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys.iter().all(|k| k.len() == 64), "{keys:?}");
        assert_ne!(keys[0], keys[1], "two calls, two keys");
    }
}
