//! Serving HTTPS (`tls.cert_file` / `tls.key_file`) and HTTP/2: runs over TLS with ALPN `h2`
//! and `http/1.1`, plain-text HTTP/2 by prior knowledge, SSE behaving the same on both
//! protocols (reconnects, keepalives, a client leaving, the stream limit, shutdown), the
//! certificate replaced while streams are open, and bad certificate files.
//!
//! Certificates come from a private CA made in each test ([`TestCa`]); clients trust only it.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Version;
use serde_json::{json, Value};

use crate::gateway_process::{self, Spawn};
use crate::helpers::*;
use crate::on_both_stores;
use crate::test_ca::{ServerCert, TestCa};

/// A gateway serving HTTPS with a certificate for `localhost` and `127.0.0.1` (serial 1), the
/// CA's file beside it in `dir`.
struct HttpsApp {
    app: TestApp,
    ca: TestCa,
    dir: tempfile::TempDir,
    first: ServerCert,
}

impl HttpsApp {
    fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }
}

async fn https_app(db: &TestDatabase, configure: impl FnOnce(&mut agui_gateway::config::Config)) -> HttpsApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    ca.write(dir.path());
    let first = ca.issue(&["localhost", "127.0.0.1"], 1);
    let (cert, key) = first.write(dir.path());
    let mut config = test_config(&db.url);
    config.tls.cert_file = cert.display().to_string();
    config.tls.key_file = key.display().to_string();
    configure(&mut config);
    let mut app = TestApp::start_with(config).await;
    assert_eq!(app.scheme, "https");
    app.client = client_trusting(&ca, Protocol::Negotiated);
    HttpsApp { app, ca, dir, first }
}

#[derive(Clone, Copy)]
enum Protocol {
    /// ALPN offers `h2` and `http/1.1`; the server picks.
    Negotiated,
    /// ALPN offers `http/1.1` only.
    Http1,
}

/// A client trusting only `ca` (no platform roots), reporting the peer's certificate.
fn client_trusting(ca: &TestCa, protocol: Protocol) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).expect("CA certificate");
    let builder = crate::tls_support::http_client().tls_certs_only([root]).tls_info(true);
    match protocol {
        Protocol::Negotiated => builder,
        Protocol::Http1 => builder.http1_only(),
    }
    .build()
    .expect("client")
}

/// The leaf certificate a new connection is served.
async fn served_certificate(app: &HttpsApp) -> Vec<u8> {
    let response = client_trusting(&app.ca, Protocol::Negotiated)
        .get(app.app.url("/livez"))
        .send()
        .await
        .expect("a new handshake succeeds");
    assert_eq!(response.status(), 200);
    let info = response.extensions().get::<reqwest::tls::TlsInfo>().expect("TLS info");
    info.peer_certificate().expect("a peer certificate").to_vec()
}

fn assert_no_connection_headers(response: &reqwest::Response) {
    // HTTP/2 forbids connection-specific headers (RFC 9113 §8.2.2); the SSE response sets none.
    for name in ["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"] {
        assert!(response.headers().get(name).is_none(), "{name} on an HTTP/2 response: {:?}", response.headers());
    }
}

async fn a_run_streams_whole_over_https_on_http2_and_http1(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |_| {}).await;
    let app = &https.app;

    let response = app.post_run("demo", &first_run("th-h2", "run-1", "over h2")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), Version::HTTP_2, "ALPN settles on h2 when the client offers it");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_no_connection_headers(&response);
    let over_h2 = read_events(response, None).await;

    let http1 = client_trusting(&https.ca, Protocol::Http1);
    let response = http1
        .post(app.run_url("demo"))
        .header("content-type", "application/json")
        .body(first_run("th-h1", "run-1", "over h2").to_string())
        .send()
        .await
        .expect("run over HTTP/1.1");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), Version::HTTP_11, "a client offering http/1.1 only is served HTTP/1.1");
    let over_h1 = read_events(response, None).await;

    assert_eq!(kinds(&over_h2).last(), Some(&"RUN_FINISHED"), "{:?}", kinds(&over_h2));
    assert_eq!(kinds(&over_h2), kinds(&over_h1), "the same run, event for event, on either protocol");
    let replay = app.run_to_end("demo", &first_run("th-h2", "run-1", "over h2")).await;
    assert_eq!(replay, over_h2, "the replay over h2 is the stream as first sent");
}
on_both_stores!(a_run_streams_whole_over_https_on_http2_and_http1);

