//! Chaos: three gateway processes on one PostgreSQL cluster of the test's own, 200 concurrent
//! turns of a slow script agent, clients streaming from random instances and reconnecting with
//! `Last-Event-ID` through every drop — while one instance is killed with SIGKILL, started
//! again, and PostgreSQL restarts under them all. The scenario runs on both wake-up buses: the
//! database's notifications, and NATS (a server of the test's own, killed with PostgreSQL's
//! restart and started again after it).
//!
//! Passes when every turn completes and, for every client, the joined stream equals the log
//! exactly (0 missing, 0 duplicated) and passes the official client's verification. The report
//! is printed and written to `target/chaos-report.txt`.

#[path = "support/gateway_process.rs"]
mod gateway_process;
#[path = "support/log_checks.rs"]
mod log_checks;
#[path = "support/nats_server.rs"]
mod nats_server;
#[path = "support/pg_server.rs"]
mod pg_server;
#[path = "support/waiting.rs"]
mod waiting;
#[path = "support/watchdog.rs"]
mod watchdog;

use gateway_process::{Instance, Spawn};

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::Row;

const TURNS: usize = 200;
/// The scenarios share the machine's two cores; run them one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const INSTANCES: usize = 3;

const CHAOS_CONFIG: &str = r#"
[limits]
keepalive_secs = 2
max_streams_per_caller = 1000

[database]
max_connections = 24

[turns]
lease_ms = 3000
heartbeat_ms = 500
sweep_ms = 500
# Shorter than a turn: a SIGTERM's drain ends with turns still running, which are handed over.
drain_secs = 1
shutdown_grace_secs = 5

[[agents]]
name = "chaos"
kind = "script"
chunk_chars = 4
chunk_delay_ms = 50
steps = [
  { say = "The first answer, streamed in small pieces: {input}." },
  { tool = "lookup", args = { q = "{input}" }, result = "a result" },
  { wait_ms = 1500 },
  { say = "A second answer, after the tool, also streamed." },
  { note = "noted {input}", tags = ["chaos"] },
  { wait_ms = 2500 },
  { say = "A third answer, while the database may be restarting." },
  { step = "wrap-up" },
  { say = "Done." },
]
"#;

/// What one client saw of its run, across reconnects.
struct ClientRecord {
    thread: String,
    events: Vec<(String, Value)>,
    reconnects: usize,
    finished: bool,
}

/// A small per-client random sequence (no extra crate for "pick an instance").
fn pick(state: &mut u64, n: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % n as u64) as usize
}

async fn client(index: usize, live: Arc<RwLock<Vec<String>>>, deadline: Instant) -> ClientRecord {
    // A request with no answer within several keepalives is retried like a dropped stream (under
    // CPU starvation an instance can leave one unanswered; nothing may then be lost or doubled).
    // reqwest's rustls has no provider of its own: ring is the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .read_timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let thread = format!("chaos-{index}");
    let input = json!({"threadId": thread, "runId": "run-1", "protocolVersion": "1.0",
        "messages": [{"id": "u1", "role": "user", "content": format!("question {index}")}]});
    let mut random = 0x9E37_79B9_7F4A_7C15_u64 ^ (index as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut record = ClientRecord { thread, events: Vec::new(), reconnects: 0, finished: false };
    let mut buffer = String::new();
    while Instant::now() < deadline {
        let address = {
            let live = live.read().unwrap_or_else(|p| p.into_inner());
            live[pick(&mut random, live.len())].clone()
        };
        let mut request = http
            .post(format!("http://{address}/v1/agui/agents/chaos"))
            .header("content-type", "application/json")
            .body(input.to_string());
        if let Some((id, _)) = record.events.last() {
            request = request.header("last-event-id", id.as_str());
        }
        let mut response = match request.send().await {
            Ok(response) if response.status() == 200 => response,
            _ => {
                tokio::time::sleep(waiting::POLL).await;
                continue;
            }
        };
        buffer.clear();
        // A run that never ends must not hold its client past the deadline.
        while Instant::now() < deadline {
            // A stream silent for longer than several keepalives is dead: reconnect.
            let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await;
            match chunk.unwrap_or(Ok(None)) {
                Ok(Some(chunk)) => {
                    buffer.push_str(&String::from_utf8_lossy(&chunk));
                    for (id, value) in take_events(&mut buffer) {
                        let terminal = is_terminal(&value);
                        record.events.push((id, value));
                        if terminal {
                            record.finished = true;
                            return record;
                        }
                    }
                }
                _ => break,
            }
        }
        record.reconnects += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    record
}

/// The events whose frames `buffer` holds whole, taken out of it (a frame cut by the chunk's
/// end stays for the next chunk): each one's `id:` and its `data:` as JSON.
fn take_events(buffer: &mut String) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let frame: String = buffer.drain(..end + 2).collect();
        let id = frame.lines().find_map(|l| l.strip_prefix("id: ")).map(str::to_string);
        let data = frame.lines().find_map(|l| l.strip_prefix("data: "));
        if let (Some(id), Some(data)) = (id, data) {
            events.push((id, serde_json::from_str(data).expect("JSON event")));
        }
    }
    events
}

