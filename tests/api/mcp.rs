//! The `openai` agent's MCP tool servers (docs/agents.md) against a real MCP server: the
//! official Python `mcp` package's, over Streamable HTTP (tests/mcp/server.py), which records
//! every call it gets. Each scenario on SQLite and PostgreSQL.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use agui_gateway::config::TlsConfig;
use serde_json::{json, Value};

use crate::fakes::model::{assistant_toml, ScriptedModel};
use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;
use crate::tls_support::{address_of, server_config, TestCa, TlsFront};

/// The MCP server, stopped on drop (also the MCP Apps scenarios', mcp_apps.rs).
pub(crate) struct McpServer {
    child: Child,
    pub(crate) url: String,
    /// Its command-line arguments, for a restart.
    args: Vec<String>,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpServer {
    /// The server as the package makes it: both revisions, no `ttlMs` hint.
    pub(crate) fn start() -> McpServer {
        McpServer::start_with(&[])
    }

    /// The server with `args` (server.py: `--revision`, `--tools-ttl-ms`).
    fn start_with(args: &[&str]) -> McpServer {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (child, url) = McpServer::spawn(&args);
        McpServer { child, url, args }
    }

    fn spawn(args: &[String]) -> (Child, String) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
        let python = dir.join(".venv/bin/python");
        assert!(python.exists(), "create tests/mcp/.venv (scripts/test does)");
        let mut child = Command::new(python)
            .arg(dir.join("server.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP server starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("the MCP server says where it listens");
        let url = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("unexpected: {line}")).to_string();
        (child, url)
    }

    /// Stops the server and starts it again on the same port, with the same arguments: a new
    /// process that knows no session and no call of the old one.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.url.rsplit(':').next().expect("a port").to_string();
        let mut args = self.args.clone();
        args.extend(["--port".to_string(), port]);
        let (child, url) = McpServer::spawn(&args);
        assert_eq!(url, self.url, "the same address");
        self.child = child;
    }

    /// The calls the server got: `{tool, arguments, idempotencyKey}`.
    pub(crate) async fn calls(&self) -> Vec<Value> {
        let answer = crate::tls_support::get(format!("{}/calls", self.url)).await.expect("calls");
        answer.json().await.expect("JSON")
    }

    /// Every POST its MCP endpoint got: `{method, protocolVersion, sessionId, mcpMethod, mcpName}`.
    async fn requests(&self) -> Vec<Value> {
        let answer = crate::tls_support::get(format!("{}/requests", self.url)).await.expect("requests");
        let all: Vec<Value> = answer.json().await.expect("JSON");
        all.into_iter().filter(|r| r["httpMethod"] == "POST").collect()
    }

    /// Adds the tool `multiply` to the server's list.
    async fn add_tool(&self) {
        let answer = reqwest::Client::new().post(format!("{}/tools", self.url)).send().await.expect("add a tool");
        assert!(answer.status().is_success(), "{}", answer.status());
    }
}

/// How many of `requests` are of the JSON-RPC `method`.
fn count(requests: &[Value], method: &str) -> usize {
    requests.iter().filter(|r| r["method"] == method).count()
}

/// A gateway whose agent `assistant` talks to `model` and takes the tools of the MCP server at
/// `mcp_url` (server name `calc`) under `policy` (the server's other fields: by default the
/// tools `add` and `charge`).
async fn gateway(model: &ScriptedModel, mcp_url: &str, policy: &str, backend: Backend) -> (TestApp, TestDatabase) {
    gateway_with_tls(model, mcp_url, policy, backend, TlsConfig::default()).await
}