/// `curl --http2 --cacert ca.pem -N` and `curl --http1.1`: the README's command.
async fn curl_gets_every_event_over_https_h2_and_http1(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |_| {}).await;
    let expected = https.app.run_to_end("demo", &first_run("th-curl-ref", "run-1", "hi")).await.len();
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let input = first_run(&unique("th-curl"), "run-1", "hi").to_string();
        let output = tokio::process::Command::new("curl")
            .args(["-sS", "-N", flag, "--cacert"])
            .arg(https.ca_file())
            .args(["-H", "content-type: application/json", "-d", &input, "-w", "\nhttp_version=%{http_version}\n"])
            .arg(format!("https://localhost:{}/v1/agui/agents/demo", https.app.address.port()))
            .output()
            .await
            .expect("curl runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "curl {flag}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.ends_with(&format!("http_version={version}\n")), "curl {flag} negotiated: {stdout}");
        let events: Vec<Value> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("JSON event"))
            .collect();
        assert_eq!(events.len(), expected, "curl {flag} got every event: {stdout}");
        assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("RUN_FINISHED")));
    }
}
on_both_stores!(curl_gets_every_event_over_https_h2_and_http1);

/// A proxy in front terminates TLS and speaks h2c: the plain listener takes HTTP/2 with prior
/// knowledge beside HTTP/1.1.
async fn a_plain_listener_speaks_h2c_by_prior_knowledge(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    assert_eq!(app.scheme, "http");
    let input = first_run("th-h2c", "run-1", "cleartext").to_string();
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-N", "--http2-prior-knowledge", "-H", "content-type: application/json", "-d", &input])
        .args(["-w", "\nhttp_version=%{http_version}\n"])
        .arg(app.run_url("demo"))
        .output()
        .await
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.ends_with("http_version=2\n"), "{stdout}");
    assert!(stdout.contains(r#""type":"RUN_FINISHED""#), "{stdout}");

    let h2c = crate::tls_support::http_client().http2_prior_knowledge().build().expect("client");
    let response = h2c.get(app.url("/v1/threads/th-h2c")).send().await.expect("h2c request");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let response = app.client.get(app.url("/v1/threads/th-h2c")).send().await.expect("HTTP/1.1 request");
    assert_eq!(response.version(), Version::HTTP_11, "the same port still speaks HTTP/1.1");
}
on_both_stores!(a_plain_listener_speaks_h2c_by_prior_knowledge);

/// Reconnects with `Last-Event-ID` and keepalives over HTTP/2, as over HTTP/1.1.
async fn sse_over_http2_resumes_and_keeps_alive(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |_| {}).await;
    let app = &https.app;
    let input = first_run("th-h2-resume", "run-1", "resume me");
    let full = app.run_to_end("slow", &input).await;
    for k in [1, 4, full.len() - 1] {
        let response =
            app.post_run_with("slow", &input, &[("last-event-id", full[k - 1].id.as_deref().expect("id"))]).await;
        assert_eq!(response.version(), Version::HTTP_2);
        let tail = read_events(response, None).await;
        assert_eq!(&tail[..], &full[k..], "resumed after event {k} over h2: exactly the rest");
    }

    let mut response = app.post_run("waiter", &first_run("th-h2-idle", "run-1", "x")).await;
    assert_eq!(response.version(), Version::HTTP_2);
    // keepalive_secs = 1: the comment comes within seconds of the turn going quiet.
    let (keepalive, raw) = read_until_keepalive(&mut response).await;
    assert!(keepalive, "keepalive comment over h2 in {raw}");
}
on_both_stores!(sse_over_http2_resumes_and_keeps_alive);

