//! Outbound TLS (docs/tls.md): a scripted model, an HTTP tool and an identity provider's JWKS
//! served over HTTPS with certificates from a private CA made in the test. Trusted through
//! `SSL_CERT_FILE` (on the gateway process) or `tls.extra_ca_file`, they work; untrusted, on
//! the wrong host name, or without the client certificate a server requires, the run's error
//! (or the tool's) names the certificate problem. Upstream AG-UI servers over HTTPS are in
//! `upstream.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agui_gateway::config::{AgentKindConfig, Config};
use serde_json::{json, Value};

use crate::fakes::model::{assistant_toml, ScriptedModel};
use crate::fakes::tools::start_tool;
use crate::gateway_process;
use crate::helpers::*;
use crate::on_both_stores;
use crate::openai::openai_agent;
use crate::tls_support::{address_of, server_config, TestCa, TlsFront};

/// A scripted model behind a TLS front serving `served`.
async fn model_over_https(served: &crate::tls_support::Issued, final_text: &'static str) -> (TlsFront, String) {
    let model = ScriptedModel::planned(vec![], final_text).await;
    let front = TlsFront::start(address_of(&model.url), server_config(served, None)).await;
    let url = front.url("/v1");
    (front, url)
}

/// A gateway process, with `SSL_CERT_FILE` when given. Started off the test's runtime: the
/// gateway may call the test's TLS servers (a JWKS) before it says it listens, and they run
/// on that runtime.
async fn spawn_gateway(
    config: std::path::PathBuf,
    database: String,
    logs: Arc<Mutex<Vec<String>>>,
    ssl_cert_file: Option<String>,
) -> gateway_process::Instance {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = ssl_cert_file.iter().map(|file| ("SSL_CERT_FILE", file.as_str())).collect();
        gateway_process::Spawn::new(&config, &database).env(&env).start(logs)
    })
    .await
    .expect("the gateway starts")
}

fn with_no_retries(mut agent: agui_gateway::config::AgentConfig) -> agui_gateway::config::AgentConfig {
    if let AgentKindConfig::Openai(openai) = &mut agent.kind {
        openai.retries = 0;
    }
    agent
}

