//! Credentials never shown (§2, §3): the gateway holds a tool's secret header so that neither
//! the page nor the model ever does. A careless tool echoes its request headers in its answer;
//! the raw value then appears nowhere — not in the client's stream, not in the thread's
//! messages, not in any table of the database, not in the gateway's log, not in the model's
//! next request — and a placeholder naming the variable stands in its place. A tool whose
//! arguments carry a credential (`secret_args`) is called with the value, while the model, the
//! stream and the log only ever see the placeholder.

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::gateway_process;
use crate::helpers::*;
use crate::on_both_stores;

const SECRET: &str = "tok-7f3a9c-very-secret";
const PLACEHOLDER: &str = "\u{2039}secret:AGUI_TEST_ECHO_TOKEN\u{203a}";

const ARG_SECRET: &str = "argtok-51c0ffee-also-secret";
const ARG_PLACEHOLDER: &str = "\u{2039}secret:AGUI_TEST_ARG_TOKEN\u{203a}";

/// A tool that answers with the headers and the body it was sent (as a careless debugging
/// endpoint does), and keeps the bodies.
async fn start_echoing_tool() -> (String, Arc<Mutex<Vec<String>>>) {
    let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/echo",
        post(move |headers: HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(body.clone());
                let seen: serde_json::Map<String, Value> = headers
                    .iter()
                    .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap_or_default())))
                    .collect();
                json!({ "received_headers": seen, "received_body": body }).to_string()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/echo", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_credential_echoed_back_appears_nowhere() {
    let model = ScriptedModel::planned(
        vec![("echo_headers", json!({})), ("use_token", json!({ "token": ARG_PLACEHOLDER, "query": "balance" }))],
        "The tools answered.",
    )
    .await;
    let (tool, bodies) = start_echoing_tool().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let database = dir.path().join("gateway.db");
    let database_url = format!("sqlite://{}", database.display());
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        model.agents_table(&format!(
            r#"
[[agents.tools]]
name = "echo_headers"
url = "{tool}"
secret_headers = {{ authorization = "AGUI_TEST_ECHO_TOKEN" }}
[[agents.tools]]
name = "use_token"
url = "{tool}"
parameters = {{ type = "object", properties = {{ query = {{ type = "string" }} }} }}
secret_args = {{ token = "AGUI_TEST_ARG_TOKEN" }}
"#
        )),
    )
    .expect("config");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut gateway = gateway_process::Spawn::new(&config, &database_url)
        .env(&[
            ("AGUI_TEST_ECHO_TOKEN", SECRET),
            ("AGUI_TEST_ARG_TOKEN", ARG_SECRET),
            ("AGUI_GATEWAY_LOG_FILTER", "debug,sqlx=warn,hyper=info,h2=info"),
        ])
        .start(logs.clone());
    let client = crate::tls_support::http_client().build().expect("client");
    let response = client
        .post(format!("http://{}/v1/agui/agents/assistant", gateway.address))
        .header("content-type", "application/json")
        .body(first_run("th-secret", "run-1", "what headers do you get?").to_string())
        .send()
        .await
        .expect("run");
    let (events, raw, _) = read_frames(response, None).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the tool's answer");
    let shown = result.data["content"].as_str().unwrap_or_default();
    assert!(shown.contains(PLACEHOLDER), "the placeholder stands in the credential's place: {shown}");
    assert!(!raw.contains(SECRET) && !raw.contains(ARG_SECRET), "the client's stream");
    // The credential argument: the call shows the placeholder, the tool got the value.
    let args: String = deltas(&events, "TOOL_CALL_ARGS");
    assert!(args.contains(ARG_PLACEHOLDER), "the call's arguments as shown: {args}");
    let sent = bodies.lock().expect("bodies").clone();
    let to_tool: Value = serde_json::from_str(sent.last().expect("the tool was called")).expect("json");
    assert_eq!(to_tool, json!({ "token": ARG_SECRET, "query": "balance" }), "the value, only in the call");

    let messages = client
        .get(format!("http://{}/v1/threads/th-secret/messages", gateway.address))
        .send()
        .await
        .expect("messages")
        .text()
        .await
        .expect("body");
    assert!(messages.contains(PLACEHOLDER) && !messages.contains(SECRET), "the thread's messages: {messages}");

    let requests = model.requests();
    let next = requests[1].to_string();
    assert!(next.contains("received_headers"), "the tool's answer reached the model: {next}");
    assert_eq!(requests.len(), 3, "asked after each tool");
    let offered = &requests[0]["tools"];
    let use_token = offered.as_array().expect("tools").iter().find(|t| t["function"]["name"] == "use_token");
    let definition = use_token.expect("offered").to_string();
    assert!(definition.contains(ARG_PLACEHOLDER), "the model is told to send the placeholder: {definition}");
    for request in &requests {
        let text = request.to_string();
        assert!(!text.contains(SECRET) && !text.contains(ARG_SECRET), "the model's requests: {text}");
    }

    gateway.child.kill().expect("stop");
    let _ = gateway.child.wait();
    for file in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        let bytes = std::fs::read(file.path()).expect("read");
        let found = [SECRET, ARG_SECRET].iter().any(|s| bytes.windows(s.len()).any(|w| w == s.as_bytes()));
        let name = file.file_name();
        if name.to_string_lossy().starts_with("gateway.db") {
            assert!(!found, "every table of the database ({name:?})");
        }
    }
    let logs = logs.lock().expect("logs").join("\n");
    assert!(!logs.is_empty(), "the gateway logged");
    assert!(!logs.contains(SECRET) && !logs.contains(ARG_SECRET), "the gateway's log");
}

/// The gateway's own secrets are masked as its agents' are: a person who pastes the metrics
/// token into a message that becomes a tool call's arguments sees a placeholder naming the
/// setting in the stream, in the interrupt's details and in the recorded call.
async fn the_gateways_own_secret_pasted_into_a_message_is_masked_naming_its_setting(backend: Backend) {
    const OWN: &str = "metrics-4b1d-own-secret";
    const OWN_PLACEHOLDER: &str = "\u{2039}secret:auth.metrics_token\u{203a}";
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.auth.metrics_token = OWN.to_string();
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("approver", &first_run("th-own", "run-1", &format!("the token is {OWN}"))).await;
    let args = deltas(&events, "TOOL_CALL_ARGS");
    assert!(args.contains(OWN_PLACEHOLDER) && !args.contains(OWN), "{args}");
    let interrupt = &events.last().expect("end").data["outcome"]["interrupts"][0];
    assert!(!interrupt.to_string().contains(OWN), "{interrupt}");
    // The recorded call holds the placeholder; the person's own message keeps its words (the
    // history check compares them with what the client sends again).
    let messages = app.get_json("/v1/threads/th-own/messages").await;
    let recorded = messages["messages"][1]["toolCalls"][0]["function"]["arguments"].as_str().expect("arguments");
    assert!(recorded.contains(OWN_PLACEHOLDER) && !recorded.contains(OWN), "{messages}");
}
on_both_stores!(the_gateways_own_secret_pasted_into_a_message_is_masked_naming_its_setting);