/// A client closing one HTTP/2 stream (RST_STREAM, its connection staying open) is noticed as a
/// closed HTTP/1.1 connection is: its place under the stream limit comes back, the turn runs on,
/// and the limit holds on the shared connection.
async fn a_dropped_http2_stream_gives_its_place_back_and_the_turn_runs_on(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |config| config.limits.max_streams_per_caller = 2).await;
    let app = &https.app;
    let first = open_until_waiting(app, "waiter", &first_run("th-h2-a", "run-1", "x")).await;
    let second = open_until_waiting(app, "waiter", &first_run("th-h2-b", "run-1", "x")).await;
    let refused = app.post_run("waiter", &first_run("th-h2-c", "run-1", "x")).await;
    assert_eq!(refused.version(), Version::HTTP_2);
    assert_eq!(refused.status(), 429, "the per-caller limit holds over HTTP/2");
    let body: Value = refused.json().await.expect("error body");
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");

    // Dropping the response resets that stream only; the client's connection stays up.
    drop(first);
    let third = wait_for(PATIENCE, "the dropped stream's place to be given back", || async {
        let response = app.post_run("waiter", &first_run("th-h2-c", "run-1", "x")).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_eq!(third.version(), Version::HTTP_2);
    let thread = app.store.find_thread("default", "th-h2-a").await.expect("query").expect("thread");
    let turns = app.store.thread_turns(thread.pk).await.expect("turns");
    assert!(!turns[0].status.is_finished(), "closing a stream never cancels its turn (SPEC: the turn runs on)");

    // An explicit cancel over h2 ends the turn, on the stream still following it.
    let cancel = app.client.post(app.url("/v1/threads/th-h2-b/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let events = tokio::time::timeout(PATIENCE, second.rest()).await.expect("the stream ends");
    assert_eq!(events.last().map(|e| e.data["outcome"].clone()), Some(json!({"type": "cancelled"})));
}
on_both_stores!(a_dropped_http2_stream_gives_its_place_back_and_the_turn_runs_on);

/// Shutdown over HTTPS as over plain HTTP: open h2 and HTTP/1.1 streams end cleanly (resumable)
/// and the server returns.
async fn shutdown_ends_https_streams_cleanly(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |_| {}).await;
    let h2 = open_until_waiting(&https.app, "waiter", &first_run("th-stop-h2", "run-1", "x")).await;
    let http1 = client_trusting(&https.ca, Protocol::Http1);
    let response = http1
        .post(https.app.run_url("waiter"))
        .header("content-type", "application/json")
        .body(first_run("th-stop-h1", "run-1", "x").to_string())
        .send()
        .await
        .expect("run over HTTP/1.1");
    let mut h1 = EventStream::new(response);
    h1.until_kind("TEXT_MESSAGE_END").await;
    let HttpsApp { app, dir: _dir, .. } = https;
    let stopping = tokio::spawn(app.shut_down());
    let (h2_events, h1_events) = tokio::time::timeout(PATIENCE, async { tokio::join!(h2.rest(), h1.rest()) })
        .await
        .expect("both streams end at shutdown");
    tokio::time::timeout(PATIENCE, stopping).await.expect("the server stops").expect("stops");
    for events in [&h2_events, &h1_events] {
        assert_eq!(kinds(events).last(), Some(&"TEXT_MESSAGE_END"), "ended, not cut mid-frame: {:?}", kinds(events));
    }
}
on_both_stores!(shutdown_ends_https_streams_cleanly);

/// The certificate files replaced while a stream is open: new handshakes get the new
/// certificate, the open stream goes on to its end.
// One store: the server's certificate is in front of any store.
#[tokio::test]
async fn replaced_certificate_files_are_served_to_new_connections_only() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let https = https_app(&db, |_| {}).await;
    assert_eq!(served_certificate(&https).await, https.first.der);
    let open = open_until_waiting(&https.app, "waiter", &first_run("th-rotate", "run-1", "x")).await;

    let second = https.ca.issue(&["localhost", "127.0.0.1", "gateway.test"], 2);
    replace_files(https.dir.path(), &second);
    wait_until(PATIENCE, "new connections to be served the new certificate", || async {
        served_certificate(&https).await == second.der
    })
    .await;

    let cancel = https.app.client.post(https.app.url("/v1/threads/th-rotate/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let events = tokio::time::timeout(PATIENCE, open.rest()).await.expect("the open stream ends");
    assert_eq!(
        events.last().map(|e| e.data["outcome"].clone()),
        Some(json!({"type": "cancelled"})),
        "the stream opened before the reload ran to its own end: {:?}",
        kinds(&events)
    );
}

/// Writes a certificate as a deployment would: each file replaced whole (a rename), the key
/// first, so no reader sees half a file.
fn replace_files(dir: &Path, cert: &ServerCert) {
    for (name, text) in [("server.key", &cert.key_pem), ("server.pem", &cert.chain_pem)] {
        let staged = dir.join(format!("{name}.new"));
        std::fs::write(&staged, text).expect("stage");
        std::fs::rename(&staged, dir.join(name)).expect("replace");
    }
}

/// The real process: SIGHUP reloads; garbage in the files keeps the old certificate and says
/// why; a new handshake still works throughout.
// One store: the server's certificate is in front of any store.
#[tokio::test]
async fn sighup_reloads_and_a_bad_file_keeps_the_old_certificate() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    let first = ca.issue(&["localhost", "127.0.0.1"], 11);
    let (cert, key) = first.write(dir.path());
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!("[tls]\ncert_file = {:?}\nkey_file = {:?}\n\n{TEST_CONFIG}", cert.display(), key.display()),
    )
    .expect("config");
    gateway_process::migrate(&db.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let instance = Spawn::new(&config, &db.url).start(logs.clone());
    let client_for = |ca: &TestCa| client_trusting(ca, Protocol::Negotiated);
    let url = format!("https://{}/livez", instance.address);
    let peer = |client: reqwest::Client| {
        let url = url.clone();
        async move {
            let response = client.get(&url).send().await.expect("a handshake with the gateway");
            assert_eq!(response.status(), 200);
            response.extensions().get::<reqwest::tls::TlsInfo>().and_then(|i| i.peer_certificate()).map(<[u8]>::to_vec)
        }
    };
    assert_eq!(peer(client_for(&ca)).await, Some(first.der.clone()));
    let log_has = |needle: &'static str| {
        let logs = logs.clone();
        move || {
            let logs = logs.clone();
            async move { logs.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l.contains(needle)) }
        }
    };

    // Garbage in the certificate file: a warning naming the file, and the old certificate stays.
    std::fs::write(&cert, "this is not a certificate\n").expect("garbage");
    signal(instance.child.id(), "HUP");
    wait_until(PATIENCE, "a warning that the certificate was not reloaded", log_has("TLS certificate not reloaded"))
        .await;
    let warning = logs.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|l| l.contains("not reloaded")).cloned();
    let warning = warning.expect("warning line");
    assert!(warning.contains("WARN") && warning.contains(&cert.display().to_string()), "{warning}");
    assert_eq!(peer(client_for(&ca)).await, Some(first.der.clone()), "the old certificate is still served");

    // A good certificate and SIGHUP: new handshakes get it.
    let second = ca.issue(&["localhost", "127.0.0.1"], 12);
    replace_files(dir.path(), &second);
    signal(instance.child.id(), "HUP");
    wait_until(PATIENCE, "a reload on SIGHUP", log_has("reason=\"SIGHUP\"")).await;
    wait_until(PATIENCE, "the new certificate on a new connection", || async {
        peer(client_for(&ca)).await == Some(second.der.clone())
    })
    .await;
    assert!(
        logs.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l.contains("TLS certificate reloaded")),
        "the reload is logged"
    );
}

