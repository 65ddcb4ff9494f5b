//! Fencing: a runner's writes carry the turn's ownership epoch and the store refuses them, in
//! the committing transaction, once another runner claimed the turn or the turn ended. Shown
//! twice on both stores: step by step against the store (each interleaving exactly), and with
//! real gateway processes, one paused (SIGSTOP) past its lease while another takes the turn
//! over, then woken.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agui_gateway::store::{
    self, AuditEntry, Decided, DecisionRound, EventKind, Store, StoredEvent, TurnRow, TurnStatus, TurnWrites, WriteOp,
};
use bytes::Bytes;
use serde_json::json;

use crate::gateway_process::{self, Spawn};
use crate::helpers::*;
use crate::log_checks::seal_violation;

async fn open_store(db: &TestDatabase) -> Arc<dyn Store> {
    let store = store::connect(&db.url, 4).await.expect("store opens");
    store.migrate().await.expect("migrations");
    store
}

fn event(turn: i64, seq: i64, kind: EventKind) -> WriteOp {
    let body = json!({ "type": "CUSTOM", "name": "n", "value": seq }).to_string();
    WriteOp::Event { turn, event: StoredEvent { seq, kind, body: Bytes::from(body), at_ms: seq } }
}

fn writes(turn: &TurnRow, epoch: i64, ops: Vec<WriteOp>) -> TurnWrites {
    TurnWrites { turn: turn.pk, epoch, ops }
}

async fn log_of(store: &dyn Store, turn: i64) -> Vec<(i64, i16)> {
    store.events_after(turn, 0, 1000).await.expect("log").iter().map(|e| (e.seq, e.kind as i16)).collect()
}

async fn the_store_refuses_a_stale_runner_and_anything_after_the_end(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let store = open_store(&db).await;
    let turn = new_turn(store.as_ref(), "th-fence", "a").await;
    assert_eq!(turn.epoch, 1, "a new turn's runner holds the first epoch");

    let first = store.commit_batch(&[writes(&turn, 1, vec![event(turn.pk, 1, EventKind::RunStarted)])], now_ms()).await;
    assert_eq!(first.expect("commit").refused, Vec::<usize>::new());

    // Instance A (runner at epoch 1) stalls past its lease; B claims the turn and gets epoch 2.
    store.register_instance("a", 0, 10).await.expect("a's lease");
    store.register_instance("b", 0, 10_000).await.expect("b's lease");
    assert_eq!(store.claim_lapsed_turn("b", 5, true).await.expect("claim"), None, "a's lease still holds");
    let claimed = store.claim_lapsed_turn("b", 100, true).await.expect("claim").expect("a lapsed turn");
    assert_eq!((claimed.pk, claimed.epoch), (turn.pk, 2));
    assert_eq!(store.claim_lapsed_turn("c", 100, true).await.expect("claim"), None, "b holds it now");
    // A wakes up: its renewal finds its lease lapsed, it no longer holds the turn, and its
    // append and its hand-back are refused.
    assert!(!store.renew_instance("a", 100, 20_000).await.expect("renew"), "a's lease had lapsed");
    store.register_instance("a", 100, 20_000).await.expect("a takes its lease up again");
    assert_eq!(store.owned_turns("a").await.expect("owned"), Vec::<(i64, i64)>::new());
    let stale = store
        .commit_batch(
            &[writes(
                &turn,
                1,
                vec![
                    event(turn.pk, 2, EventKind::Plain),
                    WriteOp::Checkpoint { turn: turn.pk, checkpoint: "{\"step\":9}".into() },
                ],
            )],
            now_ms(),
        )
        .await
        .expect("commit");
    assert_eq!(stale.refused, vec![0], "the stale runner's append is refused");
    store.release_turn(turn.pk, "a", 1).await.expect("release");
    let row = store.turn_by_pk(turn.pk).await.expect("turn").expect("row");
    assert_eq!((row.epoch, row.checkpoint.as_deref()), (2, None), "nothing of A's stale writes landed");
    assert!(store.renew_instance("b", 100, 20_000).await.expect("renew"));
    assert_eq!(store.owned_turns("b").await.expect("owned"), vec![(turn.pk, 2)]);

    // In one batch: B's append goes in, a stale one beside it does not.
    let mixed = store
        .commit_batch(
            &[
                writes(&turn, 2, vec![event(turn.pk, 2, EventKind::Plain)]),
                writes(&turn, 1, vec![event(turn.pk, 3, EventKind::Plain)]),
            ],
            now_ms(),
        )
        .await
        .expect("commit");
    assert_eq!(mixed.refused, vec![1]);

    // B ends the turn; an append after the end, even in the same batch and under the current
    // epoch, is refused: the terminal event seals the log.
    let end = store
        .commit_batch(
            &[
                writes(
                    &turn,
                    2,
                    vec![
                        event(turn.pk, 3, EventKind::RunFinished),
                        WriteOp::FinishTurn { turn: turn.pk, status: TurnStatus::Succeeded, at_ms: 5 },
                    ],
                ),
                writes(&turn, 2, vec![event(turn.pk, 4, EventKind::Plain)]),
            ],
            now_ms(),
        )
        .await
        .expect("commit");
    assert_eq!(end.refused, vec![1]);
    let after = store.commit_batch(&[writes(&turn, 2, vec![event(turn.pk, 4, EventKind::Plain)])], now_ms()).await;
    assert_eq!(after.expect("commit").refused, vec![0], "nothing after the end");
    assert_eq!(store.claim_lapsed_turn("c", i64::MAX, true).await.expect("claim"), None);

    // A decision event can only be written while the turn waits: not on a finished turn.
    let marker = StoredEvent { seq: 0, kind: EventKind::Resumed, body: Bytes::from("{}"), at_ms: 6 };
    let audit = AuditEntry {
        tenant: "default".into(),
        action: "interrupt.decide".into(),
        actor: "person:p".into(),
        via: None,
        detail: "{}".into(),
        at_ms: 6,
    };
    let round =
        DecisionRound { turn: turn.pk, decisions: &[], marker: &marker, audit: &[audit], run: None, instance: "b" };
    let decided = store.decide_interrupts(&round).await.expect("decide");
    assert_eq!(decided, Decided::AlreadyDecided);

    let log = log_of(store.as_ref(), turn.pk).await;
    assert_eq!(log, vec![(1, 1), (2, 0), (3, 2)]);
    assert_eq!(seal_violation(&log, true), None);
    assert_eq!(store.row_counts().await.expect("counts").audit, 0, "a refused decision writes no audit row");
}

