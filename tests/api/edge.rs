//! The gateway at the edge, as an attacker meets it: stalled connections (plain, TLS, HTTP/2)
//! closed within their timeouts while a real client is served, a slow body answered 408, the
//! connection cap, the accept loop outliving descriptor exhaustion — against the real binary
//! over real sockets, with short timeouts set from the environment. Then what a request may
//! cost and say: bounded client tool schemas and JSON bodies, the default concurrent-turn
//! quota, NUL characters refused alike on both stores, no hint that a thread or an agent
//! exists, the JSON error body on every refusal, and masked secrets in printed URLs.

use std::path::PathBuf;
use std::process::Command;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::{auth_config, scoped_token};
use crate::gateway_process::{Instance, Spawn};
use crate::helpers::*;
use crate::on_both_stores;
use crate::test_ca::TestCa;

/// The test timeouts: short, so that each test takes seconds.
const HEADER_SECS: u64 = 2;
const IDLE_SECS: u64 = 3;

/// A gateway process with its config file and database, and what it logged.
struct Edge {
    instance: Instance,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
    _db: TestDatabase,
}

impl Edge {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.instance.address)
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(&self.instance.address).await.expect("connect")
    }
}

/// The environment every edge gateway gets: the short timeouts, then `extra`.
fn edge_env<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("AGUI_GATEWAY_LIMITS_HEADER_READ_TIMEOUT_SECS", "2"),
        ("AGUI_GATEWAY_LIMITS_IDLE_TIMEOUT_SECS", "3"),
        ("AGUI_GATEWAY_LIMITS_BODY_READ_TIMEOUT_SECS", "2"),
    ];
    env.extend_from_slice(extra);
    env
}

fn config_file(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, TEST_CONFIG).expect("write config");
    path
}

// One store: the edge (sockets, TLS, header limits) is in front of any store.
async fn edge_gateway(extra: &[(&str, &str)]) -> Edge {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let instance = Spawn::new(&config_file(&dir), &db.url).env(&edge_env(extra)).start(logs.clone());
    Edge { instance, logs, _dir: dir, _db: db }
}