/// Whether an event ends its run.
fn is_terminal(event: &Value) -> bool {
    matches!(event["type"].as_str(), Some("RUN_FINISHED" | "RUN_ERROR"))
}

/// Puts the recorded streams in `streams_path` before the official client
/// (`tests/clients/verify-recorded.mjs`), writing what it held at the end of each to `held`
/// when given.
fn verify_recorded(streams_path: &std::path::Path, held: Option<&std::path::Path>) -> std::process::Output {
    let clients_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let mut node = Command::new("node");
    node.arg(clients_dir.join("verify-recorded.mjs")).arg(streams_path);
    if let Some(held) = held {
        node.arg(held);
    }
    node.current_dir(&clients_dir).output().expect("node runs")
}

/// A fresh database `name` on the PostgreSQL server at `server` (dropped first if a run before
/// left it), with the admin connection that made it (which drops it at the end); its URL.
async fn fresh_database(server: &str, name: &str) -> (sqlx::PgConnection, String) {
    let mut admin =
        <sqlx::PgConnection as sqlx::Connection>::connect(&format!("{server}/postgres")).await.expect("admin");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create");
    (admin, format!("{server}/{name}"))
}

/// What the log says of the clients' streams.
struct Judged {
    completed: usize,
    log_events: usize,
    received: usize,
    missing: usize,
    duplicated: usize,
    mismatched: usize,
    repeated_tools: usize,
    /// Turns whose log breaks the sealing rules (see `log_checks`), with why.
    unsealed: Vec<String>,
    verdict_ok: bool,
    verdict_text: String,
}

/// Compares every client's joined stream with its turn's log, and puts them all before the
/// official client.
async fn judge(records: &[ClientRecord], database: &str, dir: &std::path::Path) -> Judged {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(database).await.expect("pool");
    let (mut completed, mut log_events, mut received, mut missing, mut duplicated, mut mismatched) = (0, 0, 0, 0, 0, 0);
    let mut repeated_tools = 0;
    let mut unsealed = Vec::new();
    let mut streams = Vec::new();
    for record in records {
        let turn =
            sqlx::query("SELECT t.id, t.status FROM turns t JOIN threads h ON h.id = t.thread WHERE h.thread_id = $1")
                .bind(&record.thread)
                .fetch_one(&pool)
                .await
                .expect("turn");
        let (turn_pk, status): (i64, String) = (turn.get("id"), turn.get("status"));
        if status == "succeeded" {
            completed += 1;
        }
        let log = log_checks::stored_log(&pool, turn_pk).await;
        log_events += log.len();
        let kinds: Vec<(i64, i16)> = log.iter().map(|(seq, kind, _)| (*seq, *kind)).collect();
        if let Some(why) = log_checks::seal_violation(&kinds, status != "running" && status != "waiting") {
            unsealed.push(format!("turn {turn_pk} ({status}): {why}"));
        }
        if status != "succeeded" {
            let end = log.last().map_or("", |(_, _, body)| body.as_str());
            eprintln!("turn {turn_pk} of {} is {status}; its log ends with {end}", record.thread);
        }
        let tool_calls = log.iter().filter(|(_, _, body)| body.contains("\"type\":\"TOOL_CALL_START\"")).count();
        repeated_tools += tool_calls.saturating_sub(1);
        received += record.events.len();
        let seqs: Vec<i64> = record
            .events
            .iter()
            .map(|(id, _)| id.rsplit('.').next().and_then(|s| s.parse().ok()).unwrap_or(-1))
            .collect();
        let unique: HashSet<i64> = seqs.iter().copied().collect();
        duplicated += seqs.len() - unique.len();
        missing += log.iter().filter(|(seq, _, _)| !unique.contains(seq)).count();
        for ((seq, kind, body), (_, data)) in log.iter().zip(&record.events) {
            let stored: Value = serde_json::from_str(body).expect("stored JSON");
            // Run-boundary events carry the run's ids; a cut answer's withdrawal is sent as the
            // conversation without it (§4.6); the rest are sent exactly as stored.
            let withdrawal = stored["name"] == "gateway.cut" && data["type"] == "MESSAGES_SNAPSHOT";
            if *kind != 1 && *kind != 2 && !withdrawal && stored != *data {
                mismatched += 1;
                eprintln!("turn {turn_pk} seq {seq}: sent {data} but logged {stored}");
            }
        }
        let body: String = record.events.iter().map(|(id, data)| format!("id: {id}\ndata: {data}\n\n")).collect();
        streams.push(json!({
            "name": record.thread,
            "input": {"threadId": record.thread, "runId": "run-1", "messages": [{"id": "u1", "role": "user", "content": "q"}]},
            "body": body,
        }));
    }
    let streams_path = dir.join("streams.json");
    std::fs::write(&streams_path, Value::Array(streams).to_string()).expect("streams");
    let verdict = verify_recorded(&streams_path, None);
    let verdict_text = String::from_utf8_lossy(&verdict.stdout).to_string();
    if !verdict.status.success() {
        // Kept for a look at what the official client refused (the temp dir goes with the test).
        let kept = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/chaos-refused-streams.json");
        let _ = std::fs::copy(&streams_path, kept);
    }
    pool.close().await;
    Judged {
        completed,
        log_events,
        received,
        missing,
        duplicated,
        mismatched,
        repeated_tools,
        unsealed,
        verdict_ok: verdict.status.success(),
        verdict_text,
    }
}

