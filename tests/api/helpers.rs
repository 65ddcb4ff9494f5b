//! Test harness: each test gets its own database (a fresh SQLite file, or a fresh database on
//! a real PostgreSQL server) and the real server on a random loopback port, spoken to over
//! real HTTP and SSE.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agui_gateway::config::Config;
use agui_gateway::protocol::sse::SseDecoder;
use agui_gateway::store::{NewTurn, Owner, OwnerKind, RowCounts, StartTurn, Store, TurnRow};
use serde_json::{json, Value};
use tokio::sync::oneshot;

#[path = "../support/pg_server.rs"]
mod pg_server;
#[path = "../support/waiting.rs"]
mod waiting;

pub use waiting::{holds_throughout, wait_for, wait_until};

/// The tests' configuration, merged over the built-in one: the harness's own limits and lease
/// timings, then the agents and tenants shared with the JS client tests
/// (`tests/fixtures/agents.toml`).
pub const TEST_CONFIG: &str = concat!(
    r#"
[limits]
keepalive_secs = 1
max_body_bytes = 65536

[turns]
lease_ms = 1500
heartbeat_ms = 300
sweep_ms = 200
drain_secs = 0
shutdown_grace_secs = 5

"#,
    include_str!("../fixtures/agents.toml")
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database for one test, dropped (Postgres) or deleted (SQLite) with it.
pub struct TestDatabase {
    pub url: String,
    postgres_name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    pub async fn new(backend: Backend) -> TestDatabase {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("gateway.db").display());
                TestDatabase { url, postgres_name: None, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let (server, query) = postgres_server();
                let name = format!("agui_test_{}", uuid::Uuid::new_v4().simple());
                let admin_url = format!("{server}/postgres{query}");
                let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL at {server}: {e}"));
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await
                    .expect("create test database");
                TestDatabase { url: format!("{server}/{name}{query}"), postgres_name: Some(name), _dir: None }
            }
        }
    }
}

/// The variable that runs the PostgreSQL tests over TLS: `AGUI_TEST_POSTGRES_TLS=1` (as
/// `scripts/test` does for one pass of the PostgreSQL half of this suite).
pub const POSTGRES_TLS_VARIABLE: &str = "AGUI_TEST_POSTGRES_TLS";

/// The PostgreSQL server the tests create their databases on, as its base URL and the query
/// each database URL ends with: the shared server, or under [`POSTGRES_TLS_VARIABLE`] the TLS
/// cluster of this process with `sslmode=verify-full`.
fn postgres_server() -> (String, String) {
    if std::env::var(POSTGRES_TLS_VARIABLE).is_ok_and(|v| v == "1") {
        let cluster = tls_cluster();
        (cluster.base.clone(), cluster.verify_full_query())
    } else {
        (pg_server::server_url(), String::new())
    }
}

/// A throwaway PostgreSQL cluster serving TLS with a certificate for `localhost` from a CA
/// made for it, started once per test process and shared.
pub struct TlsCluster {
    /// `postgres://postgres@localhost:<port>`, without a database.
    pub base: String,
    pub port: u16,
    pub ca: crate::tls_support::TestCa,
    _cluster: pg_server::Cluster,
}

impl TlsCluster {
    /// `?sslmode=verify-full&sslrootcert=<the CA>`.
    pub fn verify_full_query(&self) -> String {
        format!("?sslmode=verify-full&sslrootcert={}", self.ca.ca_file().display())
    }
}

pub fn tls_cluster() -> &'static TlsCluster {
    static CLUSTER: std::sync::OnceLock<TlsCluster> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| {
        let ca = crate::tls_support::TestCa::new("postgres");
        let served = ca.server("postgres", &["localhost"]);
        let cluster = pg_server::throwaway_tls_cluster(pg_server::ServerTls {
            cert_file: &served.cert_file,
            key_file: &served.key_file,
        });
        let port: u16 = cluster.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the cluster's port");
        TlsCluster { base: format!("postgres://postgres@localhost:{port}"), port, ca, _cluster: cluster }
    })
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some(name) = self.postgres_name.take() else {
            return;
        };
        let (server, query) = postgres_server();
        // The test's runtime is going away; drop the database from a runtime of our own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&format!("{server}/postgres{query}"))
                    .await
                    .ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.ok()
            })
        })
        .join();
    }
}