/// How long after `since` (an instant no later than the gateway's clock for it started) the
/// peer closed `socket`, reading (and dropping) whatever it sends; `None` when it is still open
/// `within` after `since`.
async fn closed_within(socket: &mut (impl AsyncRead + Unpin), since: Instant, within: Duration) -> Option<Duration> {
    let deadline = tokio::time::Instant::from_std(since + within);
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(since.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

/// A real client is served at once.
async fn served(url: &str) {
    let client = crate::tls_support::http_client().timeout(Duration::from_secs(5)).build().expect("client");
    let response = client.get(url).send().await.expect("a real client is served");
    assert_eq!(response.status(), 200);
}

/// Asserts the connection closed after about `timeout`: not before it (it was the timeout that
/// closed it), not long after.
fn closed_by_timeout(what: &str, took: Option<Duration>, timeout: Duration) {
    let took = took.unwrap_or_else(|| panic!("{what}: still open long past its timeout ({timeout:?})"));
    assert!(
        took >= timeout - Duration::from_millis(300),
        "{what}: closed after {took:?}, before its timeout {timeout:?}"
    );
}

#[tokio::test]
async fn stalled_plain_connections_are_closed_within_their_timeout_while_a_client_is_served() {
    let edge = edge_gateway(&[]).await;
    let header = Duration::from_secs(HEADER_SECS);
    let patience = header + Duration::from_secs(3);

    // Connected, not a byte sent.
    let silent_since = Instant::now();
    let mut silent = edge.connect().await;
    // A request head trickling in a byte at a time, never ending.
    let trickle_since = Instant::now();
    let mut trickle = edge.connect().await;
    let (mut trickle_read, mut trickle_write) = trickle.split();
    // One whole request answered, then nothing (idle between keep-alive requests).
    let mut kept = edge.connect().await;
    kept.write_all(b"GET /livez HTTP/1.1\r\nHost: gateway\r\n\r\n").await.expect("write");
    let mut answer = [0u8; 1024];
    let read = kept.read(&mut answer).await.expect("an answer");
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..read]));
    // The wait for the next request head starts once the answer is written, before it is read.
    let kept_since = Instant::now() - Duration::from_millis(50);

    let dribble = async move {
        for byte in
            b"GET /livez HTTP/1.1\r\nHost: gateway\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter()
        {
            if trickle_write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (silent_took, trickle_took, kept_took, (), ()) = tokio::join!(
        closed_within(&mut silent, silent_since, patience),
        closed_within(&mut trickle_read, trickle_since, patience),
        closed_within(&mut kept, kept_since, patience),
        dribble,
        async {
            // Meanwhile a real client is served, at once, twice.
            served(&edge.url("/livez")).await;
            tokio::time::sleep(Duration::from_millis(800)).await;
            served(&edge.url("/livez")).await;
        },
    );
    closed_by_timeout("a silent connection", silent_took, header);
    closed_by_timeout("a trickling request head", trickle_took, header);
    closed_by_timeout("an idle keep-alive connection", kept_took, header);
    served(&edge.url("/livez")).await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_with_the_json_error_body() {
    let edge = edge_gateway(&[]).await;
    let mut slow = edge.connect().await;
    let head = "POST /v1/agui/agents/demo HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
                Accept: text/event-stream\r\nContent-Length: 500\r\n\r\n{\"threadId\":";
    slow.write_all(head.as_bytes()).await.expect("write");
    let start = Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(6), slow.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection is answered and closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/json") && answer.contains(r#""code":"request_timeout""#), "{answer}");
    assert!(start.elapsed() >= Duration::from_millis(1700), "answered after {:?}", start.elapsed());
}

#[tokio::test]
async fn past_max_connections_a_new_connection_waits_for_a_slot() {
    let edge = edge_gateway(&[("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS", "3")]).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(edge.connect().await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Three connections are open: a fourth is not taken until one closes (at the header timeout).
    let start = Instant::now();
    served(&edge.url("/livez")).await;
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(1200), "served after {waited:?}: the cap did not hold");
    for mut connection in held {
        assert!(closed_within(&mut connection, Instant::now(), Duration::from_secs(4)).await.is_some());
    }
}

// One store: the accept loop is in front of any store.
#[tokio::test]
async fn the_accept_loop_outlives_running_out_of_file_descriptors() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let env =
        edge_env(&[("AGUI_GATEWAY_DATABASE_MAX_CONNECTIONS", "2"), ("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS", "10000")]);
    let mut instance = Spawn::new(&config_file(&dir), &db.url).env(&env).open_files(64).start(logs.clone());
    let address = instance.address.clone();
    served(&format!("http://{address}/livez")).await;

    // More idle connections than the process has descriptors.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(&address).await.expect("connect (the backlog takes it)"));
    }
    let exhausted = || {
        let logs = logs.clone();
        async move {
            logs.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l.contains("accepting a connection failed"))
        }
    };
    wait_until(Duration::from_secs(5), "the gateway runs out of descriptors", exhausted).await;

    // The stalled connections are closed at their timeout, and accepting resumes: a real
    // client is served, by the same process.
    let client = crate::tls_support::http_client().timeout(Duration::from_secs(12)).build().expect("client");
    let response = client.get(format!("http://{address}/livez")).send().await.expect("served after the exhaustion");
    assert_eq!(response.status(), 200);
    assert!(instance.child.try_wait().expect("status").is_none(), "the gateway is still running");
    drop(idle);
    served(&format!("http://{address}/livez")).await;
}

/// A client config trusting `ca` only, offering `alpn`.
fn tls_client(ca: &TestCa, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca_der = rustls::pki_types::CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).expect("CA");
    roots.add(ca_der).expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