#[tokio::test]
async fn the_store_fences_stale_runners_on_sqlite() {
    the_store_refuses_a_stale_runner_and_anything_after_the_end(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_store_fences_stale_runners_on_postgres() {
    the_store_refuses_a_stale_runner_and_anything_after_the_end(Backend::Postgres).await;
}

const PAUSE_CONFIG: &str = r#"
[turns]
lease_ms = 1000
heartbeat_ms = 200
sweep_ms = 200
drain_secs = 0
shutdown_grace_secs = 2

[[agents]]
name = "pausable"
kind = "script"
chunk_chars = 3
chunk_delay_ms = 20
steps = [
  { say = "Before the pause." },
  { wait_ms = 2500 },
  { say = "After the pause, said once by whoever holds the turn." },
  { tool = "lookup", args = { q = "x" }, result = "found" },
  { say = "Done." },
]
"#;

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill").arg(format!("-{which}")).arg(pid.to_string()).status().expect("kill runs");
    assert!(status.success(), "kill -{which} {pid}");
}

/// Whether another connection can take the database's write lock now (SQLite), or the paused
/// process holds no transaction open (PostgreSQL): a process paused inside a transaction would
/// hold the rows it locked, and the test would measure that instead of a takeover.
async fn paused_outside_a_transaction(database: &str) -> bool {
    if database.starts_with("sqlite:") {
        let options: sqlx::sqlite::SqliteConnectOptions = match database.parse() {
            Ok(options) => options,
            Err(_) => return false,
        };
        let Ok(mut connection) = sqlx::ConnectOptions::connect(&options.busy_timeout(Duration::from_millis(0))).await
        else {
            return false;
        };
        let took = sqlx::query("BEGIN IMMEDIATE").execute(&mut connection).await.is_ok();
        if took {
            let _ = sqlx::query("ROLLBACK").execute(&mut connection).await;
        }
        took
    } else {
        let Ok(mut connection) = <sqlx::PgConnection as sqlx::Connection>::connect(database).await else {
            return false;
        };
        let busy: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = 'agui-gateway' AND state LIKE 'idle in transaction%'",
        )
        .fetch_one(&mut connection)
        .await
        .unwrap_or(1);
        busy == 0
    }
}

async fn the_turn_row(database: &str) -> (i64, String, i64, Option<String>) {
    let store = store::connect(database, 1).await.expect("store");
    let thread = store.find_thread("default", "th-paused").await.expect("thread").expect("exists");
    let turn = store.thread_turns(thread.pk).await.expect("turns").pop().expect("a turn");
    let owner: Option<String> = match database.starts_with("sqlite:") {
        true => None,
        false => {
            let pool = sqlx::PgPool::connect(database).await.expect("pool");
            sqlx::query_scalar("SELECT owner_instance FROM turns WHERE id = $1")
                .bind(turn.pk)
                .fetch_one(&pool)
                .await
                .expect("owner")
        }
    };
    (turn.pk, turn.status.as_str().to_string(), turn.epoch, owner)
}