/// The done-when case of issue 16: the model's certificate comes from a test CA that only
/// `SSL_CERT_FILE` (set on the gateway process) names. The run succeeds and the official
/// client accepts it; a second gateway without the variable ends its run with a `RUN_ERROR`
/// naming the certificate problem.
async fn a_model_over_https_is_trusted_through_ssl_cert_file(backend: Backend) {
    let ca = TestCa::new("model");
    let served = ca.server("model", &["127.0.0.1", "localhost"]);
    let (tool_url, _) = start_tool("unused").await;
    let (_front, model_url) = model_over_https(&served, "Hello over TLS.").await;
    let db = TestDatabase::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[agents]]\n{}",
            assistant_toml(
                &model_url,
                &format!("retries = 0\n[[agents.tools]]\nname = \"get_weather\"\nurl = \"{tool_url}\"\n")
            )
        ),
    )
    .expect("config");
    gateway_process::migrate(&db.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let ca_file = ca.ca_file().display().to_string();
    let gateway = spawn_gateway(config.clone(), db.url.clone(), logs.clone(), Some(ca_file)).await;
    let client = crate::tls_support::http_client().build().expect("client");
    let run_url = format!("http://{}/v1/agui/agents/assistant", gateway.address);
    let post = |input: &Value| {
        client
            .post(&run_url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(input.to_string())
            .send()
    };
    let events = read_events(post(&first_run("th-tls", "run-1", "hi")).await.expect("run"), None).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", events.last());
    assert_eq!(text_of(&events), "Hello over TLS.");
    let (passed, report) = agui_check(&run_url, &first_run("th-tls-check", "run-1", "check")).await;
    assert!(passed, "{report}");
    drop(gateway);

    // The same configuration without the variable: the CA is trusted nowhere.
    let other = TestDatabase::new(backend).await;
    gateway_process::migrate(&other.url);
    let untrusting = spawn_gateway(config.clone(), other.url.clone(), logs.clone(), None).await;
    let run_url = format!("http://{}/v1/agui/agents/assistant", untrusting.address);
    let answer = client
        .post(&run_url)
        .header("content-type", "application/json")
        .body(first_run("th-tls", "run-1", "hi").to_string())
        .send()
        .await
        .expect("run");
    let events = read_events(answer, None).await;
    let last = events.last().expect("end");
    assert_eq!(last.kind(), "RUN_ERROR", "{last:?}");
    let message = last.data["message"].as_str().unwrap_or_default();
    assert!(
        message
            .starts_with("the model could not be reached: certificate not trusted (UnknownIssuer) for host 127.0.0.1"),
        "{message}"
    );
}

on_both_stores!(a_model_over_https_is_trusted_through_ssl_cert_file);

/// `tls.extra_ca_file` trusts a private CA by configuration; a certificate for another host
/// name from that CA is still refused, and says so.
// One store: outbound TLS is in front of any store.
#[tokio::test]
async fn extra_ca_file_trusts_a_private_ca_and_the_host_name_is_still_checked() {
    let ca = TestCa::new("private");
    let right = ca.server("right", &["127.0.0.1"]);
    let wrong = ca.server("wrong", &["other.test"]);
    let (tool_url, _) = start_tool("unused").await;
    let (_right_front, right_url) = model_over_https(&right, "Trusted by config.").await;
    let (_wrong_front, wrong_url) = model_over_https(&wrong, "never read").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.tls.extra_ca_file = ca.ca_file().display().to_string();
    config.agents.push(with_no_retries(openai_agent(&right_url, &tool_url, "never")));
    let mut misnamed = with_no_retries(openai_agent(&wrong_url, &tool_url, "never"));
    misnamed.name = "misnamed".into();
    config.agents.push(misnamed);
    let app = TestApp::start_with(config).await;

    let events = app.run_to_end("assistant", &first_run("th-ca", "run-1", "hi")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", events.last());
    assert_eq!(text_of(&events), "Trusted by config.");

    let events = app.run_to_end("misnamed", &first_run("th-name", "run-1", "hi")).await;
    let last = events.last().expect("end");
    assert_eq!(last.kind(), "RUN_ERROR");
    let message = last.data["message"].as_str().unwrap_or_default();
    assert!(message.contains("certificate not valid for host 127.0.0.1 (NotValidForName"), "{message}");
    assert!(message.contains("other.test"), "the names the certificate holds are told: {message}");
}

/// An HTTPS tool: trusted, its answer is the tool result; from an untrusted CA, the result the
/// model reads (and the client sees) names the certificate problem.
async fn an_https_tool_is_called_over_verified_tls(backend: Backend) {
    let trusted = TestCa::new("tools");
    let stranger = TestCa::new("stranger");
    let (plain_tool, calls) = start_tool("sunny, 21 C").await;
    let good =
        TlsFront::start(address_of(&plain_tool), server_config(&trusted.server("tool", &["127.0.0.1"]), None)).await;
    let bad =
        TlsFront::start(address_of(&plain_tool), server_config(&stranger.server("tool", &["127.0.0.1"]), None)).await;
    for (front, expected) in [(&good, Ok("sunny, 21 C")), (&bad, Err("certificate not trusted (UnknownIssuer)"))] {
        let model = ScriptedModel::planned(vec![("get_weather", json!({"city": "Paris"}))], "Done.").await;
        let db = TestDatabase::new(backend).await;
        let mut config = test_config(&db.url);
        config.tls.extra_ca_file = trusted.ca_file().display().to_string();
        config.agents.push(openai_agent(&model.url, &front.url("/tool"), "never"));
        let app = TestApp::start_with(config).await;
        let events = app.run_to_end("assistant", &first_run("th-tool", "run-1", "weather?")).await;
        let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("a tool result");
        let content = result.data["content"].as_str().unwrap_or_default();
        match expected {
            Ok(answer) => assert_eq!(content, answer),
            Err(problem) => assert!(
                content.starts_with(&format!("error: the tool could not be reached: {problem} for host 127.0.0.1")),
                "{content}"
            ),
        }
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
    }
    assert_eq!(calls.lock().expect("calls").len(), 1, "only the trusted tool was reached");
    assert_eq!(bad.failed_handshakes.lock().expect("failures").len(), 1, "the untrusted one got a handshake only");
}

on_both_stores!(an_https_tool_is_called_over_verified_tls);

/// Mutual TLS: a tool that requires a client certificate from its own CA answers the gateway
/// configured with `tls.client_cert_file`/`client_key_file`, and refuses one without.
// One store: outbound TLS is in front of any store.
#[tokio::test]
async fn a_tool_that_requires_a_client_certificate_gets_the_configured_one() {
    let servers = TestCa::new("servers");
    let clients = TestCa::new("clients");
    let identity = clients.client("gateway", "agui-gateway");
    let (plain_tool, calls) = start_tool("authenticated answer").await;
    let front = TlsFront::start(
        address_of(&plain_tool),
        server_config(&servers.server("tool", &["127.0.0.1"]), Some(&clients)),
    )
    .await;
    for with_identity in [true, false] {
        let model = ScriptedModel::planned(vec![("get_weather", json!({"city": "Oslo"}))], "Done.").await;
        let db = TestDatabase::new(Backend::Sqlite).await;
        let mut config = test_config(&db.url);
        config.tls.extra_ca_file = servers.ca_file().display().to_string();
        if with_identity {
            config.tls.client_cert_file = identity.cert_file.display().to_string();
            config.tls.client_key_file = identity.key_file.display().to_string();
        }
        config.agents.push(openai_agent(&model.url, &front.url("/tool"), "never"));
        let app = TestApp::start_with(config).await;
        let events = app.run_to_end("assistant", &first_run("th-mtls", "run-1", "weather?")).await;
        let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("a tool result");
        let content = result.data["content"].as_str().unwrap_or_default();
        if with_identity {
            assert_eq!(content, "authenticated answer");
        } else {
            assert!(content.starts_with("error: the tool could not be reached:"), "{content}");
            assert!(content.contains("refused by the server (CertificateRequired)"), "{content}");
            assert!(content.contains("tls.client_cert_file"), "the way out is named: {content}");
        }
    }
    assert_eq!(calls.lock().expect("calls").len(), 1, "only the call with the certificate reached the tool");
}

/// Bad TLS files stop the start with an error naming the setting, on `serve` and
/// `check-config` alike, never a panic.
#[test]
fn bad_tls_files_are_a_start_up_error_naming_the_setting() {
    let ca = TestCa::new("files");
    let identity = ca.client("gateway", "agui-gateway");
    let other = ca.client("other", "someone-else");
    let dir = tempfile::tempdir().expect("dir");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "this is not PEM\n").expect("write");
    let path = |p: &std::path::Path| p.display().to_string();
    let cases = [
        (format!("extra_ca_file = \"{}\"", path(&dir.path().join("missing.pem"))), "tls.extra_ca_file: cannot read"),
        (format!("extra_ca_file = \"{}\"", path(&not_pem)), "tls.extra_ca_file: '"),
        (
            format!("client_cert_file = \"{}\"\nclient_key_file = \"{}\"", path(&identity.cert_file), path(&not_pem)),
            "tls.client_key_file: '",
        ),
        (
            format!(
                "client_cert_file = \"{}\"\nclient_key_file = \"{}\"",
                path(&identity.cert_file),
                path(&other.key_file)
            ),
            "tls.client_key_file does not match tls.client_cert_file",
        ),
        (format!("client_cert_file = \"{}\"", path(&identity.cert_file)), "set both or neither"),
    ];
    for (tls, expected) in cases {
        let config = dir.path().join("gateway.toml");
        std::fs::write(&config, format!("[tls]\n{tls}\n")).expect("config");
        let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
        for command in ["check-config", "serve"] {
            let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"));
            run.arg(command).arg("--config").arg(&config).args(["--database", &database]);
            if command == "serve" {
                run.args(["--listen", "127.0.0.1:0"]);
            }
            let output = run.output().expect("runs");
            let printed =
                format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            assert!(!output.status.success(), "{command} refused {tls}: {printed}");
            assert!(printed.contains(expected), "{command} with {tls}: expected '{expected}' in {printed}");
            assert!(!printed.contains("panicked"), "{printed}");
        }
    }
}

/// An identity provider's JWKS over HTTPS: trusted, its keys verify tokens; untrusted, the
/// fetch fails with the certificate problem in the log and its tokens get 401.
async fn a_jwks_over_https_is_verified(backend: Backend) {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
    let jwk = json!({ "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": "k1",
                      "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()) });
    let document = json!({ "keys": [jwk] }).to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let plain = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let app = axum::Router::new().route("/jwks.json", axum::routing::get(move || async move { document }));
        let _ = axum::serve(listener, app).await;
    });
    let idp = TestCa::new("idp");
    let front = TlsFront::start(plain, server_config(&idp.server("idp", &["127.0.0.1"]), None)).await;
    let provider = format!(
        "[[auth.identity_providers]]\nname = \"corp\"\nissuer = \"{}\"\naudience = [\"agui-gateway\"]\n\
         jwks_url = \"{}\"\nalgorithms = [\"EdDSA\"]\nrefresh_secs = 1\ntenants = [\"acme\"]\n",
        crate::auth::IDP_ISSUER,
        front.url("/jwks.json")
    );
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let token = jsonwebtoken::encode(
        &header,
        &crate::auth::idp_claims("acme", "dana"),
        &EncodingKey::from_ed_der(pkcs8.as_ref()),
    )
    .expect("sign");

    let db = TestDatabase::new(backend).await;
    let mut config: Config = crate::auth::auth_config(&db.url, &provider);
    config.tls.extra_ca_file = idp.ca_file().display().to_string();
    let app = TestApp::start_with(config).await;
    let status = |app: &TestApp| {
        let request =
            app.client.get(app.url("/v1/agents?tenant=acme")).header("authorization", format!("Bearer {token}")).send();
        async move { request.await.expect("sent").status().as_u16() }
    };
    assert_eq!(status(&app).await, 200, "the token verifies with the key fetched over TLS");
    app.shut_down().await;

    // A gateway that does not trust the provider's CA: the fetch fails, the token is refused,
    // and the log says why.
    let dir = tempfile::tempdir().expect("dir");
    let config_file = dir.path().join("gateway.toml");
    std::fs::write(&config_file, format!("[[tenants]]\nname = \"acme\"\n\n{provider}")).expect("config");
    let other = TestDatabase::new(backend).await;
    gateway_process::migrate(&other.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let gateway = spawn_gateway(config_file.clone(), other.url.clone(), logs.clone(), None).await;
    let answer = crate::tls_support::http_client()
        .build()
        .expect("client")
        .get(format!("http://{}/v1/agents?tenant=acme", gateway.address))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .expect("sent");
    assert_eq!(answer.status(), 401);
    // Said at start and again at each refresh (every second here).
    let problem = "fetching the JWKS: certificate not trusted (UnknownIssuer) for host 127.0.0.1";
    wait_until(Duration::from_secs(10), "the log to name the certificate problem", || {
        let logged = logs.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|line| line.contains(problem));
        async move { logged }
    })
    .await;
    drop(gateway);
}

on_both_stores!(a_jwks_over_https_is_verified);

/// A plain-HTTP JWKS URL is a configuration error unless the provider accepts the risk; the
/// same on `check-config` and `serve`.
#[test]
fn a_plain_http_jwks_url_needs_allow_insecure_http() {
    let dir = tempfile::tempdir().expect("dir");
    let database = format!("sqlite://{}", dir.path().join("gateway.db").display());
    let provider = "[[auth.identity_providers]]\nname = \"corp\"\nissuer = \"https://idp.test/\"\n\
                    audience = [\"agui-gateway\"]\njwks_url = \"http://127.0.0.1:9/jwks.json\"\n";
    let run = |text: &str, command: &str| {
        let config = dir.path().join("gateway.toml");
        std::fs::write(&config, text).expect("config");
        let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"));
        run.arg(command).arg("--config").arg(&config).args(["--database", &database]);
        if command == "serve" {
            run.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child =
            run.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("runs");
        // A `serve` that starts would run for ever: it is given a moment, then ended.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let output = child.wait_with_output().expect("output");
                let printed =
                    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
                return (status.success(), printed);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return (true, "still running".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for command in ["check-config", "serve"] {
        let (passed, printed) = run(provider, command);
        assert!(!passed, "{command} refused a plain-http JWKS URL: {printed}");
        assert!(
            printed.contains("identity provider 'corp': jwks_url must be an https:// URL")
                && printed.contains("allow_insecure_http"),
            "{command}: {printed}"
        );
    }
    let (passed, printed) = run(&format!("{provider}allow_insecure_http = true\n"), "check-config");
    assert!(passed && printed.contains("config ok"), "{printed}");
}