// One store: TLS handshakes are in front of any store.
#[tokio::test]
async fn stalled_tls_connections_are_closed_within_their_timeout_while_a_client_is_served() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"], 1).write(dir.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let env = edge_env(&[("AGUI_GATEWAY_TLS_CERT_FILE", &cert), ("AGUI_GATEWAY_TLS_KEY_FILE", &key)]);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let instance = Spawn::new(&config_file(&dir), &db.url).env(&env).start(logs);
    let address = instance.address.clone();
    let header = Duration::from_secs(HEADER_SECS);
    let idle = Duration::from_secs(IDLE_SECS);

    // No ClientHello.
    let no_hello_since = Instant::now();
    let mut no_hello = TcpStream::connect(&address).await.expect("connect");
    // A finished handshake (HTTP/1.1), then nothing.
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let tcp = TcpStream::connect(&address).await.expect("connect");
    let mut h1 = tls_client(&ca, b"http/1.1").connect(name.clone(), tcp).await.expect("handshake");
    // (The server finished its side of the handshake before the client did.)
    let h1_since = Instant::now() - Duration::from_millis(50);
    // A finished handshake (h2), then not even the preface.
    let tcp = TcpStream::connect(&address).await.expect("connect");
    let mut h2 = tls_client(&ca, b"h2").connect(name, tcp).await.expect("handshake");
    let h2_since = Instant::now() - Duration::from_millis(50);
    assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let root = reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).expect("CA certificate");
    let client = crate::tls_support::http_client()
        .tls_certs_only([root])
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let patience = idle + header + Duration::from_secs(3);
    let (no_hello_took, h1_took, h2_took, ()) = tokio::join!(
        closed_within(&mut no_hello, no_hello_since, patience),
        closed_within(&mut h1, h1_since, patience),
        closed_within(&mut h2, h2_since, patience),
        async {
            let response = client.get(format!("https://{address}/livez")).send().await;
            assert_eq!(response.expect("a real client is served").status(), 200);
        },
    );
    closed_by_timeout("a TCP connection with no handshake", no_hello_took, header);
    closed_by_timeout("a TLS connection that sends no request", h1_took, header);
    let h2_took = h2_took.expect("an h2 connection with no preface is closed");
    assert!(h2_took >= idle - Duration::from_millis(300), "closed after {h2_took:?}");
}

/// An HTTP/2 frame header: length, type, flags, stream 0.
fn h2_frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let length = payload.len() as u32;
    let mut frame = vec![(length >> 16) as u8, (length >> 8) as u8, length as u8, kind, 0, 0, 0, 0, 0];
    frame.extend_from_slice(payload);
    frame
}

