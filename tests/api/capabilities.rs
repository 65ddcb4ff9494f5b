//! Each agent says what it can do in AG-UI 1.0's capabilities vocabulary (`GET /v1/agents`, `GET
//! /v1/agents/{agent}`): resumable SSE and the binary transport, the tools it holds and the
//! client tools it admits, interrupts and who decides them, its editable state keys, its
//! delegates and the input it takes. The official schema accepts every agent's capabilities
//! with nothing dropped; an agent the caller may not start answers like one that does not exist.

use agui_gateway::store::KeyKind;
use serde_json::{json, Value};

use crate::auth::{auth_config, new_key, rsa_provider};
use crate::fakes::model::openai_toml;
use crate::helpers::*;

async fn get(app: &TestApp, path: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = app.client.get(app.url(path));
    if let Some(key) = bearer {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("get");
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

fn assistant(model_url: &str) -> agui_gateway::config::AgentConfig {
    let settings = r#"
description = "Answers with tools."
max_steps = 5
frontend_tools = ["show_chart"]
builtins = ["ask_user", "delegate"]
delegates = ["demo"]
[editable_state]
plan = { type = "string" }
[[tools]]
name = "wire"
description = "Sends money."
url = "http://127.0.0.1:9/wire"
parameters = { type = "object", properties = { to = { type = "string" } } }
approval = "always"
deciders = ["role:finance"]
four_eyes = true
allow_edit = true
[[tools]]
name = "weather"
url = "http://127.0.0.1:9/weather"
"#;
    toml::from_str(&openai_toml("assistant", model_url, settings)).expect("agent config")
}

/// The official client's schema accepts each agent's capabilities as they are.
async fn official_schema_accepts(agents: &[Value]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("agents.json");
    std::fs::write(&path, Value::Array(agents.to_vec()).to_string()).expect("write");
    let output = tokio::process::Command::new("node")
        .arg("check-capabilities.mjs")
        .arg(&path)
        .current_dir(clients_dir())
        .output()
        .await
        .expect("node runs");
    let report = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "the official schema refused:\n{report}");
    assert_eq!(report.lines().filter(|l| l.ends_with(": ok")).count(), agents.len(), "{report}");
}

// One store: capabilities come from the configuration.
#[tokio::test]
async fn every_agent_states_its_capabilities_in_the_protocols_words() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(assistant("http://127.0.0.1:9/v1"));
    let app = TestApp::start_with(config).await;
    let (status, body) = get(&app, "/v1/agents?tenant=default", None).await;
    assert_eq!(status, 200, "{body}");
    let agents = body["agents"].as_array().expect("agents").clone();
    let named = |name: &str| agents.iter().find(|a| a["name"] == name).unwrap_or_else(|| panic!("{name}")).clone();

    let demo = named("demo")["capabilities"].clone();
    assert_eq!(demo["identity"], json!({ "name": "demo", "type": "agui-gateway/script" }), "{demo}");
    assert_eq!(demo["transport"]["resumable"], true);
    assert_eq!(demo["transport"]["streaming"], true);
    assert_eq!(demo["transport"]["httpBinary"], true, "the binary transport, by Accept");
    assert_eq!(demo["humanInTheLoop"]["interrupts"], false, "the demo asks no one");

    let approver = named("approver")["capabilities"].clone();
    assert_eq!(approver["humanInTheLoop"]["approvals"], true, "{approver}");
    assert_eq!(approver["humanInTheLoop"]["approveWithEdits"], true);
    let decisions = &approver["custom"]["gateway"]["decisions"];
    assert_eq!(decisions[0]["tool"], "send_email", "{decisions}");
    assert_eq!(decisions[0]["deciders"], json!([]), "the person who started the turn");

    let assistant = named("assistant")["capabilities"].clone();
    assert_eq!(assistant["identity"]["description"], "Answers with tools.");
    let items: Vec<&str> =
        assistant["tools"]["items"].as_array().expect("items").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(items, ["wire", "weather"], "{assistant}");
    assert_eq!(assistant["tools"]["clientProvided"], true);
    assert_eq!(assistant["custom"]["gateway"]["frontendTools"], json!(["show_chart"]));
    assert_eq!(assistant["custom"]["gateway"]["editableState"], json!({ "plan": { "type": "string" } }));
    let wire = &assistant["custom"]["gateway"]["decisions"];
    assert_eq!(wire.as_array().map(Vec::len), Some(1), "weather asks no one: {wire}");
    assert_eq!(
        wire[0],
        json!({ "tool": "wire", "approval": "always", "deciders": ["role:finance"], "fourEyes": true, "allowEdit": true })
    );
    assert_eq!(assistant["multiAgent"]["subagents"][0]["name"], "demo");
    assert_eq!(assistant["execution"]["maxIterations"], 5);
    assert_eq!(assistant["reasoning"]["supported"], true);
    assert_eq!(assistant["multimodal"]["input"]["image"], false, "text only by default");

    // One agent alone reads the same; an unknown one is a 404 with the error body.
    let (status, one) = get(&app, "/v1/agents/assistant?tenant=default", None).await;
    assert_eq!(status, 200);
    assert_eq!(one, named("assistant"));
    let (status, missing) = get(&app, "/v1/agents/nobody?tenant=default", None).await;
    assert_eq!((status, missing["error"]["code"].as_str()), (404, Some("not_found")), "{missing}");

    let judged: Vec<Value> =
        agents.iter().map(|a| json!({ "name": a["name"], "capabilities": a["capabilities"] })).collect();
    official_schema_accepts(&judged).await;
}

// One store: what is checked is the key's scopes; keys are stored on both stores in `auth::`.
#[tokio::test]
async fn an_agent_the_key_may_not_start_answers_like_one_that_does_not_exist() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    let (key, _) = new_key(&app, "default", &["demo"], KeyKind::Tenant).await;
    let (status, body) = get(&app, "/v1/agents?tenant=default", Some(&key)).await;
    assert_eq!(status, 200);
    let names: Vec<&str> =
        body["agents"].as_array().expect("agents").iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(names, ["demo"]);
    let (hidden, hidden_body) = get(&app, "/v1/agents/approver?tenant=default", Some(&key)).await;
    let (missing, missing_body) = get(&app, "/v1/agents/nobody?tenant=default", Some(&key)).await;
    assert_eq!((hidden, missing), (404, 404));
    assert_eq!(hidden_body["error"]["code"], "not_found");
    assert_eq!(hidden_body["error"]["code"], missing_body["error"]["code"]);
    let (status, _) = get(&app, "/v1/agents/demo?tenant=default", Some(&key)).await;
    assert_eq!(status, 200);
}