/// As [`gateway`], with `tls` as the gateway's outbound TLS settings.
async fn gateway_with_tls(
    model: &ScriptedModel,
    mcp_url: &str,
    policy: &str,
    backend: Backend,
    tls: TlsConfig,
) -> (TestApp, TestDatabase) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.tls = tls;
    let calc = format!(
        "[[mcp_servers]]\nname = \"calc\"\nurl = \"{mcp_url}/mcp\"\ntimeout_secs = 10\n{policy}\n{allow}\n",
        allow = if policy.contains("tools =") { "" } else { "tools = [\"add\", \"charge\"]" },
    );
    config.agents.push(toml::from_str(&assistant_toml(&model.url, &calc)).expect("agent config"));
    (TestApp::start_with(config).await, db)
}

fn result_of(events: &[SseEvent]) -> String {
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    result.data["content"].as_str().expect("text").to_string()
}

fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_model_is_offered_the_servers_tools_and_a_call_reaches_the_server() {
    let server = McpServer::start();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 2, "b": 3}))], "It is five.").await;
        // The secret header's value comes from the environment; the stream never shows it.
        std::env::set_var("AGUI_TEST_MCP_TOKEN", "mcp-secret-token");
        let headers =
            "secret_headers = { authorization = \"AGUI_TEST_MCP_TOKEN\" }\nheaders = { x-client = \"gateway-tests\" }";
        let (app, _db) = gateway(&model, &server.url, headers, backend).await;
        let before = server.calls().await.len();
        let input = first_run("th-mcp", "run-1", "2 + 3?");
        let events = app.run_to_end("assistant", &input).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));

        let requests = model.requests();
        let names = offered(&requests[0]);
        assert!(names.contains(&"calc__add".to_string()) && names.contains(&"calc__charge".to_string()), "{names:?}");
        assert!(!names.contains(&"calc__wipe".to_string()), "the allow-list keeps wipe out: {names:?}");
        let add = requests[0]["tools"].as_array().expect("tools").iter().find(|t| t["function"]["name"] == "calc__add");
        let add = add.expect("add offered");
        assert_eq!(add["function"]["description"], "Adds two whole numbers.");
        assert_eq!(add["function"]["parameters"]["properties"]["a"]["type"], "integer", "{add}");

        // Text and structured content: the sum reaches the log and the model.
        let result = result_of(&events);
        assert_eq!(result, "5", "the text, its structured twin not repeated");
        let to_model = requests[1]["messages"].as_array().expect("messages").last().expect("tool").clone();
        assert_eq!(to_model["role"], "tool");
        assert_eq!(to_model["content"], result.as_str());

        let calls = server.calls().await;
        let new: Vec<&Value> = calls[before..].iter().collect();
        assert_eq!(new.len(), 1, "{new:?}");
        assert_eq!(new[0]["tool"], "add");
        assert_eq!(new[0]["arguments"], json!({"a": 2, "b": 3}));
        // The idempotency key arrives in `_meta`.
        let key = new[0]["idempotencyKey"].as_str().expect("a key in _meta");
        assert!(key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(new[0]["authorization"], "Bearer mcp-secret-token");
        assert_eq!(new[0]["xClient"], "gateway-tests");
        let stream: String = events.iter().map(|e| e.data.to_string()).collect();
        assert!(!stream.contains("mcp-secret-token"), "the secret never reaches the stream");
        let (passed, report) = agui_check(&app.run_url("assistant"), &input).await;
        assert!(passed, "{report}");
    }
}

#[tokio::test]
async fn arguments_off_the_tools_schema_are_refused_before_the_server_is_called() {
    let server = McpServer::start();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(vec![("calc__add", json!({"a": "two", "b": 3}))], "I could not add.").await;
        let (app, _db) = gateway(&model, &server.url, "", backend).await;
        let events = app.run_to_end("assistant", &first_run("th-mcp-bad", "run-1", "two + 3?")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        let result = result_of(&events);
        assert!(result.starts_with("error: the arguments do not match the tool's schema"), "{result}");
        assert!(server.calls().await.is_empty(), "the server was never called");
    }
}