#[tokio::test]
async fn an_h2_peer_that_stops_answering_pings_is_closed_while_streams_are_served() {
    // Idle connections are left alone for long here: only the pings can close the stalled one.
    let edge = edge_gateway(&[
        ("AGUI_GATEWAY_LIMITS_IDLE_TIMEOUT_SECS", "60"),
        ("AGUI_GATEWAY_LIMITS_H2_KEEPALIVE_INTERVAL_SECS", "1"),
        ("AGUI_GATEWAY_LIMITS_H2_KEEPALIVE_TIMEOUT_SECS", "1"),
    ])
    .await;
    let mut stalled = edge.connect().await;
    stalled.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("preface");
    stalled.write_all(&h2_frame(0x4, &[])).await.expect("SETTINGS");
    let start = Instant::now();

    // A real HTTP/2 client (which answers pings) keeps a stream open across the same time.
    let client = crate::tls_support::http_client().http2_prior_knowledge().build().expect("client");
    let response = client
        .post(edge.url("/v1/agui/agents/waiter"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(first_run("th-h2-ping", "run-1", "wait").to_string())
        .send()
        .await
        .expect("run");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;

    let took = closed_within(&mut stalled, start, Duration::from_secs(8)).await;
    let took = took.expect("the peer that never acknowledges a ping is closed");
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(6), "closed after {took:?}");
    // The stream of the client that answers pings is still open and ticking keepalives.
    let keepalives = stream.keepalives;
    let more = tokio::time::timeout(Duration::from_secs(3), async {
        while stream.keepalives == keepalives {
            if !stream.read_chunk().await {
                return false;
            }
        }
        true
    })
    .await;
    assert_eq!(more, Ok(true), "the open stream is kept: it is not idle");
}

#[tokio::test]
async fn an_open_stream_is_not_idle_and_lasts_until_stream_max_secs() {
    let edge =
        edge_gateway(&[("AGUI_GATEWAY_LIMITS_IDLE_TIMEOUT_SECS", "1"), ("AGUI_GATEWAY_LIMITS_STREAM_MAX_SECS", "4")])
            .await;
    let client = crate::tls_support::http_client().build().expect("client");
    let response = client
        .post(edge.url("/v1/agui/agents/waiter"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(first_run("th-open", "run-1", "wait").to_string())
        .send()
        .await
        .expect("run");
    assert_eq!(response.status(), 200);
    let start = Instant::now();
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let (_, _, keepalives) = stream.rest_frames().await;
    let lasted = start.elapsed();
    // Kept open past the idle timeout, many times over, and ended at stream_max_secs.
    assert!(lasted >= Duration::from_millis(3500) && lasted < Duration::from_secs(8), "the stream lasted {lasted:?}");
    assert!(keepalives >= 2, "{keepalives} keepalives");
    let logs = edge.logs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(!logs.iter().any(|l| l.contains("panicked")), "{logs:?}");
}

/// A request head of exactly `size` bytes (request line, headers, the blank line): `GET
/// /livez` with one padding header.
fn head_of(size: usize) -> Vec<u8> {
    let start = "GET /livez HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nX-Pad: ";
    let end = "\r\n\r\n";
    let head = format!("{start}{}{end}", "a".repeat(size - start.len() - end.len()));
    assert_eq!(head.len(), size);
    head.into_bytes()
}

/// The status the gateway at `address` answers `head` with, over HTTP/1.1 on a fresh
/// connection (the head is written while the answer is read: a refusal may come first).
async fn status_for_head(address: std::net::SocketAddr, head: Vec<u8>) -> u16 {
    let socket = TcpStream::connect(address).await.expect("connect");
    let (mut reader, mut writer) = socket.into_split();
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(&head).await;
        writer
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !answer.windows(2).any(|w| w == b"\r\n") {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    });
    read.await.expect("an answer within 10 s");
    let _ = writing.await;
    let line = String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string();
    line.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no status line: {line:?}"))
}

/// `limits.max_header_bytes` holds to the byte: a head of the limit is served, one byte more
/// is `431`, and so is every larger head (66 KB to 100 KB with the default 64 KiB used to be
/// served: the read buffer's bound alone let heads of up to twice the limit through).
// One store: the request head is read before any store.
#[tokio::test]
async fn a_request_head_past_max_header_bytes_is_431_to_the_byte() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let config = test_config(&db.url);
    let limit = config.limits.max_header_bytes;
    assert_eq!(limit, 65536, "the default");
    let app = TestApp::start_with(config).await;
    for size in [limit - 1, limit] {
        assert_eq!(status_for_head(app.address, head_of(size)).await, 200, "a head of {size} bytes");
    }
    for size in [limit + 1, 66_000, 80_000, 100_000, 200_000] {
        assert_eq!(status_for_head(app.address, head_of(size)).await, 431, "a head of {size} bytes");
    }
    // A smaller limit holds the same way.
    let mut config = test_config(&db.url);
    config.limits.max_header_bytes = 16_384;
    let app = TestApp::start_with(config).await;
    assert_eq!(status_for_head(app.address, head_of(16_383)).await, 200);
    assert_eq!(status_for_head(app.address, head_of(16_385)).await, 431);
}

/// A client tool schema is held to its limits before it is kept: a clear 400 naming it, and
/// nothing stored.
async fn client_tool_schemas_and_json_bodies_are_bounded(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.limits.max_tool_schema_bytes = 2048;
    config.limits.max_tool_schema_depth = 6;
    config.limits.max_json_values = 5000;
    let app = TestApp::start_with(config).await;
    let before = app.counts().await;
    let with_tool = |parameters: Value| {
        let mut input = first_run("th-schema", "run-1", "hi");
        input["tools"] = json!([{ "name": "confirm_dialog", "description": "d", "parameters": parameters }]);
        input
    };
    let properties: serde_json::Map<String, Value> =
        (0..200).map(|i| (format!("p{i}"), json!({ "type": "string" }))).collect();
    let large = with_tool(json!({ "type": "object", "properties": properties }));
    let mut deep = json!({ "type": "string" });
    for _ in 0..8 {
        deep = json!({ "type": "object", "properties": { "x": deep } });
    }
    let deep = with_tool(deep);
    let many = {
        let mut input = first_run("th-schema", "run-1", "hi");
        input["state"] = json!({ "list": vec![json!({ "a": 0 }); 3000] });
        input
    };
    for (body, field, limit) in [
        (&large, "tools[0].parameters", "limits.max_tool_schema_bytes"),
        (&deep, "tools[0].parameters", "limits.max_tool_schema_depth"),
        (&many, "body", "limits.max_json_values"),
    ] {
        let response = app.post_run("slow", body).await;
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.expect("error body");
        assert_eq!(error["error"]["code"], "bad_request");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(field) && message.contains(limit), "{message}");
    }
    assert_eq!(app.counts().await, before, "nothing was stored");
    // Within the limits the same tool is admitted.
    let fine = with_tool(json!({ "type": "object", "properties": { "ok": { "type": "boolean" } } }));
    let events = app.run_to_end("slow", &fine).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
}
on_both_stores!(client_tool_schemas_and_json_bodies_are_bounded);