/// A runner paused past its lease, the turn taken over and finished by another instance, then
/// the first runner woken: it writes nothing, and the log ends exactly once.
async fn a_paused_runner_woken_after_a_takeover_writes_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("pause.toml");
    std::fs::write(&config, PAUSE_CONFIG).expect("config");
    gateway_process::migrate(&db.url);
    let logs = Arc::new(Mutex::new(Vec::new()));
    let mut first = Spawn::new(&config, &db.url).start(logs.clone());
    let client = crate::tls_support::http_client().build().expect("client");
    let input = first_run("th-paused", "run-1", "pause me");
    let response = client
        .post(format!("http://{}/v1/agui/agents/pausable", first.address))
        .json(&input)
        .send()
        .await
        .expect("run");
    // Read up to the first answer's end: the runner now waits inside its step.
    let head = read_events(response, Some(10)).await;
    assert_eq!(kinds(&head).last(), Some(&"TEXT_MESSAGE_END"), "the first answer is whole: {head:?}");
    let pid = first.child.id();
    loop {
        signal(pid, "STOP");
        if paused_outside_a_transaction(&db.url).await {
            break;
        }
        signal(pid, "CONT");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another instance takes the turn over: on PostgreSQL once the lease lapses; on SQLite the
    // new process claims every running turn at start. It runs the cut step again from the
    // checkpoint, so for 2.5 s it waits too, having written nothing past the first runner's log.
    let mut second = Spawn::new(&config, &db.url).start(logs.clone());
    wait_until(Duration::from_secs(30), "the second instance to claim the turn", || async {
        the_turn_row(&db.url).await.2 >= 2
    })
    .await;
    // Wake the first runner now: its wait is over, so it goes on saying the next answer, with
    // sequence numbers nobody has used yet. Its lease and epoch are gone: the store refuses it.
    signal(pid, "CONT");
    let store = store::connect(&db.url, 1).await.expect("store");
    let (turn, _, _, _) = the_turn_row(&db.url).await;
    wait_until(Duration::from_secs(40), "the turn to finish", || async {
        the_turn_row(&db.url).await.1 == "succeeded"
    })
    .await;
    let ended = log_of(store.as_ref(), turn).await;
    // An absence: for 1.5 s the woken runner's writes keep being refused (checked throughout).
    holds_throughout(Duration::from_millis(1500), "the log as it was at the end", || async {
        log_of(store.as_ref(), turn).await == ended
    })
    .await;
    let after = log_of(store.as_ref(), turn).await;
    assert_eq!(after, ended, "nothing was written after the end");
    assert_eq!(seal_violation(&after, true), None, "{after:?}");
    // Each answer and the tool call are in the log once: the woken runner said none of them.
    let bodies: Vec<String> = store
        .events_after(turn, 0, 1000)
        .await
        .expect("log")
        .iter()
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .collect();
    let count = |kind: &str| bodies.iter().filter(|b| b.contains(&format!("\"type\":\"{kind}\""))).count();
    assert_eq!((count("TEXT_MESSAGE_START"), count("TOOL_CALL_START")), (3, 1), "{bodies:#?}");
    let (_, status, _, owner) = the_turn_row(&db.url).await;
    assert_eq!(status, "succeeded");
    if backend == Backend::Postgres {
        assert_ne!(owner.as_deref(), Some(first.id.as_str()), "the woken runner took nothing back");
    }
    // The run seen whole from the log: one valid run for the official client too.
    let tail = client
        .post(format!("http://{}/v1/agui/agents/pausable", second.address))
        .json(&input)
        .send()
        .await
        .expect("replay");
    let replayed = read_events(tail, None).await;
    assert_eq!(kinds(&replayed).iter().filter(|k| **k == "RUN_FINISHED").count(), 1);
    assert_eq!(kinds(&replayed).last(), Some(&"RUN_FINISHED"));
    for instance in [&mut first, &mut second] {
        let _ = instance.child.kill();
        let _ = instance.child.wait();
    }
}

#[tokio::test]
async fn a_paused_runner_woken_after_a_takeover_writes_nothing_on_sqlite() {
    a_paused_runner_woken_after_a_takeover_writes_nothing(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_paused_runner_woken_after_a_takeover_writes_nothing_on_postgres() {
    a_paused_runner_woken_after_a_takeover_writes_nothing(Backend::Postgres).await;
}