#[tokio::test]
async fn an_mcp_tool_under_approval_waits_and_runs_once_approved_with_the_approvers_edit() {
    let server = McpServer::start();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model =
            ScriptedModel::planned(vec![("calc__charge", json!({"amount": 42, "currency": "EUR"}))], "Charged.").await;
        let (app, _db) = gateway(&model, &server.url, "approval = \"always\"\nallow_edit = true", backend).await;
        let before = server.calls().await.len();
        let events = app.run_to_end("assistant", &first_run("th-mcp-approve", "run-1", "charge me")).await;
        let last = events.last().expect("end");
        assert_eq!(last.data["outcome"]["type"], "interrupt", "{:?}", kinds(&events));
        let interrupt = &last.data["outcome"]["interrupts"][0];
        assert_eq!(interrupt["reason"], "tool_call");
        assert_eq!(server.calls().await.len(), before, "nothing ran before the approval");
        let id = interrupt["id"].as_str().expect("id");
        let resumed = app
            .run_to_end(
                "assistant",
                &json!({"threadId": "th-mcp-approve", "runId": "run-2", "messages": [],
                        "resume": [{"interruptId": id, "status": "resolved",
                                    "payload": {"approved": true, "editedArgs": {"amount": 40, "currency": "EUR"}}}]}),
            )
            .await;
        assert_eq!(resumed.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&resumed));
        assert_eq!(result_of(&resumed), "charged 40 EUR");
        let calls = server.calls().await;
        assert_eq!(calls.len(), before + 1);
        assert_eq!(calls[before]["arguments"], json!({"amount": 40, "currency": "EUR"}), "the edited arguments ran");
    }
}

#[tokio::test]
async fn a_server_that_is_down_fails_the_call_not_the_turn() {
    // An address nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let down = format!("http://{}", listener.local_addr().expect("address"));
    drop(listener);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 1, "b": 1}))], "The tool is down.").await;
        let (app, _db) = gateway(&model, &down, "", backend).await;
        let events = app.run_to_end("assistant", &first_run("th-mcp-down", "run-1", "1 + 1?")).await;
        assert_eq!(events.last().expect("end").kind(), "RUN_FINISHED", "{:?}", kinds(&events));
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
        let result = result_of(&events);
        assert!(result.starts_with("error: the MCP server 'calc': it could not be reached: "), "{result}");
        assert!(result.contains("Connection refused"), "the cause, not the SDK's types: {result}");
        let requests = model.requests();
        assert!(offered(&requests[0]).iter().all(|n| !n.starts_with("calc__")), "a server down offers no tools");
        assert_eq!(requests.len(), 2, "the model read the error and answered");
    }
}

/// Exactly-once over MCP: the instance running the turn is killed (SIGKILL) inside a slow MCP
/// call; another instance takes the turn over (PostgreSQL) and re-issues the call with the
/// same `_meta.idempotencyKey`: the server saw one key, at most twice, and acted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_cut_by_a_crash_is_reissued_under_its_key_and_acts_once() {
    let server = McpServer::start();
    let model = ScriptedModel::planned(vec![("calc__slow_charge", json!({"amount": 7}))], "Charged.").await;
    let calc = format!("[[agents.mcp_servers]]\nname = \"calc\"\nurl = \"{}/mcp\"\ntimeout_secs = 60\n", server.url);
    let mut two = TwoInstances::start("assistant", &model.agents_table(&calc)).await;
    let input = first_run("th-mcp-once", "run-1", "charge 7");
    let joined = two
        .kill_a_once(&input, "the MCP server to receive A's call", || async { !server.calls().await.is_empty() })
        .await;
    drop(two);

    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    assert_eq!(result_of(&joined), "charged 7 EUR");
    let calls = server.calls().await;
    assert!((1..=2).contains(&calls.len()), "at most twice: {calls:?}");
    let key = calls[0]["idempotencyKey"].as_str().expect("a key in _meta");
    assert_eq!(key.len(), 64, "{key}");
    assert!(calls.iter().all(|c| c["idempotencyKey"] == key), "one key for every attempt: {calls:?}");
    assert_eq!(calls.iter().filter(|c| c["acted"] == true).count(), 1, "the server acted once: {calls:?}");
}