/// A running gateway.
pub struct TestApp {
    pub address: SocketAddr,
    /// `https` when the config names a certificate (`tls.cert_file`), else `http`.
    pub scheme: &'static str,
    pub store: Arc<dyn Store>,
    /// The gateway's engine, for what a test must drive by hand (a retention pass).
    pub engine: agui_gateway::engine::Engine,
    pub auth: agui_gateway::auth::Auth,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

pub fn test_config(database_url: &str) -> Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, TEST_CONFIG).expect("write config");
    let mut config = Config::load(Some(&path), std::iter::empty()).expect("test config loads");
    config.database.url = database_url.to_string();
    config
}

impl TestApp {
    pub async fn start(database_url: &str) -> TestApp {
        TestApp::start_with(test_config(database_url)).await
    }

    pub async fn start_with(config: Config) -> TestApp {
        TestApp::start_with_clock(config, agui_gateway::clock::system()).await
    }

    /// A gateway reading the time of day from `clock` (a `TestClock` the test moves by hand).
    pub async fn start_with_clock(config: Config, clock: Arc<dyn agui_gateway::clock::Clock>) -> TestApp {
        crate::test_log::show_when_asked();
        let server = agui_gateway::server::Server::start_with_clock(config, clock).await.expect("gateway starts");
        let scheme = if server.serves_tls() { "https" } else { "http" };
        let store = server.state().engine.store().clone();
        let engine = server.state().engine.clone();
        let auth = server.state().auth.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (shutdown, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = server
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await;
        });
        TestApp {
            address,
            scheme,
            store,
            engine,
            auth,
            client: crate::tls_support::http_client().build().expect("client"),
            shutdown: Some(shutdown),
            server: Some(server),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.address)
    }

    pub fn run_url(&self, agent: &str) -> String {
        self.url(&format!("/v1/agui/agents/{agent}"))
    }

    /// Posts a run with the official client's headers.
    pub async fn post_run(&self, agent: &str, body: &Value) -> reqwest::Response {
        self.post_run_with(agent, body, &[]).await
    }

    pub async fn post_run_with(&self, agent: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.run_url(agent))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("request sent")
    }

    /// Runs to the end and returns every event.
    pub async fn run_to_end(&self, agent: &str, body: &Value) -> Vec<SseEvent> {
        let response = self.post_run(agent, body).await;
        assert_eq!(response.status(), 200, "run answered {}", response.status());
        read_events(response, None).await
    }

    /// `POST path` with a JSON body (no credential), as a client that is no run sends one.
    pub async fn post_json(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        let request = self.client.post(self.url(path)).header("content-type", "application/json").body(body);
        request.send().await.unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// `GET path` (no credential), its body as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let response = self.client.get(self.url(path)).send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
        response.json().await.unwrap_or_else(|e| panic!("GET {path} answered no JSON: {e}"))
    }

    pub async fn counts(&self) -> RowCounts {
        self.store.row_counts().await.expect("row counts")
    }

    /// Waits until every turn of the tenant `default`'s thread `thread_id` has ended (a turn
    /// goes on after the answer that ended its wait, or after its cancel was asked for).
    pub async fn wait_thread_turns_ended(&self, thread_id: &str) {
        wait_until(PATIENCE, &format!("the turns of {thread_id} to end"), || async {
            let thread = self.store.find_thread("default", thread_id).await.expect("query").expect("thread");
            self.store.thread_turns(thread.pk).await.expect("turns").iter().all(|t| t.status.is_finished())
        })
        .await;
    }

    /// A graceful stop as on SIGTERM, by the gateway's own shutdown ([`Server::serve`]): streams
    /// end, turns are handed over, the server drains within `turns.shutdown_grace_secs`.
    ///
    /// [`Server::serve`]: agui_gateway::server::Server::serve
    pub async fn shut_down(mut self) {
        self.ask_to_stop();
        self.stopped().await;
    }

    /// Asks the server to stop, as SIGTERM does, without waiting for it: it drains first
    /// (`turns.drain_secs`).
    pub fn ask_to_stop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Waits until the server asked to stop ([`TestApp::ask_to_stop`]) has stopped.
    pub async fn stopped(mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// Two gateways in this process on one fresh PostgreSQL database, as two instances of one
/// deployment; with the database, dropped after them.
// One store: two instances share one database, which is PostgreSQL's part.
pub async fn two_apps() -> (TestApp, TestApp, TestDatabase) {
    let db = TestDatabase::new(Backend::Postgres).await;
    let a = TestApp::start(&db.url).await;
    let b = TestApp::start(&db.url).await;
    (a, b, db)
}

/// One SSE event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: Value,
}

