//! Operating the gateway (§10): the OpenAPI document against the routes that answer, request
//! ids, JSON logs with the request id on every line of a run, and the `healthcheck` command.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::gateway_process;
use crate::helpers::*;

/// Every route the gateway serves, as (method, path template). The OpenAPI document must list
/// exactly these, and each must answer at its path.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/agui/agents/{agent}"),
    ("post", "/v1/agui/agents/{agent}/connect"),
    ("get", "/v1/agents"),
    ("get", "/v1/agents/{agent}"),
    ("get", "/v1/threads"),
    ("get", "/v1/threads/{thread}"),
    ("delete", "/v1/threads/{thread}"),
    ("get", "/v1/threads/{thread}/messages"),
    ("get", "/v1/threads/{thread}/turns"),
    ("post", "/v1/threads/{thread}/cancel"),
    ("post", "/v1/interrupts/{id}/decision"),
    ("get", "/v1/interrupts"),
    ("get", "/v1/threads/{thread}/audit"),
    ("post", "/v1/auth/token"),
    ("get", "/livez"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/v1/copilotkit/{tenant}/info"),
    ("post", "/v1/copilotkit/{tenant}"),
    ("post", "/v1/copilotkit/{tenant}/agent/{agent}/run"),
    ("post", "/v1/copilotkit/{tenant}/agent/{agent}/connect"),
    ("post", "/v1/copilotkit/{tenant}/agent/{agent}/stop/{thread}"),
    ("get", "/v1/copilotkit/{tenant}/threads"),
    ("get", "/v1/copilotkit/{tenant}/threads/{thread}"),
    ("patch", "/v1/copilotkit/{tenant}/threads/{thread}"),
    ("delete", "/v1/copilotkit/{tenant}/threads/{thread}"),
    ("post", "/v1/copilotkit/{tenant}/threads/{thread}/archive"),
    ("get", "/v1/copilotkit/{tenant}/threads/{thread}/messages"),
    ("post", "/v1/copilotkit/{tenant}/threads/subscribe"),
    ("get", "/v1/copilotkit/{tenant}/threads/realtime/websocket"),
];

// One store: the routes are the server's.
#[tokio::test]
async fn the_openapi_document_lists_exactly_the_routes_that_answer() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let client = crate::tls_support::http_client().build().expect("client");
    let response = client.get(app.url("/openapi.json")).send().await.expect("openapi");
    assert_eq!(response.status(), 200);
    let document: Value = response.json().await.expect("JSON");
    assert!(document["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", document["openapi"]);

    let mut documented = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            documented.insert((method.clone(), path.clone()));
            // Every operation says what its errors look like.
            let responses = operation["responses"].as_object().expect("responses");
            for (status, answer) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    let schema = &answer["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/ErrorBody", "{method} {path} {status}");
                }
            }
        }
    }
    let expected: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, expected, "the document and the route table differ");

    // The run route documents its SSE answer and its body.
    let run = &document["paths"]["/v1/agui/agents/{agent}"]["post"];
    assert!(run["responses"]["200"]["content"]["text/event-stream"].is_object(), "{run}");
    assert!(run["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        .as_str()
        .is_some_and(|r| r.ends_with("/RunAgentInput")));

    // Each documented route answers at its path: neither the unknown-route 404 nor a 405.
    for (method, path) in ROUTES {
        let concrete = path
            .replace("{agent}", "demo")
            .replace("{thread}", "th-openapi")
            .replace("{id}", "int_x")
            .replace("{tenant}", "default");
        let request = match *method {
            "get" => client.get(app.url(&concrete)),
            "delete" => client.delete(app.url(&concrete)),
            "patch" => client.patch(app.url(&concrete)).header("content-type", "application/json").body("{}"),
            _ => client.post(app.url(&concrete)).header("content-type", "application/json").body("{}"),
        };
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        assert_ne!(status, 405, "{method} {path}: {body}");
        assert!(!body.contains("no route"), "{method} {path} is not served: {body}");
    }
    let unknown = client.get(app.url("/v1/nowhere")).send().await.expect("request");
    assert_eq!(unknown.status(), 404);
    app.shut_down().await;
}