/// An MCP server over HTTPS (a TLS front before the real server) is reached with the gateway's
/// outbound TLS settings: with its CA trusted through `tls.extra_ca_file` the call goes
/// through; behind a certificate of a CA trusted nowhere the call fails (the model reads why)
/// and nothing reaches the server.
// One store: the MCP transport is in front of any store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_mcp_server_is_reached_over_verified_tls() {
    let server = McpServer::start();
    let ca = TestCa::new("mcp");
    let stranger = TestCa::new("stranger");
    let backend = address_of(&server.url);
    let trusted = TlsFront::start(backend, server_config(&ca.server("mcp", &["127.0.0.1"]), None)).await;
    let untrusted = TlsFront::start(backend, server_config(&stranger.server("mcp", &["127.0.0.1"]), None)).await;
    let tls = TlsConfig { extra_ca_file: ca.ca_file().display().to_string(), ..TlsConfig::default() };

    let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 20, "b": 22}))], "42.").await;
    let (app, _db) = gateway_with_tls(&model, &trusted.url(""), "", Backend::Sqlite, tls.clone()).await;
    let events = app.run_to_end("assistant", &first_run("th-mcp-tls", "run-1", "20 + 22?")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert_eq!(result_of(&events), "42");
    assert_eq!(server.calls().await.len(), 1);

    let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 1, "b": 2}))], "No.").await;
    let (refusing, _other) = gateway_with_tls(&model, &untrusted.url(""), "", Backend::Sqlite, tls).await;
    let events = refusing.run_to_end("assistant", &first_run("th-mcp-tls", "run-1", "1 + 2?")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let result = result_of(&events);
    assert!(
        result.starts_with(
            "error: the MCP server 'calc': it could not be reached: certificate not trusted (UnknownIssuer) for host 127.0.0.1"
        ),
        "{result}"
    );
    assert_eq!(server.calls().await.len(), 1, "the untrusted front passed nothing on");
}

/// A name the server does not list stands for nothing: no person is asked to approve it, and
/// the model reads that the tool is not available.
// One store: the listing comes from the MCP server, not the store.
#[tokio::test]
async fn a_tool_the_server_does_not_list_is_not_offered_nor_put_to_a_person() {
    let server = McpServer::start();
    let model = ScriptedModel::planned(vec![("calc__transfer", json!({"to": "mallory"}))], "It is not there.").await;
    let (app, _db) = gateway(&model, &server.url, "tools = []\napproval = \"always\"", Backend::Sqlite).await;
    let events = app.run_to_end("assistant", &first_run("th-mcp-none", "run-1", "transfer")).await;
    let end = events.last().expect("end");
    assert_eq!(end.data["outcome"]["type"], "success", "no interrupt: {:?}", kinds(&events));
    assert_eq!(result_of(&events), "error: the tool 'calc__transfer' is not available; nothing was run");
    let requests = model.requests();
    assert!(offered(&requests[0]).contains(&"calc__wipe".to_string()), "an empty allow-list offers every tool");
    assert!(server.calls().await.is_empty());
}

const MCP_ARG_SECRET: &str = "mcp-arg-0d15ea5e-secret";