impl SseEvent {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

/// Reads SSE frames until the stream ends, or until `limit` events arrived (then the
/// connection is dropped, as a client that lost it would).
pub async fn read_events(response: reqwest::Response, limit: Option<usize>) -> Vec<SseEvent> {
    read_frames(response, limit).await.0
}

/// Like [`read_events`], also returning the raw body and the number of keepalive comments.
pub async fn read_frames(response: reqwest::Response, limit: Option<usize>) -> (Vec<SseEvent>, String, usize) {
    let mut stream = EventStream::new(response);
    while limit.is_none_or(|limit| stream.events.len() < limit) {
        if !stream.read_chunk().await {
            break;
        }
    }
    if let Some(limit) = limit {
        stream.events.truncate(limit);
    }
    (stream.events, stream.raw, stream.keepalives)
}

/// A stream being read: a test reads it up to an event ([`EventStream::until`]), acts, and
/// reads the rest ([`EventStream::rest`]) — no guessing how long the server takes to get there.
pub struct EventStream {
    response: reqwest::Response,
    decoder: SseDecoder,
    /// Bytes of a character the last chunk cut, kept for `raw`.
    cut: Vec<u8>,
    pub raw: String,
    pub events: Vec<SseEvent>,
    pub keepalives: usize,
}

impl EventStream {
    pub fn new(response: reqwest::Response) -> EventStream {
        EventStream {
            response,
            decoder: SseDecoder::new(),
            cut: Vec::new(),
            raw: String::new(),
            events: Vec::new(),
            keepalives: 0,
        }
    }

    /// Reads one chunk and the frames it completes; false once the stream ended. A connection
    /// that breaks (an instance killed mid-stream) ends the reading like an EOF.
    pub async fn read_chunk(&mut self) -> bool {
        let Ok(Some(chunk)) = self.response.chunk().await else { return false };
        self.cut.extend_from_slice(&chunk);
        let whole = match std::str::from_utf8(&self.cut) {
            Ok(text) => text.len(),
            Err(error) if error.error_len().is_none() => error.valid_up_to(),
            Err(error) => panic!("the stream is not UTF-8: {error}"),
        };
        let rest = self.cut.split_off(whole);
        self.raw.push_str(std::str::from_utf8(&self.cut).expect("checked above"));
        self.cut = rest;
        for message in self.decoder.push(&chunk) {
            let data: Value = serde_json::from_str(&message.data).expect("event is JSON");
            let id = if message.has_own_id { message.id } else { None };
            self.events.push(SseEvent { id, data });
        }
        self.keepalives = self.decoder.comments();
        true
    }

    /// Reads one chunk of the body as it comes, frames included: `Err` when the body broke.
    pub async fn response_chunk(&mut self) -> reqwest::Result<Option<bytes::Bytes>> {
        let chunk = self.response.chunk().await?;
        if let Some(chunk) = &chunk {
            for message in self.decoder.push(chunk) {
                let data: Value = serde_json::from_str(&message.data).expect("event is JSON");
                let id = if message.has_own_id { message.id } else { None };
                self.events.push(SseEvent { id, data });
            }
        }
        Ok(chunk)
    }