/// A NUL character is refused with a 400 naming the field, on both stores alike (PostgreSQL
/// cannot store it), and nothing is stored.
async fn a_nul_character_is_a_400_naming_the_field_on_both_stores(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let before = app.counts().await;
    let mut in_content = first_run("th-nul", "run-1", "a\u{0}b");
    let mut in_id = first_run("th-nul", "run-1", "hi");
    in_id["messages"][0]["id"] = json!("u\u{0}1");
    let mut in_state = first_run("th-nul", "run-1", "hi");
    in_state["state"] = json!({ "note": "x\u{0}" });
    let mut in_resume = first_run("th-nul", "run-1", "hi");
    in_resume["resume"] = json!([{ "interruptId": "int\u{0}", "status": "resolved" }]);
    for (body, field) in [
        (&mut in_content, "messages[0].content"),
        (&mut in_id, "messages[0].id"),
        (&mut in_state, "state.note"),
        (&mut in_resume, "resume[0].interruptId"),
    ] {
        let text = body.to_string();
        assert!(text.contains("\\u0000"), "the body escapes the NUL as JSON does: {text}");
        let response = app.post_run("demo", body).await;
        assert_eq!(response.status(), 400, "{field}");
        let error: Value = response.json().await.expect("error body");
        assert_eq!(error["error"]["code"], "bad_request");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("{field}: holds a NUL character")), "{message}");
    }
    // In a path segment of the decision route.
    let response = app.post_json("/v1/interrupts/int%00x/decision", r#"{"status":"resolved"}"#).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("error body");
    assert!(error["error"]["message"].as_str().unwrap_or_default().starts_with("id: holds a NUL"), "{error}");
    assert_eq!(app.counts().await, before, "nothing was stored");
    // The same text without the NUL runs.
    let events = app.run_to_end("demo", &first_run("th-nul", "run-1", "ab")).await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
}
on_both_stores!(a_nul_character_is_a_400_naming_the_field_on_both_stores);