#[tokio::test]
async fn an_mcp_tools_credential_argument_is_filled_in_only_in_the_call() {
    let server = McpServer::start();
    // Read when the configuration is loaded (the values to mask) and at the call.
    std::env::set_var("AGUI_TEST_MCP_ARG_TOKEN", MCP_ARG_SECRET);
    let placeholder = "\u{2039}secret:AGUI_TEST_MCP_ARG_TOKEN\u{203a}";
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let call = json!({ "account": "acme", "token": placeholder });
        let model = ScriptedModel::planned(vec![("calc__lookup", call)], "Looked up.").await;
        let settings = "secret_args = { token = \"AGUI_TEST_MCP_ARG_TOKEN\" }\ntools = [\"lookup\", \"add\"]";
        let (app, db) = gateway(&model, &server.url, settings, backend).await;
        let before = server.calls().await.len();
        let response = app.post_run("assistant", &first_run("th-mcp-arg", "run-1", "look acme up")).await;
        let (events, raw, _) = read_frames(response, None).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));

        // The model is told to send the placeholder, for the tool that takes the argument only.
        let requests = model.requests.lock().expect("requests").clone();
        let tools = requests[0]["tools"].as_array().expect("tools").clone();
        let lookup = tools.iter().find(|t| t["function"]["name"] == "calc__lookup").expect("lookup offered");
        assert_eq!(lookup["function"]["parameters"]["properties"]["token"]["const"], placeholder, "{lookup}");
        let add = tools.iter().find(|t| t["function"]["name"] == "calc__add").expect("add offered");
        assert!(add["function"]["parameters"]["properties"].get("token").is_none(), "{add}");

        // The server got the value; the careless answer shows the placeholder in its place.
        let calls = server.calls().await;
        assert_eq!(calls[before..].len(), 1, "{calls:?}");
        assert_eq!(calls[before]["arguments"], json!({ "account": "acme", "token": MCP_ARG_SECRET }));
        assert_eq!(result_of(&events), format!("account acme looked up with token {placeholder}"));

        let messages = app.client.get(app.url("/v1/threads/th-mcp-arg/messages")).send().await.expect("messages");
        let messages = messages.text().await.expect("body");
        let stored = every_table_as_text(&db.url).await;
        assert!(stored.contains(placeholder), "the log holds the placeholder");
        for (place, text) in [("stream", raw), ("messages", messages), ("tables", stored)]
            .into_iter()
            .chain(requests.iter().map(|r| ("model request", r.to_string())))
        {
            assert!(!text.contains(MCP_ARG_SECRET), "the credential in the {place}: {text}");
        }
    }
}

/// A server of MCP 2026-07-28 only: the gateway finds it out (`server/discover`) and then sends
/// self-contained requests (the revision's version header, `Mcp-Method` and `Mcp-Name`, no
/// session), with one client for both turns; the listing is used for the `ttlMs` the server
/// gives (a minute), so two turns list once; the call works end to end.
// One store: the MCP transport is in front of any store.
#[tokio::test]
async fn a_2026_07_28_server_is_reached_without_a_session_and_listed_once_within_its_ttl() {
    let server = McpServer::start_with(&["--revision", "2026-07-28", "--tools-ttl-ms", "60000"]);
    let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 2, "b": 3}))], "It is five.").await;
    let (app, _db) = gateway(&model, &server.url, "", Backend::Sqlite).await;
    for thread in ["th-mcp-2026-a", "th-mcp-2026-b"] {
        let events = app.run_to_end("assistant", &first_run(thread, "run-1", "2 + 3?")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        assert_eq!(result_of(&events), "5", "the server's answer reached the stream");
    }
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "two model calls a turn");
    assert!(requests.iter().all(|r| offered(r).contains(&"calc__add".to_string())), "offered at every model call");
    let to_model = requests[1]["messages"].as_array().expect("messages").last().expect("tool").clone();
    assert_eq!(to_model["content"], "5", "the model read the result");

    let seen = server.requests().await;
    for request in &seen {
        assert_eq!(request["protocolVersion"], "2026-07-28", "{request}");
        assert!(request["sessionId"].is_null(), "no session: {request}");
        assert_eq!(request["mcpMethod"], request["method"], "the Mcp-Method header: {request}");
    }
    assert_eq!(count(&seen, "initialize"), 0, "{seen:?}");
    assert_eq!(count(&seen, "server/discover"), 1, "one client for both turns: {seen:?}");
    assert_eq!(count(&seen, "tools/list"), 1, "listed once within its ttl: {seen:?}");
    assert_eq!(count(&seen, "tools/call"), 2, "{seen:?}");
    let call = seen.iter().find(|r| r["method"] == "tools/call").expect("a call");
    assert_eq!(call["mcpName"], "add", "the Mcp-Name header: {call}");
    let calls = server.calls().await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls.iter().all(|c| c["arguments"] == json!({"a": 2, "b": 3})), "{calls:?}");
}