    /// Reads until an event matching `arrived` has come (the stream stays open), failing the
    /// test with `what` when the stream ends first or nothing matches within [`PATIENCE`].
    pub async fn until(&mut self, what: &str, arrived: impl Fn(&SseEvent) -> bool) -> &mut EventStream {
        let mut seen = 0;
        let reading = async {
            loop {
                if self.events[seen..].iter().any(&arrived) {
                    return true;
                }
                seen = self.events.len();
                if !self.read_chunk().await {
                    return false;
                }
            }
        };
        match tokio::time::timeout(PATIENCE, reading).await {
            Ok(true) => self,
            Ok(false) => panic!("the stream ended before {what}: {:?}", kinds(&self.events)),
            Err(_) => panic!("no {what} within {PATIENCE:?}: {:?}", kinds(&self.events)),
        }
    }

    /// Reads until the first `kind` event.
    pub async fn until_kind(&mut self, kind: &str) -> &mut EventStream {
        self.until(kind, |e| e.kind() == kind).await
    }

    /// Reads to the end; every event, those read before included.
    pub async fn rest(self) -> Vec<SseEvent> {
        self.rest_frames().await.0
    }

    /// As [`EventStream::rest`], with the raw body and the number of keepalive comments.
    pub async fn rest_frames(mut self) -> (Vec<SseEvent>, String, usize) {
        while self.read_chunk().await {}
        (self.events, self.raw, self.keepalives)
    }
}

/// Reads `response` until a keepalive comment came, within [`PATIENCE`]: whether one did, and
/// the body read.
pub async fn read_until_keepalive(response: &mut reqwest::Response) -> (bool, String) {
    let mut raw = String::new();
    let keepalive = tokio::time::timeout(PATIENCE, async {
        while !raw.contains("\n\n: keepalive\n\n") {
            match response.chunk().await {
                Ok(Some(chunk)) => raw.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return false,
            }
        }
        true
    })
    .await;
    (keepalive == Ok(true), raw)
}

/// Opens a run of `agent` and reads it until its first answer is whole: a `waiter` run then
/// waits a minute with its stream open (its log stays as it is).
pub async fn open_until_waiting(app: &TestApp, agent: &str, input: &Value) -> EventStream {
    let response = app.post_run(agent, input).await;
    assert_eq!(response.status(), 200, "run answered {}", response.status());
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    stream
}

/// How long a test waits for something the gateway is sure to do before calling it a failure:
/// far above what any step takes, so only a real hang trips it.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// The `delta`s of the `kind` events, joined: a message's text, a call's arguments.
pub fn deltas(events: &[SseEvent], kind: &str) -> String {
    events.iter().filter(|e| e.kind() == kind).filter_map(|e| e.data["delta"].as_str()).collect()
}

/// What the agent said: every `TEXT_MESSAGE_CONTENT` delta, joined.
pub fn text_of(events: &[SseEvent]) -> String {
    deltas(events, "TEXT_MESSAGE_CONTENT")
}

pub fn kinds(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(SseEvent::kind).collect()
}

/// Runs a statement on the test database directly (to set up states no request can reach).
pub async fn execute_sql(database_url: &str, statement: &str) {
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        sqlx::query(statement).execute(&mut connection).await.expect("statement");
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        sqlx::query(statement).execute(&mut connection).await.expect("statement");
    }
}

/// What a crash would have left of every turn's log after its first `keep` events: the rest
/// of each segment cut away (a segment is never rewritten by the gateway; only a test forges
/// one). Run with no gateway on the database.
pub async fn cut_logs_after(database_url: &str, keep: i64) {
    use agui_gateway::store::segments::{decode, segments_of};
    // The segments cut across are read, every one past `keep` deleted, and the kept part of
    // each one cut across written back.
    let read = "SELECT turn, body FROM event_segments WHERE first_seq <= $1 AND last_seq > $1";
    let delete = "DELETE FROM event_segments WHERE last_seq > $1";
    let insert =
        "INSERT INTO event_segments (turn, last_seq, first_seq, events, at_ms, body) VALUES ($1, $2, $3, $4, $5, $6)";
    macro_rules! cut_on {
        ($connection:expr) => {{
            let rows: Vec<(i64, Vec<u8>)> =
                sqlx::query_as(read).bind(keep).fetch_all(&mut $connection).await.expect("segments");
            sqlx::query(delete).bind(keep).execute(&mut $connection).await.expect("delete");
            for (turn, body) in rows {
                let kept: Vec<_> =
                    decode(body.into()).expect("segment").into_iter().filter(|e| e.seq <= keep).collect();
                for segment in segments_of(kept.iter().map(|e| (turn, 0, e))).expect("segment") {
                    sqlx::query(insert)
                        .bind(segment.turn)
                        .bind(segment.last_seq)
                        .bind(segment.first_seq)
                        .bind(segment.events)
                        .bind(segment.at_ms)
                        .bind(segment.body.as_slice())
                        .execute(&mut $connection)
                        .await
                        .expect("insert");
                }
            }
        }};
    }
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        cut_on!(connection);
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        cut_on!(connection);
    }
}