/// Unknown and forbidden answer alike: a thread on every route (connect included), an agent to
/// a caller whose scopes do not name it.
async fn unknown_and_forbidden_answer_alike(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, "")).await;
    let token = |sub: &str, scope: &str| format!("Bearer {}", scoped_token("default", sub, scope));
    let owner = token("olga", "threads:read threads:content agent:demo");
    let events = read_events(
        app.post_run_with("demo", &first_run("th-olga", "run-1", "mine"), &[("authorization", &owner)]).await,
        None,
    )
    .await;
    assert_eq!(kinds(&events).last(), Some(&"RUN_FINISHED"));
    let other = token("piotr", "threads:read threads:content agent:demo");

    let answer = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let body: Value = response.json().await.expect("JSON error body");
        (status, body["error"]["code"].as_str().unwrap_or_default().to_string(), body["error"]["message"].clone())
    };
    for thread in ["th-olga", "th-nobody"] {
        let connect = app
            .client
            .post(app.url("/v1/agui/agents/demo/connect"))
            .header("content-type", "application/json")
            .header("authorization", &other)
            .body(json!({ "threadId": thread }).to_string())
            .send()
            .await
            .expect("connect");
        let show = app.client.get(app.url(&format!("/v1/threads/{thread}"))).header("authorization", &other);
        let messages =
            app.client.get(app.url(&format!("/v1/threads/{thread}/messages"))).header("authorization", &other);
        let cancel = app.client.post(app.url(&format!("/v1/threads/{thread}/cancel"))).header("authorization", &other);
        let answers = [
            answer(connect).await,
            answer(show.send().await.expect("show")).await,
            answer(messages.send().await.expect("messages")).await,
            answer(cancel.send().await.expect("cancel")).await,
        ];
        for (route, got) in ["connect", "show", "messages", "cancel"].iter().zip(&answers) {
            assert_eq!((got.0, got.1.as_str()), (403, "permission_denied"), "{route} of {thread}: {got:?}");
            assert_eq!(got.2, json!("permission denied"), "{route} of {thread}: the same words");
        }
    }

    // A caller scoped to `demo`: `slow` (configured) and `ghost` (not) are answered alike.
    let before = app.counts().await;
    let mut agent_answers = Vec::new();
    for agent in ["slow", "ghost"] {
        let run = app.post_run_with(agent, &first_run("th-scope", "run-1", "hi"), &[("authorization", &other)]).await;
        agent_answers.push(answer(run).await);
        let connect = app
            .client
            .post(app.url(&format!("/v1/agui/agents/{agent}/connect")))
            .header("content-type", "application/json")
            .header("authorization", &other)
            .body(json!({ "threadId": "th-olga" }).to_string())
            .send()
            .await
            .expect("connect");
        agent_answers.push(answer(connect).await);
    }
    assert_eq!(agent_answers[0], agent_answers[2], "run: {agent_answers:?}");
    assert_eq!(agent_answers[1], agent_answers[3], "connect: {agent_answers:?}");
    assert_eq!((agent_answers[0].0, agent_answers[0].1.as_str()), (403, "permission_denied"));
    assert_eq!(app.counts().await, before, "nothing was stored");
    // A caller who may start any agent still learns that an unknown one is unknown.
    let every = token("piotr", "threads:read threads:content agent:*");
    let run = app.post_run_with("ghost", &first_run("th-scope", "run-1", "hi"), &[("authorization", &every)]).await;
    assert_eq!(answer(run).await.0, 404);
}
on_both_stores!(unknown_and_forbidden_answer_alike);

/// A body past its limit is a 413 with the JSON error body on every route that reads one.
// One store: the body is refused before any store is read.
#[tokio::test]
async fn every_body_limit_refusal_has_the_json_error_body() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let big = format!("{{\"status\":\"resolved\",\"payload\":\"{}\"}}", "x".repeat(70_000));
    for (path, content_type) in [
        ("/v1/interrupts/int_x/decision", "application/json"),
        ("/v1/agui/agents/demo", "application/json"),
        ("/v1/agui/agents/demo/connect", "application/json"),
        ("/v1/auth/token", "application/x-www-form-urlencoded"),
    ] {
        let mut request = app.client.post(app.url(path)).header("content-type", content_type).body(big.clone());
        if path == "/v1/auth/token" {
            request = request.header("authorization", "Bearer agk_x");
        }
        let response = request.send().await.expect("sent");
        if path == "/v1/auth/token" {
            // The app key is checked before the body is read: refused first, as JSON too.
            assert_eq!(response.status(), 401, "{path}");
            assert_eq!(response.headers()["content-type"], "application/json", "{path}");
            continue;
        }
        assert_eq!(response.status(), 413, "{path}");
        assert_eq!(response.headers()["content-type"], "application/json", "{path}");
        let error: Value = response.json().await.expect("error body");
        assert_eq!(error["error"]["code"], "payload_too_large", "{path}");
    }
    // The API document says so, and that a body too slow to arrive is 408.
    let document: Value = app.get_json("/openapi.json").await;
    for path in
        ["/v1/interrupts/{id}/decision", "/v1/agui/agents/{agent}", "/v1/agui/agents/{agent}/connect", "/v1/auth/token"]
    {
        let responses = &document["paths"][path]["post"]["responses"];
        assert!(responses["413"].is_object() && responses["408"].is_object(), "{path}: {responses}");
    }
}