fn signal(pid: u32, name: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Bad certificate files at start: the gateway exits non-zero with an error naming the file.
#[tokio::test]
async fn bad_certificate_files_at_start_are_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    let good = ca.issue(&["localhost"], 21);
    let other = ca.issue(&["localhost"], 22);
    let (cert, key) = good.write(dir.path());
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, &other.key_pem).expect("other key");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not PEM at all\n").expect("garbage");
    let missing = dir.path().join("missing.pem");
    let cases: [(&Path, &Path, &[&str]); 5] = [
        (&missing, &key, &["tls.cert_file", "missing.pem", "No such file"]),
        (&cert, &missing, &["tls.key_file", "missing.pem", "No such file"]),
        (&cert, &other_key, &["tls.key_file", "other.key", "is not the private key of the certificate", "server.pem"]),
        (&garbage, &key, &["tls.cert_file", "garbage.pem", "holds no certificate"]),
        (&cert, &garbage, &["tls.key_file", "garbage.pem", "holds no private key"]),
    ];
    for (cert_file, key_file, expected) in cases {
        let output = serve_once(dir.path(), &[("CERT_FILE", cert_file), ("KEY_FILE", key_file)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "the gateway must not start with {cert_file:?} / {key_file:?}");
        for needle in expected {
            assert!(stderr.contains(needle), "{needle:?} not in the error: {stderr}");
        }
    }
    let output = serve_once(dir.path(), &[("CERT_FILE", &cert)]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("tls.cert_file is set but tls.key_file is not"), "{stderr}");
}