/// Every row of every table of the test database, as text: what a search for a value that
/// must be stored nowhere reads.
pub async fn every_table_as_text(database_url: &str) -> String {
    // `instances` holds each running gateway's lease, renewed by its heartbeat whatever the
    // requests do: liveness, not stored state, so it is left out (a renewal between two reads
    // would otherwise read as a change).
    const LIVENESS: &str = "instances";
    let mut all = String::new();
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        let tables: Vec<String> = sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&mut connection)
            .await
            .expect("tables");
        for table in tables.into_iter().filter(|table| table != LIVENESS) {
            let columns: Vec<String> = sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .fetch_all(&mut connection)
                .await
                .expect("columns");
            // Column by column, as bytes: some columns are blobs that are not UTF-8.
            for column in columns {
                let statement = format!("SELECT CAST(\"{column}\" AS BLOB) FROM \"{table}\"");
                let values: Vec<Option<Vec<u8>>> =
                    sqlx::query_scalar(&statement).fetch_all(&mut connection).await.expect("rows");
                for value in values.into_iter().flatten() {
                    all.push_str(&String::from_utf8_lossy(&value));
                    all.push('\n');
                }
            }
        }
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'")
                .fetch_all(&mut connection)
                .await
                .expect("tables");
        for table in tables.into_iter().filter(|table| table != LIVENESS) {
            // Ordered: an unchanged table reads the same whatever its rows' places on disk.
            let statement =
                format!("SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM \"{table}\" t");
            let rows: String = sqlx::query_scalar(&statement).fetch_one(&mut connection).await.expect("rows");
            all.push_str(&rows);
        }
        // A segment's `body` reads above as hex: its events' JSON is added as text, so a value
        // logged in an event is found too.
        let segments: Vec<Vec<u8>> = sqlx::query_scalar("SELECT body FROM event_segments ORDER BY turn, last_seq")
            .fetch_all(&mut connection)
            .await
            .expect("segments");
        for segment in segments {
            for event in agui_gateway::store::segments::decode(segment.into()).expect("segment") {
                all.push_str(&String::from_utf8_lossy(&event.body));
                all.push('\n');
            }
        }
    }
    all
}

/// A run input with one user message.
pub fn first_run(thread: &str, run: &str, text: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0", "state": {},
        "messages": [{ "id": format!("{run}-user"), "role": "user", "content": text }],
        "tools": [], "context": [], "forwardedProps": {}
    })
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

pub fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The repository's own AG-UI 1.0 probe of a live endpoint, run from `clients_dir()`.
fn checker() -> PathBuf {
    clients_dir().join("agui-check.mjs")
}

/// Runs the official client (with verification and schema validation) against `url` with
/// `input`; returns its report. Fails the test when the packages are not installed.
pub async fn agui_check(url: &str, input: &Value) -> (bool, String) {
    agui_check_with(url, input, &[], &[]).await
}