// One store: the request id is the transport's.
#[tokio::test]
async fn a_request_id_is_kept_from_the_caller_or_made_and_echoed() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let client = crate::tls_support::http_client().build().expect("client");
    let given = client.get(app.url("/livez")).header("x-request-id", "req-from-proxy-42").send().await.expect("livez");
    assert_eq!(given.headers()["x-request-id"], "req-from-proxy-42");
    let made = client.get(app.url("/livez")).send().await.expect("livez");
    let id = made.headers()["x-request-id"].to_str().expect("ascii").to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "a generated id is a UUID: {id}");
    // Errors carry it too, and a run's stream response does.
    let missing = client.get(app.url("/v1/nowhere")).header("x-request-id", "r-404").send().await.expect("404");
    assert_eq!(missing.headers()["x-request-id"], "r-404");
    let run = app.post_run_with("demo", &first_run("th-rid", "run-1", "hi"), &[("x-request-id", "r-run")]).await;
    assert_eq!(run.headers()["x-request-id"], "r-run");
    read_events(run, None).await;
    app.shut_down().await;
}

/// `serve --log-format json`: every line is one JSON object, and every line logged while a run
/// is served (the request's lines and its turn's) carries the request's id.
// One store: the log lines are the process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_of_a_run_is_json_with_the_request_id() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, TEST_CONFIG).expect("config");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut gateway = gateway_process::Spawn::new(&config, &db.url).args(&["--log-format", "json"]).start(logs.clone());
    let client = crate::tls_support::http_client().build().expect("client");
    let url = format!("http://{}/v1/agui/agents/approver", gateway.address);
    let post = |body: Value, request_id: &'static str| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("x-request-id", request_id)
            .body(body.to_string())
            .send()
    };
    // A run that stops at an approval, then the resume that finishes it.
    let first =
        read_events(post(first_run("th-logs", "run-1", "mail it"), "req-first").await.expect("run"), None).await;
    let interrupt = first.last().expect("end").data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string();
    let resume = json!({
        "threadId": "th-logs", "runId": "run-2", "messages": [],
        "resume": [{ "interruptId": interrupt, "status": "resolved", "payload": { "approved": true } }],
    });
    let second = read_events(post(resume, "req-resume").await.expect("resume"), None).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success");
    // Stop it as on SIGTERM: by its `stopped` line it has logged everything the run made.
    let terminated = std::process::Command::new("kill").arg("-TERM").arg(gateway.child.id().to_string()).status();
    assert!(terminated.is_ok_and(|s| s.success()), "SIGTERM sent");
    let _ = gateway.child.wait();
    wait_until(PATIENCE, "the gateway's `stopped` line", || {
        let stopped = logs.lock().expect("logs").iter().any(|l| l.contains("\"stopped\""));
        async move { stopped }
    })
    .await;

    let lines = logs.lock().expect("logs").clone();
    let parsed: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let request_id = |line: &Value| -> Option<String> {
        line["spans"].as_array()?.iter().find_map(|span| span["request_id"].as_str().map(str::to_string))
    };
    // The lines after start-up (which ends with the `listening` line) and before the shutdown
    // (its drain first) are the run's.
    let listening = parsed.iter().position(|l| l["fields"]["message"] == "agui-gateway listening").expect("listening");
    let shutting_down = parsed
        .iter()
        .position(|l| l["fields"]["message"].as_str().is_some_and(|m| m.starts_with("draining")))
        .expect("draining");
    let run_lines: Vec<&Value> = parsed[listening + 1..shutting_down].iter().collect();
    assert!(run_lines.len() >= 4, "the run logged too little to judge: {lines:?}");
    for line in &run_lines {
        let id = request_id(line).unwrap_or_else(|| panic!("a run's line without a request id: {line}"));
        assert!(id == "req-first" || id == "req-resume", "{line}");
    }
    // The turn's own lines (under its span) carry the id of the request that started or resumed it.
    assert!(
        run_lines.iter().any(|l| l["spans"].as_array().is_some_and(|s| s.iter().any(|s| s["name"] == "turn"))),
        "no line from inside a turn: {lines:?}"
    );
    // No message text reaches the logs at info level (§8).
    assert!(!lines.iter().any(|l| l.contains("mail it")), "message text was logged");
}