/// A server of an earlier revision only (`initialize`, sessions): the gateway's discovery is
/// refused, it falls back to the handshake, once, and both turns' calls go in that one session.
// One store: the MCP transport is in front of any store.
#[tokio::test]
async fn an_earlier_revision_server_is_reached_through_its_handshake() {
    let server = McpServer::start_with(&["--revision", "2025-11-25"]);
    let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 20, "b": 22}))], "42.").await;
    let (app, _db) = gateway(&model, &server.url, "", Backend::Sqlite).await;
    for thread in ["th-mcp-2025-a", "th-mcp-2025-b"] {
        let events = app.run_to_end("assistant", &first_run(thread, "run-1", "20 + 22?")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        assert_eq!(result_of(&events), "42");
    }
    let seen = server.requests().await;
    assert_eq!(count(&seen, "server/discover"), 1, "the newer revision asked for first: {seen:?}");
    assert_eq!(count(&seen, "initialize"), 1, "one handshake for both turns: {seen:?}");
    let in_session: Vec<&Value> =
        seen.iter().filter(|r| matches!(r["method"].as_str(), Some("tools/list" | "tools/call"))).collect();
    assert_eq!(in_session.len(), 3, "one listing (the configured ttl), two calls: {seen:?}");
    let session = in_session[0]["sessionId"].as_str().expect("a session");
    for request in &in_session {
        assert_eq!(request["sessionId"], session, "one session: {request}");
        assert_eq!(request["protocolVersion"], "2025-11-25", "the negotiated revision: {request}");
    }
    assert_eq!(server.calls().await.len(), 2);
}

/// A listing is used until it goes stale (the server's `ttlMs`, or the configured
/// `tools_ttl_secs` for a server that gives none), then listed again: a tool the server added
/// meanwhile is offered at the next model call.
// One store: the listing is kept in memory, not in the store.
#[tokio::test]
async fn a_changed_tool_list_is_offered_once_the_listing_goes_stale() {
    for (args, settings) in [
        (vec!["--revision", "2026-07-28", "--tools-ttl-ms", "2000"], "tools = []"),
        (vec!["--revision", "2025-11-25"], "tools = []\ntools_ttl_secs = 2"),
    ] {
        let server = McpServer::start_with(&args);
        let model = ScriptedModel::planned(vec![], "Hello.").await;
        let (app, _db) = gateway(&model, &server.url, settings, Backend::Sqlite).await;
        let multiply = "calc__multiply".to_string();
        let events = app.run_to_end("assistant", &first_run("th-mcp-ttl-1", "run-1", "hi")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{args:?}: {:?}", kinds(&events));
        let first = offered(&model.requests()[0]);
        assert!(first.contains(&"calc__add".to_string()) && !first.contains(&multiply), "{args:?}: {first:?}");

        server.add_tool().await;
        app.run_to_end("assistant", &first_run("th-mcp-ttl-2", "run-1", "hi")).await;
        assert!(!offered(&model.requests()[1]).contains(&multiply), "{args:?}: the listing is still fresh");
        tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
        app.run_to_end("assistant", &first_run("th-mcp-ttl-3", "run-1", "hi")).await;
        let third = offered(&model.requests()[2]);
        assert!(third.contains(&multiply), "{args:?}: the new tool offered once the listing went stale: {third:?}");
        assert_eq!(count(&server.requests().await, "tools/list"), 2, "{args:?}");
    }
}

/// A listing that cannot be refreshed (the server went away) is kept: the model is still
/// offered the tools, and a call reads why it failed.
// One store: the listing is kept in memory, not in the store.
#[tokio::test]
async fn a_failed_refresh_keeps_the_last_listing() {
    let server = McpServer::start_with(&["--revision", "2026-07-28", "--tools-ttl-ms", "500"]);
    let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 1, "b": 2}))], "Done.").await;
    let (app, _db) = gateway(&model, &server.url, "", Backend::Sqlite).await;
    let events = app.run_to_end("assistant", &first_run("th-mcp-stale-1", "run-1", "1 + 2?")).await;
    assert_eq!(result_of(&events), "3");
    drop(server);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let events = app.run_to_end("assistant", &first_run("th-mcp-stale-2", "run-1", "1 + 2?")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    let requests = model.requests();
    assert!(offered(&requests[2]).contains(&"calc__add".to_string()), "the last listing offered");
    let result = result_of(&events);
    assert!(result.starts_with("error: the MCP server 'calc': "), "{result}");
}