/// As [`agui_check`], with more checker arguments (`--http2`) and environment variables
/// (`NODE_EXTRA_CA_CERTS`).
pub async fn agui_check_with(
    url: &str,
    input: &Value,
    args: &[&str],
    envs: &[(&str, &std::ffi::OsStr)],
) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input_path = dir.path().join("input.json");
    std::fs::write(&input_path, input.to_string()).expect("write input");
    assert!(
        clients_dir().join("node_modules/@ag-ui/client").exists(),
        "the official client is not installed: run `npm ci --prefix tests/clients`"
    );
    let output = tokio::process::Command::new("node")
        .arg(checker())
        .arg(url)
        .arg("--input")
        .arg(&input_path)
        .arg("--strict")
        .arg("--timeout")
        .arg("30")
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(clients_dir())
        .output()
        .await
        .expect("node runs");
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), report)
}

/// Serves `body` as an SSE response to any POST, so a stream joined from pieces can be put
/// before the official client. Returns the URL.
pub async fn serve_recorded_stream(body: String) -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::post;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let app = axum::Router::new().route(
        "/recorded",
        post(move || {
            let body = body.clone();
            async move { ([("content-type", "text/event-stream")], body) }
        }),
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/recorded"), server)
}

/// Re-frames received events as an SSE body.
pub fn sse_body(events: &[SseEvent]) -> String {
    events
        .iter()
        .map(|e| match &e.id {
            Some(id) => format!("id: {id}\ndata: {}\n\n", e.data),
            None => format!("data: {}\n\n", e.data),
        })
        .collect()
}

/// The machine's time of day, as the gateways the tests start without a test clock read it.
pub fn now_ms() -> i64 {
    agui_gateway::clock::Clock::now_ms(&agui_gateway::clock::SystemClock)
}

/// Generates one test per store from `async fn(Backend)`.
#[macro_export]
macro_rules! on_both_stores {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::helpers::Backend::Sqlite).await
            }

            #[tokio::test]
            async fn postgres() {
                super::$name($crate::helpers::Backend::Postgres).await
            }
        }
    };
}

/// The first turn of `thread` in `tenant` (agent `demo`), its row naming `instance` as its
/// owner, as [`Store::start_turn`] takes it.
pub fn new_turn_of(tenant: &str, thread: &str, instance: &str) -> NewTurn {
    NewTurn {
        tenant: tenant.into(),
        thread_id: thread.into(),
        owner: Owner { kind: OwnerKind::Tenant, id: String::new() },
        run_id: "run-1".into(),
        public_id: unique("t"),
        ordinal: 1,
        agent: "demo".into(),
        user_message_id: "u1".into(),
        user_text: "hi".into(),
        started_by: "test".into(),
        at_ms: 1,
        client_tools: None,
        client_input: None,
        user_parts: None,
        parent: None,
        owner_instance: instance.into(),
        audit: Vec::new(),
        limits: None,
    }
}

/// Starts a turn straight in the store (tenant `default`, agent `demo`), its row naming
/// `instance` as its owner: for tests of the store's own rules (fencing, leases, the log).
pub async fn new_turn(store: &dyn Store, thread: &str, instance: &str) -> TurnRow {
    match store.start_turn(&new_turn_of("default", thread, instance)).await.expect("start") {
        StartTurn::Started { turn, .. } => turn,
        other => panic!("the turn did not start: {other:?}"),
    }
}

/// Starts a test server process that prints `listening <url>` on its first line once ready
/// (the upstream AG-UI servers, the framework servers); returns it with that URL. Its stdin is a
/// pipe, so the server ends when the test process does.
pub fn start_listening(mut command: std::process::Command, what: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} starts: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{what} says where it listens: {e}"));
    let url = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("{what}: unexpected {line}")).to_string();
    (child, url)
}

/// Each text message's id and text, in the order the messages started.
pub fn texts_by_message(events: &[SseEvent]) -> Vec<(String, String)> {
    let mut texts: Vec<(String, String)> = Vec::new();
    for event in events {
        let id = event.data["messageId"].as_str().unwrap_or_default().to_string();
        match event.kind() {
            "TEXT_MESSAGE_START" => texts.push((id, String::new())),
            "TEXT_MESSAGE_CONTENT" => {
                if let Some(text) = texts.iter_mut().find(|(m, _)| *m == id) {
                    text.1.push_str(event.data["delta"].as_str().unwrap_or_default());
                }
            }
            _ => {}
        }
    }
    texts
}