/// `agui-gateway serve` with `AGUI_GATEWAY_TLS_*` settings, expected to exit at once.
fn serve_once(dir: &Path, tls: &[(&str, &Path)]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--database"])
        .arg(format!("sqlite://{}", dir.join("start.db").display()))
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null());
    for (name, path) in tls {
        command.env(format!("AGUI_GATEWAY_TLS_{name}"), path);
    }
    let mut child =
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn");
    // A gateway that started after all would never exit: give it a bound, then fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "the gateway started with bad certificate files");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The official client (`@ag-ui/client`, Node's fetch through an undici agent allowed to
/// speak h2) passes over HTTPS with HTTP/2 negotiated, trusting the CA by NODE_EXTRA_CA_CERTS.
async fn the_official_client_passes_over_https_http2(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let https = https_app(&db, |_| {}).await;
    let url = format!("https://localhost:{}/v1/agui/agents/demo", https.app.address.port());
    let ca = https.ca_file();
    for extra in [&["--http2"][..], &[][..]] {
        let (passed, report) = agui_check_with(
            &url,
            &first_run(&unique("th-official"), "run-1", "hello over TLS"),
            extra,
            &[("NODE_EXTRA_CA_CERTS", ca.as_os_str())],
        )
        .await;
        assert!(passed, "agui-check {extra:?}:\n{report}");
        let expected = if extra.is_empty() { "protocol http/1.1" } else { "protocol h2" };
        assert!(report.contains(expected), "{expected:?} not in the report:\n{report}");
    }
}
on_both_stores!(the_official_client_passes_over_https_http2);

/// Failed and stalled handshakes are the failing client's alone: an open stream goes on, and a
/// new client connects while a half-open one sits in its handshake.
// One store: TLS handshakes are in front of any store.
#[tokio::test]
async fn failed_and_stalled_handshakes_disturb_no_other_connection() {
    use tokio::io::AsyncWriteExt;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let https = https_app(&db, |_| {}).await;
    let open = open_until_waiting(&https.app, "waiter", &first_run("th-bystander", "run-1", "x")).await;

    // A TCP connection that never says anything, and one that speaks plain HTTP to the TLS port.
    let _stalled = tokio::net::TcpStream::connect(https.app.address).await.expect("connect");
    let mut plain = tokio::net::TcpStream::connect(https.app.address).await.expect("connect");
    plain.write_all(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n").await.expect("write");
    // A client that does not trust the gateway's CA.
    let stranger = client_trusting(&TestCa::new(), Protocol::Negotiated);
    let refused = stranger.get(https.app.url("/livez")).send().await;
    assert!(refused.is_err(), "a certificate from an unknown CA is refused by the client");

    let answer = tokio::time::timeout(Duration::from_secs(5), served_certificate(&https))
        .await
        .expect("a new handshake is not held up by the stalled one");
    assert_eq!(answer, https.first.der);
    let cancel = https.app.client.post(https.app.url("/v1/threads/th-bystander/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let events = tokio::time::timeout(PATIENCE, open.rest()).await.expect("the open stream ends");
    assert_eq!(events.last().map(|e| e.data["outcome"].clone()), Some(json!({"type": "cancelled"})));
}

/// The container health check over the gateway's own TLS: trusted through `--cacert` it
/// passes; without it the certificate is refused and the reason named.
// One store: the health check reads no store.
#[tokio::test]
async fn the_healthcheck_command_verifies_the_gateways_own_certificate() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let https = https_app(&db, |_| {}).await;
    // Run beside the in-process gateway, which must go on answering meanwhile.
    let healthcheck = |args: &[&str]| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .arg("healthcheck")
            .args(args)
            .env_remove("SSL_CERT_FILE")
            .output()
    };
    let ca = https.ca_file().display().to_string();
    let url = https.app.url("/readyz");
    assert!(url.starts_with("https://"), "{url}");
    let trusted = healthcheck(&["--cacert", &ca, &url]).await.expect("healthcheck runs");
    assert!(trusted.status.success(), "{}", String::from_utf8_lossy(&trusted.stderr));
    let untrusted = healthcheck(&[&url]).await.expect("healthcheck runs");
    assert!(!untrusted.status.success(), "a certificate from an unknown CA is not healthy");
    let said = String::from_utf8_lossy(&untrusted.stderr);
    assert!(said.contains("certificate not trusted"), "the reason is named: {said}");
}