/// The gateway's one client of a server outlives neither a restart of the server nor its
/// session: a server restarted between two calls (a new process, on the same address, that
/// knows no session) is reached again, whatever its revision.
// One store: the MCP transport is in front of any store.
#[tokio::test]
async fn a_server_restarted_between_calls_is_reached_again() {
    for revision in ["2026-07-28", "2025-11-25"] {
        let mut server = McpServer::start_with(&["--revision", revision]);
        let model = ScriptedModel::planned(vec![("calc__add", json!({"a": 2, "b": 2}))], "Four.").await;
        let (app, _db) = gateway(&model, &server.url, "", Backend::Sqlite).await;
        let events = app.run_to_end("assistant", &first_run("th-mcp-restart-1", "run-1", "2 + 2?")).await;
        assert_eq!(result_of(&events), "4", "{revision}");
        server.restart();
        let events = app.run_to_end("assistant", &first_run("th-mcp-restart-2", "run-1", "2 + 2?")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        assert_eq!(result_of(&events), "4", "{revision}: reached again after the restart");
        assert_eq!(server.calls().await.len(), 1, "{revision}: the new process got the second call");
        // The new process saw the handshake again (an earlier revision's session is per
        // process), or nothing but the call (a 2026-07-28 client has nothing to re-open).
        let seen = server.requests().await;
        let handshakes = if revision == "2025-11-25" { 1 } else { 0 };
        assert_eq!(count(&seen, "initialize"), handshakes, "{revision}: {seen:?}");
        let call = seen.iter().find(|r| r["method"] == "tools/call").expect("the call");
        assert_eq!(call["sessionId"].is_null(), revision == "2026-07-28", "{revision}: {call}");
    }
}

/// The tools of the MCP App scenarios: `weather` (shown in its App), `chart` (answers with a
/// picture) and `charge`.
const APP_TOOLS: &str = "tools = [\"weather\", \"chart\", \"charge\"]";

/// MCP Apps: a tool whose server names a UI (`_meta.ui.resourceUri`) is shown after its call
/// as an `mcp-apps` activity, in the content `@ag-ui/mcp-apps-middleware` gives it, and the
/// thread keeps it (a reload finds it at its place).
#[tokio::test]
async fn a_tool_with_a_ui_is_shown_in_its_app_and_the_thread_keeps_it() {
    let server = McpServer::start();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(vec![("calc__weather", json!({"city": "Oslo"}))], "Sunny.").await;
        let (app, _db) = gateway(&model, &server.url, APP_TOOLS, backend).await;
        let input = first_run("th-mcp-app", "run-1", "weather in Oslo?");
        let events = app.run_to_end("assistant", &input).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        let at = |kind: &str| events.iter().position(|e| e.kind() == kind).unwrap_or_else(|| panic!("{kind}"));
        assert!(at("TOOL_CALL_RESULT") < at("ACTIVITY_SNAPSHOT"), "shown after its call: {:?}", kinds(&events));
        let shown = &events[at("ACTIVITY_SNAPSHOT")].data;
        assert_eq!(shown["activityType"], "mcp-apps");
        let content = &shown["content"];
        assert_eq!(content["resourceUri"], "ui://weather/view.html");
        assert_eq!(content["serverId"], "calc");
        assert_eq!(content["serverHash"], "calc");
        assert_eq!(content["toolInput"], json!({"city": "Oslo"}));
        assert_eq!(content["result"]["content"][0], json!({"type": "text", "text": "sunny in Oslo"}), "{content}");
        assert_eq!(result_of(&events), "sunny in Oslo");

        // A tool without a UI shows none.
        let plain =
            ScriptedModel::planned(vec![("calc__charge", json!({"amount": 1, "currency": "EUR"}))], "Ok.").await;
        let (plain_app, _plain_db) = gateway(&plain, &server.url, APP_TOOLS, backend).await;
        let charged = plain_app.run_to_end("assistant", &first_run("th-mcp-plain", "run-1", "charge")).await;
        assert!(charged.iter().all(|e| e.kind() != "ACTIVITY_SNAPSHOT"), "{:?}", kinds(&charged));

        // Kept in the thread, at its place after the call's result.
        let body: Value = app.get_json("/v1/threads/th-mcp-app/messages").await;
        let messages = body["messages"].as_array().expect("messages");
        let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "activity", "assistant"], "{messages:?}");
        assert_eq!(messages[3]["activityType"], "mcp-apps");
        assert_eq!(&messages[3]["content"], content);
        let (passed, report) =
            agui_check(&app.run_url("assistant"), &first_run("th-mcp-app-check", "run-1", "Oslo?")).await;
        assert!(passed, "{report}");
    }
}