/// A turn quota holds by default: past `quotas.max_concurrent_turns` (256 unless configured) a
/// run is refused with `concurrency_limit`.
// One store: what is checked is the default in the configuration; `quotas::` counts turns on both stores.
#[tokio::test]
async fn a_concurrent_turn_quota_holds_by_default() {
    let config = agui_gateway::config::Config::builtin().expect("builtin");
    let quota = config.tenant("default").map(|t| t.quotas.max_concurrent_turns);
    assert_eq!(quota, Some(Some(256)), "a tenant with no quotas configured is limited");
    // Two running turns against a limit of two, set the way a default is: by leaving
    // `quotas` out, the figure lowered for the test only.
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    for tenant in &mut config.tenants {
        assert_eq!(tenant.quotas.max_concurrent_turns, Some(256));
        tenant.quotas.max_concurrent_turns = Some(2);
    }
    let app = TestApp::start_with(config).await;
    let _one = open_until_waiting(&app, "waiter", &first_run("th-q1", "run-1", "a")).await;
    let _two = open_until_waiting(&app, "waiter", &first_run("th-q2", "run-1", "b")).await;
    let refused = app.run_to_end("waiter", &first_run("th-q3", "run-1", "c")).await;
    assert_eq!(kinds(&refused), ["RUN_ERROR"]);
    assert_eq!(refused[0].data["code"], "concurrency_limit");
}

/// `check-config` and `migrate` print the database URL with every password masked, in the
/// user-info (one with `@` in it too) and in the query.
// One store: the URLs masked are PostgreSQL's (a SQLite URL holds no password).
#[tokio::test]
async fn printed_database_urls_mask_every_password() {
    let run = |args: &[&str], url: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .args(args)
            .env("AGUI_GATEWAY_DATABASE_URL", url)
            .output()
            .expect("runs");
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    };
    let printed = run(&["check-config"], "postgres://postgres:ss@RAW@db.example/gateway?sslpassword=s3cret");
    assert!(printed.contains("config ok"), "{printed}");
    assert!(printed.contains("postgres://postgres:***@db.example/gateway?sslpassword=***"), "{printed}");
    assert!(!printed.contains("RAW") && !printed.contains("s3cret"), "{printed}");
    // A password in the query, on a database that exists (the server trusts the test user).
    let db = TestDatabase::new(Backend::Postgres).await;
    // (Over TLS the URL has a query already: `sslmode`, `sslrootcert`.)
    let joiner = if db.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{joiner}password=hunter2", db.url);
    let printed = run(&["check-config"], &url);
    assert!(printed.contains("config ok") && printed.contains("password=***"), "{printed}");
    assert!(!printed.contains("hunter2"), "{printed}");
    let printed = run(&["migrate", "--database", &url], &url);
    assert!(printed.contains("migrations applied") && printed.contains("password=***"), "{printed}");
    assert!(!printed.contains("hunter2"), "{printed}");
    // And the start line of `serve`.
    let dir = tempfile::tempdir().expect("temp dir");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let instance = Spawn::new(&config_file(&dir), &url).start(logs.clone());
    drop(instance);
    let logs = logs.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
    let start = logs.lines().find(|line| line.contains("agui-gateway listening")).unwrap_or_default();
    assert!(start.contains("password=***"), "{logs}");
    assert!(!logs.contains("hunter2"), "{logs}");
}