/// The wake-up bus the instances of a scenario share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bus {
    Postgres,
    Nats,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_when_instances_die_and_the_database_restarts() {
    instances_die_and_the_database_restarts(Bus::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_when_instances_die_and_the_database_and_nats_restart() {
    instances_die_and_the_database_restarts(Bus::Nats).await
}

async fn instances_die_and_the_database_restarts(bus: Bus) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = pg_server::throwaway_cluster();
    let mut nats = (bus == Bus::Nats).then(nats_server::NatsServer::start);
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&format!("{}/postgres", cluster.url))
        .await
        .expect("admin connection");
    sqlx::query("CREATE DATABASE chaos").execute(&mut admin).await.expect("create database");
    let database = format!("{}/chaos", cluster.url);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chaos.toml");
    let bus_section = match &nats {
        Some(nats) => {
            format!("\n[bus]\nkind = \"nats\"\nnats_url = \"{}\"\nnats_subject_prefix = \"chaos\"\n", nats.url)
        }
        None => String::new(),
    };
    std::fs::write(&config, format!("{CHAOS_CONFIG}{bus_section}")).expect("config");
    gateway_process::migrate(&database);

    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut instances: Vec<Instance> =
        (0..INSTANCES).map(|_| Spawn::new(&config, &database).start(logs.clone())).collect();
    let live = Arc::new(RwLock::new(instances.iter().map(|i| i.address.clone()).collect::<Vec<_>>()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let clients: Vec<_> = (0..TURNS).map(|index| tokio::spawn(client(index, live.clone(), deadline))).collect();

    // Kill one instance mid-run, the way an orchestrator's SIGKILL does: once every turn has
    // started and the victim runs some of them.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&database).await.expect("pool");
    let victim = instances.remove(0);
    waiting::wait_until(Duration::from_secs(60), "every turn started, some on the victim", || async {
        let row = sqlx::query(
            "SELECT COUNT(*) AS started, COUNT(*) FILTER (WHERE owner_instance = $1 AND status = 'running') AS victims \
             FROM turns",
        )
        .bind(&victim.id)
        .fetch_one(&pool)
        .await;
        row.is_ok_and(|r| r.get::<i64, _>("started") >= TURNS as i64 && r.get::<i64, _>("victims") > 0)
    })
    .await;
    let owned_by_victim: i64 =
        sqlx::query("SELECT COUNT(*) AS n FROM turns WHERE owner_instance = $1 AND status = 'running'")
            .bind(&victim.id)
            .fetch_one(&pool)
            .await
            .expect("count")
            .get("n");
    let mut victim = victim;
    victim.child.kill().expect("SIGKILL");
    let _ = victim.child.wait();
    let killed_at = Instant::now();
    live.write().unwrap_or_else(|p| p.into_inner()).retain(|a| *a != victim.address);

    // Takeover: every turn the dead instance held is owned by a live one again.
    let mut takeover = None;
    while killed_at.elapsed() < Duration::from_secs(20) {
        let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM turns WHERE owner_instance = $1 AND status = 'running'")
            .bind(&victim.id)
            .fetch_one(&pool)
            .await
            .map(|r| r.get("n"))
            .unwrap_or(1);
        if left == 0 {
            takeover = Some(killed_at.elapsed());
            break;
        }
        tokio::time::sleep(waiting::POLL).await;
    }
    pool.close().await;

    // Start it again; then restart PostgreSQL under everyone.
    let restarted = Spawn::new(&config, &database).start(logs.clone());
    live.write().unwrap_or_else(|p| p.into_inner()).push(restarted.address.clone());
    let ready = format!("http://{}/readyz", restarted.address);
    instances.push(restarted);
    waiting::wait_until(Duration::from_secs(30), "the restarted instance to be ready", || {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let answer = reqwest::get(ready.clone());
        async move { answer.await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    let restart_started = Instant::now();
    // NATS goes away with PostgreSQL and comes back after it: every message meanwhile is lost.
    if let Some(nats) = &mut nats {
        nats.kill();
    }
    tokio::task::spawn_blocking(move || cluster.restart()).await.expect("restart");
    if let Some(nats) = &mut nats {
        nats.start_again();
    }
    let db_restart = restart_started.elapsed();

    // A client past its deadline is a hang: fail with what the instances logged.
    let mut records = Vec::new();
    let collected =
        tokio::time::timeout_at(tokio::time::Instant::from_std(deadline + Duration::from_secs(30)), async {
            for handle in clients {
                records.push(handle.await.expect("client task"));
            }
        })
        .await;
    if collected.is_err() || std::env::var_os("CHAOS_DUMP_LOGS").is_some() {
        let lines = logs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let dump = std::env::temp_dir().join("chaos-instance-logs.txt");
        let _ = std::fs::write(&dump, lines.join("\n"));
        assert!(
            collected.is_ok(),
            "clients still waiting 30 s after their deadline; instance logs in {}",
            dump.display()
        );
    }
    let all_done = started.elapsed();

    let judged = judge(&records, &database, dir.path()).await;
    let reconnects: usize = records.iter().map(|r| r.reconnects).sum();
    let mut report = BTreeMap::new();
    report.insert("01 turns started", TURNS.to_string());
    report.insert("02 turns completed", judged.completed.to_string());
    report.insert("03 clients that saw their run end", records.iter().filter(|r| r.finished).count().to_string());
    report.insert("04 events in the log", judged.log_events.to_string());
    report.insert("05 events the clients received", judged.received.to_string());
    report.insert("06 missing", judged.missing.to_string());
    report.insert("07 duplicated", judged.duplicated.to_string());
    report.insert("08 sent differently than logged", judged.mismatched.to_string());
    report.insert("09 reconnects", reconnects.to_string());
    report.insert("09b tool calls run twice", judged.repeated_tools.to_string());
    report.insert("09c turns whose log is not sealed by one end", judged.unsealed.len().to_string());
    report.insert("10 turns held by the killed instance", owned_by_victim.to_string());
    report.insert("11 takeover time after SIGKILL", format!("{:?}", takeover));
    report.insert("00 wake-up bus", format!("{bus:?}"));
    report.insert("12 PostgreSQL restart took", format!("{db_restart:?}"));
    report.insert("13 all clients done after", format!("{all_done:?}"));
    report.insert("14 official client", judged.verdict_text.lines().last().unwrap_or("").to_string());
    let text: String =
        report.iter().map(|(k, v)| format!("{:<42} {v}\n", k.split_once(' ').map_or(*k, |x| x.1))).collect();
    println!("chaos report\n{text}");
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let report_file = match bus {
        Bus::Postgres => "chaos-report.txt",
        Bus::Nats => "chaos-report-nats.txt",
    };
    let _ = std::fs::write(target.join(report_file), &text);

    for mut instance in instances {
        let _ = instance.child.kill();
        let _ = instance.child.wait();
    }
    let failures = judged
        .verdict_text
        .lines()
        .filter(|l| l.starts_with("FAIL") || l.starts_with("WARN"))
        .take(8)
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(judged.completed, TURNS, "every turn completes\n{text}");
    assert!(records.iter().all(|r| r.finished), "every client saw its run end\n{text}");
    assert_eq!(
        (judged.missing, judged.duplicated, judged.mismatched),
        (0, 0, 0),
        "the joined streams are the log\n{text}"
    );
    assert!(owned_by_victim > 0, "the killed instance held turns\n{text}");
    assert!(takeover.is_some(), "its turns were taken over\n{text}");
    assert_eq!(judged.repeated_tools, 0, "no tool call ran twice\n{text}");
    assert!(
        judged.unsealed.is_empty(),
        "every turn's log ends once, with nothing after: {:?}\n{text}",
        judged.unsealed
    );
    assert!(judged.verdict_ok, "the official client accepts every joined stream\n{failures}\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_open_streams_and_turns_to_another_instance() {
    const STREAMS: usize = 100;
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = pg_server::server_url();
    let name = format!("agui_sigterm_{}", std::process::id());
    let (mut admin, database) = fresh_database(&server, &name).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("chaos.toml");
    std::fs::write(&config, CHAOS_CONFIG).expect("config");
    gateway_process::migrate(&database);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut stopping = Spawn::new(&config, &database).start(logs.clone());
    let mut staying = Spawn::new(&config, &database).start(logs.clone());

    // Every client starts on the instance that will stop.
    let live = Arc::new(RwLock::new(vec![stopping.address.clone()]));
    let deadline = Instant::now() + Duration::from_secs(90);
    let clients: Vec<_> = (0..STREAMS).map(|i| tokio::spawn(client(1000 + i, live.clone(), deadline))).collect();
    // Signal once every client's turn runs on the instance that will stop.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&database).await.expect("pool");
    waiting::wait_until(Duration::from_secs(60), "every turn running on the stopping instance", || async {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM turns WHERE owner_instance = $1 AND status = 'running'")
            .bind(&stopping.id)
            .fetch_one(&pool)
            .await;
        row.is_ok_and(|r| r.get::<i64, _>("n") >= STREAMS as i64)
    })
    .await;
    pool.close().await;
    *live.write().unwrap_or_else(|p| p.into_inner()) = vec![staying.address.clone()];
    let signalled = Instant::now();
    let status = Command::new("kill").arg("-TERM").arg(stopping.child.id().to_string()).status().expect("kill");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || stopping.child.wait()).await.expect("wait").expect("exit status");
    let stopped_in = signalled.elapsed();

    let mut records = Vec::new();
    for handle in clients {
        records.push(handle.await.expect("client task"));
    }
    let judged = judge(&records, &database, dir.path()).await;
    let reconnects: usize = records.iter().map(|r| r.reconnects).sum();
    let _ = staying.child.kill();
    let _ = staying.child.wait();
    let report = format!(
        "sigterm report\nexit {exit} after {stopped_in:?}\nturns completed {}/{STREAMS}\nreconnects {reconnects}\n\
         missing {} duplicated {} mismatched {} repeated tools {}\nunsealed logs {:?}\n{}",
        judged.completed,
        judged.missing,
        judged.duplicated,
        judged.mismatched,
        judged.repeated_tools,
        judged.unsealed,
        judged.verdict_text.lines().last().unwrap_or("")
    );
    // What the stopping instance said about its shutdown (a slow exit names what it waited for).
    let shutdown: Vec<String> = logs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains("grace") || l.contains("shutting down") || l.contains("stopped"))
        .cloned()
        .collect();
    let report = format!("{report}\n{}", shutdown.join("\n"));
    println!("{report}");
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await;
    assert!(exit.success(), "a clean exit\n{report}");
    assert!(stopped_in < Duration::from_secs(1 + 5), "exits within its drain and grace periods\n{report}");
    assert!(reconnects >= STREAMS, "every client was moved\n{report}");
    assert_eq!(judged.completed, STREAMS, "{report}");
    assert!(records.iter().all(|r| r.finished), "{report}");
    assert_eq!((judged.missing, judged.duplicated, judged.mismatched, judged.repeated_tools), (0, 0, 0, 0), "{report}");
    assert!(judged.unsealed.is_empty(), "{report}");
    assert!(judged.verdict_ok, "{report}\n{}", judged.verdict_text);
}

/// Words in each answer of the rolling-restart scenarios' model, and the pause between two: an
/// answer takes two seconds, well inside their drain period.
const ROLLING_WORDS: usize = 20;
const ROLLING_GAP: Duration = Duration::from_millis(100);
/// Chats open at once, and the answers each asks for one after another.
const CHATS: usize = 50;
const ANSWERS_PER_CHAT: usize = 3;

/// The rolling scenarios' gateway: an `openai` agent on the scripted model at `model`.
fn rolling_config(model: &str) -> String {
    format!(
        r#"
[limits]
keepalive_secs = 2
max_streams_per_caller = 1000

[database]
max_connections = 24

[turns]
lease_ms = 3000
heartbeat_ms = 500
sweep_ms = 300
drain_secs = 15
shutdown_grace_secs = 5

[[agents]]
name = "chat"
kind = "openai"
base_url = "{model}"
model = "scripted"
"#
    )
}

/// The whole answer the scripted model gives.
fn whole_answer() -> String {
    (1..=ROLLING_WORDS).map(|word| format!("w{word} ")).collect()
}

/// An OpenAI-compatible model that answers every request with [`whole_answer`], a word every
/// [`ROLLING_GAP`], counting its requests and the answers its caller closed before the end.
async fn slow_model() -> (String, Arc<std::sync::atomic::AtomicUsize>, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Cut(Arc<AtomicUsize>, bool);
    impl Drop for Cut {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    let (calls, cut): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
    let (counted, cuts) = (calls.clone(), cut.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let cuts = cuts.clone();
            let body = async_stream::stream! {
                let mut guard = Cut(cuts, false);
                for word in 1..=ROLLING_WORDS {
                    if word > 1 {
                        tokio::time::sleep(ROLLING_GAP).await;
                    }
                    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "scripted",
                        "choices": [{"index": 0, "delta": {"content": format!("w{word} ")}, "finish_reason": null}]});
                    yield Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n"));
                }
                yield Ok("data: [DONE]\n\n".to_string());
                guard.1 = true;
            };
            async move { ([("content-type", "text/event-stream")], axum::body::Body::from_stream(body)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/v1"), calls, cut)
}

/// One address in front of the instances, as a load balancer: each new connection goes to an
/// instance whose `readyz` answered 200 at the last look (every 100 ms) and stays with it; an
/// open stream on a draining instance stays open.
struct Balancer {
    address: String,
    backends: Arc<RwLock<Vec<String>>>,
}

impl Balancer {
    async fn start(backends: Vec<String>) -> Balancer {
        let backends = Arc::new(RwLock::new(backends));
        let healthy: Arc<RwLock<Vec<String>>> = Arc::new(RwLock::new(Vec::new()));
        let (watched, shown) = (backends.clone(), healthy.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().expect("client");
            loop {
                let all = watched.read().unwrap_or_else(|p| p.into_inner()).clone();
                let mut ready = Vec::new();
                for backend in all {
                    let answer = http.get(format!("http://{backend}/readyz")).send().await;
                    if answer.is_ok_and(|a| a.status() == 200) {
                        ready.push(backend);
                    }
                }
                *shown.write().unwrap_or_else(|p| p.into_inner()) = ready;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let mut next = 0usize;
            while let Ok((mut inbound, _)) = listener.accept().await {
                next += 1;
                let healthy = healthy.clone();
                tokio::spawn(async move {
                    // No healthy instance for a moment (both restarting): wait, as a balancer
                    // holds a connection in its queue.
                    for _ in 0..100 {
                        let target = {
                            let ready = healthy.read().unwrap_or_else(|p| p.into_inner());
                            (!ready.is_empty()).then(|| ready[next % ready.len()].clone())
                        };
                        if let Some(target) = target {
                            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                                return;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
            }
        });
        Balancer { address, backends }
    }

    /// Puts `new` where `old` was among the instances it looks at.
    fn replace(&self, old: &str, new: &str) {
        let mut backends = self.backends.write().unwrap_or_else(|p| p.into_inner());
        backends.retain(|b| b != old);
        backends.push(new.to_string());
    }
}

/// What one chat saw: per answer, the run's input and the events it received, joined across
/// reconnects.
struct Chat {
    thread: String,
    runs: Vec<(Value, Vec<(String, Value)>)>,
    reconnects: usize,
}

/// One person chatting through the balancer: [`ANSWERS_PER_CHAT`] messages one after another,
/// each sent with the thread's history as the gateway gives it, each stream resumed with
/// `Last-Event-ID` through every drop until its run ends.
async fn chat(index: usize, balancer: String, deadline: Instant) -> Chat {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .read_timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let thread = format!("rolling-{index}");
    let mut record = Chat { thread: thread.clone(), runs: Vec::new(), reconnects: 0 };
    for answer in 1..=ANSWERS_PER_CHAT {
        let history = loop {
            let got = http.get(format!("http://{balancer}/v1/threads/{thread}/messages")).send().await;
            match got {
                Ok(response) if response.status() == 200 => {
                    if let Ok(body) = response.json::<Value>().await {
                        break body["messages"].as_array().cloned().unwrap_or_default();
                    }
                }
                // The thread's first message: no thread yet (refused like a thread of another's).
                Ok(response) if answer == 1 && [403, 404].contains(&response.status().as_u16()) => break Vec::new(),
                _ => {}
            }
            assert!(Instant::now() < deadline, "{thread}: the history could not be read");
            tokio::time::sleep(waiting::POLL).await;
        };
        let mut messages = history;
        messages.push(json!({"id": format!("u{answer}"), "role": "user", "content": format!("message {answer}")}));
        let input = json!({"threadId": thread, "runId": format!("run-{answer}"), "protocolVersion": "1.0",
                           "state": {}, "messages": messages, "tools": [], "context": []});
        let mut events: Vec<(String, Value)> = Vec::new();
        let mut buffer = String::new();
        'run: while Instant::now() < deadline {
            let mut request = http
                .post(format!("http://{balancer}/v1/agui/agents/chat"))
                .header("content-type", "application/json")
                .body(input.to_string());
            if let Some((id, _)) = events.last() {
                request = request.header("last-event-id", id.as_str());
            }
            if let Ok(mut response) = request.send().await {
                if response.status() == 200 {
                    buffer.clear();
                    while let Ok(Ok(Some(chunk))) =
                        tokio::time::timeout(Duration::from_secs(10), response.chunk()).await
                    {
                        buffer.push_str(&String::from_utf8_lossy(&chunk));
                        for (id, value) in take_events(&mut buffer) {
                            let terminal = is_terminal(&value);
                            events.push((id, value));
                            if terminal {
                                break 'run;
                            }
                        }
                    }
                }
            }
            record.reconnects += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        record.runs.push((input, events));
    }
    record
}

/// How an instance leaves in a rolling scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    /// SIGTERM: a deploy (it drains).
    Deploy,
    /// SIGKILL: a crash (its turns are taken over).
    Crash,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_under_open_chats_leaves_every_answer_whole_once() {
    rolling_restart(Leaving::Deploy).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_crashing_one_after_another_under_open_chats_leave_every_answer_whole_once() {
    rolling_restart(Leaving::Crash).await
}

/// Two instances behind one address, 50 chats of an `openai` agent streaming slowly; each
/// instance in turn leaves (SIGTERM or SIGKILL) while answers stream and is started again.
/// Every conversation then holds every answer exactly once, whole — in the gateway's record, in
/// what the official client ends up holding for each run, and in what the model was given — and
/// each run's joined stream has no gap and no duplicate. On a deploy no answer is cut at all.
async fn rolling_restart(leaving: Leaving) {
    let _alone = ONE_AT_A_TIME.lock().await;
    // reqwest's rustls has no provider of its own: ring is the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = pg_server::server_url();
    let name = format!("agui_rolling_{}_{}", std::process::id(), leaving == Leaving::Crash);
    let (mut admin, database) = fresh_database(&server, &name).await;
    let (model, model_calls, model_cuts) = slow_model().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("rolling.toml");
    std::fs::write(&config, rolling_config(&model)).expect("config");
    gateway_process::migrate(&database);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut instances: Vec<Instance> = (0..2).map(|_| Spawn::new(&config, &database).start(logs.clone())).collect();
    let balancer = Balancer::start(instances.iter().map(|i| i.address.clone()).collect()).await;
    // Give the balancer its first look at the instances.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + Duration::from_secs(150);
    let chats: Vec<_> = (0..CHATS).map(|i| tokio::spawn(chat(i, balancer.address.clone(), deadline))).collect();

    for place in 0..2 {
        // Leave while answers stream: once the model is busy with this round's answers.
        let busy_from = model_calls.load(std::sync::atomic::Ordering::SeqCst) + CHATS / 2;
        let waited = Instant::now();
        while model_calls.load(std::sync::atomic::Ordering::SeqCst) < busy_from {
            if waited.elapsed() > Duration::from_secs(60) {
                let logs = logs.lock().unwrap_or_else(|p| p.into_inner());
                let tail: Vec<&String> = logs.iter().rev().take(20).collect();
                panic!("no answers streaming within 60 s; the instances' last lines: {tail:#?}");
            }
            tokio::time::sleep(waiting::POLL).await;
        }
        let mut old = instances.remove(place);
        let old_address = old.address.clone();
        match leaving {
            Leaving::Deploy => {
                let status = Command::new("kill").arg("-TERM").arg(old.child.id().to_string()).status().expect("kill");
                assert!(status.success());
            }
            Leaving::Crash => old.child.kill().expect("SIGKILL"),
        }
        let exit = tokio::task::spawn_blocking(move || old.child.wait()).await.expect("wait").expect("exit status");
        if leaving == Leaving::Deploy {
            assert!(exit.success(), "a deploy's instance exits cleanly: {exit}");
        }
        let new = Spawn::new(&config, &database).start(logs.clone());
        balancer.replace(&old_address, &new.address);
        instances.insert(place, new);
    }

    let mut records = Vec::new();
    for handle in chats {
        records.push(handle.await.expect("chat task"));
    }
    // The judges: the gateway's record, the official client's view of every run, the model.
    let whole = whole_answer();
    let http = reqwest::Client::new();
    let mut problems = Vec::new();
    let mut streams = Vec::new();
    for record in &records {
        let url = format!("http://{}/v1/threads/{}/messages", instances[0].address, record.thread);
        let messages: Value = http.get(url).send().await.expect("get").json().await.expect("JSON");
        let answers = assistant_words(messages["messages"].as_array().map_or(&[][..], Vec::as_slice));
        if answers != vec![whole.clone(); ANSWERS_PER_CHAT] {
            problems.push(format!("{}: the thread holds {answers:?}", record.thread));
            // What its turns' logs say, for the report: each event's type, name and ids.
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&database).await.expect("pool");
            let turns: Vec<i64> = sqlx::query_scalar(
                "SELECT t.id FROM turns t JOIN threads h ON h.id = t.thread WHERE h.thread_id = $1 ORDER BY t.id",
            )
            .bind(&record.thread)
            .fetch_all(&pool)
            .await
            .expect("turns");
            for turn in turns {
                let log = log_checks::stored_log(&pool, turn).await;
                let told: Vec<String> = log
                    .iter()
                    .filter_map(|(seq, _, body)| {
                        let event: Value = serde_json::from_str(body).ok()?;
                        (event["type"] != "TEXT_MESSAGE_CONTENT").then(|| {
                            format!(
                                "{seq}:{}{}",
                                event["type"].as_str().unwrap_or(""),
                                event["name"].as_str().map(|n| format!("({n} {})", event["value"])).unwrap_or_default()
                            )
                        })
                    })
                    .collect();
                problems.push(format!("  turn {turn}: {}", told.join(" ")));
            }
            pool.close().await;
        }
        for (input, events) in &record.runs {
            let run = format!("{}/{}", record.thread, input["runId"].as_str().unwrap_or(""));
            // An id is `<turn>.<seq>`, or `<turn>.<seq>.<part>` for the parts one logged event
            // is sent as (a run's opening with its conversation): one logged event each, in order.
            let mut seqs: Vec<i64> =
                events.iter().map(|(id, _)| id.split('.').nth(1).and_then(|s| s.parse().ok()).unwrap_or(-1)).collect();
            let parts = events.iter().filter(|(id, _)| id.split('.').nth(2).is_some_and(|part| part != "0")).count();
            seqs.dedup();
            if seqs != (1..=seqs.len() as i64).collect::<Vec<_>>() || events.len() != seqs.len() + parts {
                problems.push(format!("{run}: a gap or a duplicate in {seqs:?}"));
            }
            if events.last().map(|(_, e)| e["outcome"]["type"].clone()) != Some(json!("success")) {
                problems.push(format!("{run}: did not succeed: {:?}", events.last()));
            }
            let body: String = events.iter().map(|(id, data)| format!("id: {id}\ndata: {data}\n\n")).collect();
            streams.push(json!({ "name": run, "input": input, "body": body }));
        }
    }
    let streams_path = dir.path().join("streams.json");
    let held_path = dir.path().join("held.json");
    std::fs::write(&streams_path, Value::Array(streams).to_string()).expect("streams");
    let verdict = verify_recorded(&streams_path, Some(&held_path));
    let verdict_text = String::from_utf8_lossy(&verdict.stdout).to_string();
    let held: BTreeMap<String, Vec<Value>> =
        serde_json::from_str(&std::fs::read_to_string(&held_path).expect("held")).expect("held JSON");
    for (run, messages) in &held {
        let answer: usize = run.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let answers = assistant_words(messages);
        if answers != vec![whole.clone(); answer] {
            problems.push(format!("{run}: the official client ends holding {answers:?}"));
        }
    }
    let reconnects: usize = records.iter().map(|r| r.reconnects).sum();
    let (calls, cuts) =
        (model_calls.load(std::sync::atomic::Ordering::SeqCst), model_cuts.load(std::sync::atomic::Ordering::SeqCst));
    for instance in &mut instances {
        let _ = instance.child.kill();
        let _ = instance.child.wait();
    }
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await;
    let report = format!(
        "rolling report ({leaving:?})\nchats {CHATS} × {ANSWERS_PER_CHAT} answers\nmodel calls {calls}, answers cut {cuts}\n\
         reconnects {reconnects}\nproblems {}\n{}\n{}",
        problems.len(),
        problems.iter().take(24).cloned().collect::<Vec<_>>().join("\n"),
        verdict_text.lines().last().unwrap_or("")
    );
    println!("{report}");
    assert!(problems.is_empty(), "{report}");
    assert!(verdict.status.success(), "{report}\n{verdict_text}");
    match leaving {
        // A deploy cuts no answer that ends within the drain: each is asked for once.
        Leaving::Deploy => assert_eq!((calls, cuts), (CHATS * ANSWERS_PER_CHAT, 0), "{report}"),
        // A crash cuts answers, which are asked for again.
        Leaving::Crash => assert!(calls > CHATS * ANSWERS_PER_CHAT, "{report}"),
    }
}

/// The words of the assistant messages in `messages` (a conversation, or a client's view).
fn assistant_words(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().filter(|c| !c.is_empty()).map(str::to_string))
        .collect()
}