/// An MCP tool's image stays an image: the tool message the client sees (live and restored)
/// carries it as an AG-UI image part beside the text; the model, whose tool messages take
/// text only, reads the text and a note in the image's place.
#[tokio::test]
async fn an_mcp_tools_image_stays_an_image_part() {
    let server = McpServer::start();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(vec![("calc__chart", json!({"title": "sales"}))], "Here it is.").await;
        let (app, _db) = gateway(&model, &server.url, APP_TOOLS, backend).await;
        let input = first_run("th-mcp-image", "run-1", "chart the sales");
        let events = app.run_to_end("assistant", &input).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("a result");
        let parts =
            result.data["content"].as_array().unwrap_or_else(|| panic!("parts, not text: {}", result.data)).clone();
        assert_eq!(parts[0], json!({"type": "text", "text": "chart: sales\n[image/png image]"}));
        assert_eq!(parts[1]["type"], "image");
        assert_eq!(parts[1]["source"]["type"], "data");
        assert_eq!(parts[1]["source"]["mimeType"], "image/png");
        assert!(parts[1]["source"]["value"].as_str().expect("base64").starts_with("iVBORw0KGgo"), "{}", parts[1]);

        let to_model = model.requests()[1]["messages"].as_array().expect("messages").last().expect("tool").clone();
        assert_eq!(to_model["content"], "chart: sales\n[image/png image]");

        let body: Value = app.get_json("/v1/threads/th-mcp-image/messages").await;
        let tool = body["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "tool").cloned();
        assert_eq!(tool.expect("the tool message")["content"], Value::Array(parts));

        // The next turn's model call reads the recorded result as text too: no picture data.
        let history = body["messages"].as_array().expect("messages").clone();
        let next = json!({"threadId": "th-mcp-image", "runId": "run-2", "messages":
            history.into_iter().chain([json!({"id": "u2", "role": "user", "content": "thanks"})]).collect::<Vec<_>>()});
        let again = app.run_to_end("assistant", &next).await;
        assert_eq!(again.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&again));
        let requests = model.requests();
        let replayed = requests.last().expect("a model call")["messages"].as_array().expect("messages").clone();
        let tool = replayed.iter().find(|m| m["role"] == "tool").expect("the earlier result");
        assert_eq!(tool["content"], "chart: sales\n[image/png image]");
        let (passed, report) =
            agui_check(&app.run_url("assistant"), &first_run("th-mcp-image-check", "run-1", "chart")).await;
        assert!(passed, "{report}");
    }
}