// One store: the health check reads no store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_healthcheck_command_follows_readyz() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let healthy = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["healthcheck", &app.url("/readyz")])
        .output()
        .expect("healthcheck runs");
    assert!(healthy.status.success(), "{}", String::from_utf8_lossy(&healthy.stderr));
    let wrong = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["healthcheck", &app.url("/v1/nowhere")])
        .output()
        .expect("healthcheck runs");
    assert!(!wrong.status.success(), "a 404 is not healthy");
    app.shut_down().await;
    let gone = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["healthcheck", "--timeout-secs", "1", &app_url_after_stop()])
        .output()
        .expect("healthcheck runs");
    assert!(!gone.status.success(), "nothing listening is not healthy");
}

/// A loopback port nothing listens on.
fn app_url_after_stop() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{address}/readyz")
}

/// §10: every setting also from the environment — a gateway given an empty file serves the
/// agents and tenants its environment declares (lists written as JSON and as TOML), with an
/// entry changed by its index, and a list that does not read is refused at start, naming it.
// One store: the configuration is read before any store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_and_tenants_come_from_the_environment_alone() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, "").expect("config");
    let agents = r#"[{name = "envbot", kind = "script", title = "From the environment", steps = [{say = "set by a variable"}]}]"#;
    let tenants = r#"[{"name": "default"}, {"name": "acme", "cors_origins": ["https://app.acme.example"]}]"#;
    let env = [
        ("AGUI_GATEWAY_AGENTS", agents),
        ("AGUI_GATEWAY_TENANTS", tenants),
        ("AGUI_GATEWAY_AGENTS_0_CHUNK_DELAY_MS", "0"),
    ];
    let logs = Arc::new(Mutex::new(Vec::new()));
    let gateway = gateway_process::Spawn::new(&config, &db.url).env(&env).start(logs);
    let client = crate::tls_support::http_client().build().expect("client");
    let base = format!("http://{}", gateway.address);

    let listed: Value =
        client.get(format!("{base}/v1/agents")).send().await.expect("agents").json().await.expect("json");
    let names: Vec<&str> =
        listed["agents"].as_array().expect("agents").iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(names, ["envbot"], "the environment's agents replace the built-in ones: {listed}");

    let response = client
        .post(format!("{base}/v1/agui/agents/envbot?tenant=acme"))
        .header("content-type", "application/json")
        .body(first_run("th-env", "run-1", "hello").to_string())
        .send()
        .await
        .expect("run");
    assert_eq!(response.status(), 200);
    assert_eq!(text_of(&read_events(response, None).await), "set by a variable");

    let preflight = |origin: &'static str| {
        client
            .request(reqwest::Method::OPTIONS, format!("{base}/v1/agui/agents/envbot?tenant=acme"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
    };
    let allowed = preflight("https://app.acme.example").await.expect("preflight");
    assert_eq!(allowed.headers()["access-control-allow-origin"], "https://app.acme.example");
    let refused = preflight("https://other.example").await.expect("preflight");
    assert!(refused.headers().get("access-control-allow-origin").is_none());

    // A list that does not read as one stops the start, naming the variable.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["check-config", "--config"])
        .arg(&config)
        .env("AGUI_GATEWAY_TENANTS", "acme")
        .output()
        .expect("check-config runs");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("AGUI_GATEWAY_TENANTS") && said.contains("not a list"), "{said}");
}
