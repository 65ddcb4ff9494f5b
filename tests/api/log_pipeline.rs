//! The pipelined log writer on PostgreSQL: several batches of one writer in flight at once
//! (each inserted ahead of its fence, committed strictly after the batch before it) must still
//! give every turn a contiguous log 1..n, write nothing of a runner after the claim that fenced
//! it, and never commit an append queued behind one of the same runner that failed.

use std::sync::Arc;
use std::time::Duration;

use agui_gateway::engine::log::{Batching, LogError, LogWriter};
use agui_gateway::engine::stream::hub::Hub;
use agui_gateway::metrics::Metrics;
use agui_gateway::store::{self, EventKind, Store, StoredEvent, WriteOp};
use bytes::Bytes;
use serde_json::json;

use crate::helpers::*;

async fn open_store(db: &TestDatabase) -> Arc<dyn Store> {
    let store = store::connect(&db.url, 16).await.expect("store opens");
    store.migrate().await.expect("migrations");
    store
}

fn event(turn: i64, seq: i64) -> WriteOp {
    let body = json!({ "type": "CUSTOM", "name": "n", "value": seq }).to_string();
    WriteOp::Event { turn, event: StoredEvent { seq, kind: EventKind::Plain, body: Bytes::from(body), at_ms: seq } }
}

async fn seqs_of(store: &dyn Store, turn: i64) -> Vec<i64> {
    store.events_after(turn, 0, 10_000).await.expect("log").iter().map(|e| e.seq).collect()
}

fn pipelined_log(store: &Arc<dyn Store>, batch_max_events: usize) -> LogWriter {
    assert!(store.max_pipeline_depth() >= 3, "PostgreSQL pipelines the log writer");
    LogWriter::start(
        store.clone(),
        agui_gateway::clock::system(),
        Arc::new(agui_gateway::bus::PgBus::new(store.clone())),
        Arc::new(Hub::default()),
        2,
        Batching { batch_max_events, pipeline_depth: 3 },
        Metrics::new(),
    )
}

// One store: the pipelined writer is PostgreSQL's (SQLite commits one batch at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_turns_stay_contiguous_and_a_claimed_runner_writes_nothing_more() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let store = open_store(&db).await;
    // Small batches, so every turn's events spread over many batches in flight together.
    let log = pipelined_log(&store, 16);
    const EVENTS: i64 = 300;
    // Instance "a" holds its lease for good; the victim's owner has no lease at all: it is the
    // only turn a claim can take.
    store.register_instance("a", 0, i64::MAX / 2).await.expect("instance a");
    let mut turns = Vec::new();
    for index in 0..12 {
        turns.push(new_turn(store.as_ref(), &format!("th-{index}"), "a").await);
    }
    let victim = new_turn(store.as_ref(), "th-victim", "gone").await;

    let mut runners = Vec::new();
    // Half-way, the victim waits for the claim if it has not landed yet: however busy the
    // machine, the claim comes among its appends, never after its last.
    let (claimed_tx, claimed_rx) = tokio::sync::watch::channel(false);
    for turn in turns.iter().chain(std::iter::once(&victim)) {
        let (log, pk, epoch) = (log.clone(), turn.pk, turn.epoch);
        // The victim writes slowly enough for the claim to land among its appends.
        let slow = pk == victim.pk;
        let mut claimed = claimed_rx.clone();
        runners.push(tokio::spawn(async move {
            let turn_log = log.for_turn(pk, epoch);
            for seq in 1..EVENTS {
                turn_log.append(vec![event(pk, seq)]).await.expect("queued");
                if slow && seq == EVENTS / 2 {
                    let _ = claimed.wait_for(|claimed| *claimed).await;
                }
                if slow {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else if seq % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            let last = turn_log.append_committed(vec![event(pk, EVENTS)]).await;
            (pk, turn_log, last)
        }));
    }
    // Mid-way through the victim's appends another runner claims it (retried: the claim skips
    // the row while a batch holds it).
    let mid = wait_for(Duration::from_secs(20), "the victim's log to grow", || {
        let store = store.clone();
        async move {
            let seqs = seqs_of(store.as_ref(), victim.pk).await;
            (seqs.len() >= 40).then_some(seqs.len())
        }
    })
    .await;
    // A claim passes over a row a batch holds locked: it is tried again at once until it lands.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let claimed = loop {
        if let Some(claimed) = store.claim_lapsed_turn("b", 100, true).await.expect("claim") {
            break claimed;
        }
        assert!(tokio::time::Instant::now() < deadline, "the victim could not be claimed");
        tokio::task::yield_now().await;
    };
    assert_eq!((claimed.pk, claimed.epoch), (victim.pk, victim.epoch + 1));
    let at_claim = seqs_of(store.as_ref(), victim.pk).await;
    let _ = claimed_tx.send(true);

    for runner in runners {
        let (pk, turn_log, last) = runner.await.expect("runner");
        let health = turn_log.health();
        let seqs = seqs_of(store.as_ref(), pk).await;
        if pk == victim.pk {
            assert!(health.is_fenced(), "the claimed runner is told it was fenced ({} events, {} at the claim, claim after {mid}, last {last:?})", seqs.len(), at_claim.len());
            assert!(matches!(last, Err(LogError::Fenced)), "its last append is refused: {last:?}");
            assert_eq!(seqs, at_claim, "nothing of the stale runner is committed after the claim");
            assert!(seqs.len() >= mid && (seqs.len() as i64) < EVENTS, "the claim came mid-way: {}", seqs.len());
            assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "the victim's log has no hole");
        } else {
            assert!(last.is_ok() && !health.is_failed(), "turn {pk}: {last:?}");
            assert_eq!(seqs, (1..=EVENTS).collect::<Vec<_>>(), "turn {pk}'s log is 1..{EVENTS} in order");
        }
    }
}

// One store: the pipelined writer is PostgreSQL's (SQLite commits one batch at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_append_lets_no_later_batch_commit_the_same_runners_next_events() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let store = open_store(&db).await;
    // One append per batch: the bad append's batch and the ones behind it are in flight
    // together, the later ones inserted before the bad one fails.
    let log = pipelined_log(&store, 1);
    store.register_instance("a", 0, i64::MAX / 2).await.expect("instance a");
    let turn = new_turn(store.as_ref(), "th-bad", "a").await;
    let other = new_turn(store.as_ref(), "th-other", "a").await;
    let (turn_log, other_log) = (log.for_turn(turn.pk, turn.epoch), log.for_turn(other.pk, other.epoch));
    for seq in 1..=5 {
        turn_log.append(vec![event(turn.pk, seq)]).await.expect("queued");
    }
    turn_log.append_committed(Vec::new()).await.expect("the first five commit");

    // An event numbered 5 again cannot be stored (the log's key holds one segment ending at
    // each sequence number): its batch fails in the database.
    let bad = WriteOp::Event {
        turn: turn.pk,
        event: StoredEvent { seq: 5, kind: EventKind::Plain, body: Bytes::from_static(b"{\"x\":1}"), at_ms: 6 },
    };
    turn_log.append(vec![bad]).await.expect("queued");
    for seq in 7..=30 {
        turn_log.append(vec![event(turn.pk, seq)]).await.expect("queued");
        other_log.append(vec![event(other.pk, seq - 6)]).await.expect("queued");
    }
    let after = turn_log.append_committed(vec![event(turn.pk, 31)]).await;
    let other_done = other_log.append_committed(Vec::new()).await;
    let (health, other_health) = (turn_log.health(), other_log.health());

    assert!(health.is_failed() && !health.is_fenced(), "the runner learns its append failed");
    assert!(matches!(after, Err(LogError::Abandoned)), "what it queued after is not written: {after:?}");
    assert_eq!(seqs_of(store.as_ref(), turn.pk).await, vec![1, 2, 3, 4, 5], "no event after the failed one commits");
    assert!(other_done.is_ok() && !other_health.is_failed(), "the other turn is unharmed: {other_done:?}");
    assert_eq!(seqs_of(store.as_ref(), other.pk).await, (1..=24).collect::<Vec<_>>());
}

/// A batch with none in flight before it is one statement on PostgreSQL: it writes the admitted
/// events and each turn's last checkpoint, refuses a stale runner's appends (and what follows a
/// turn's terminal event), and names the turns another instance follows.
// One store: the statement counted is PostgreSQL's.
#[tokio::test]
async fn a_batch_alone_is_written_in_one_statement_fenced_like_any_other() {
    use agui_gateway::store::TurnWrites;
    let db = TestDatabase::new(Backend::Postgres).await;
    let store = open_store(&db).await;
    store.register_instance("a", 0, i64::MAX / 2).await.expect("instance a");
    let live = new_turn(store.as_ref(), "th-live", "a").await;
    let stale = new_turn(store.as_ref(), "th-stale", "a").await;
    let finished = |turn: i64, seq: i64| WriteOp::Event {
        turn,
        event: StoredEvent { seq, kind: EventKind::RunFinished, body: Bytes::from_static(b"{}"), at_ms: seq },
    };
    let checkpoint = |turn: i64, text: &str| WriteOp::Checkpoint { turn, checkpoint: text.to_string() };
    store.follow_turns(&[live.pk], i64::MAX / 2).await.expect("followed");
    let batch = vec![
        TurnWrites { turn: live.pk, epoch: live.epoch, ops: vec![event(live.pk, 1), checkpoint(live.pk, "one")] },
        TurnWrites { turn: stale.pk, epoch: stale.epoch + 1, ops: vec![event(stale.pk, 1)] },
        TurnWrites { turn: live.pk, epoch: live.epoch, ops: vec![event(live.pk, 2), checkpoint(live.pk, "two")] },
        TurnWrites { turn: live.pk, epoch: live.epoch, ops: vec![finished(live.pk, 3)] },
        // After the turn's terminal event in the same batch: refused, not written.
        TurnWrites { turn: live.pk, epoch: live.epoch, ops: vec![event(live.pk, 4)] },
    ];
    let outcome =
        store.commit_at_once(&batch, now_ms()).await.expect("written").expect("one statement takes this batch");
    assert_eq!(outcome.refused, vec![1, 4]);
    assert_eq!(outcome.followed, vec![live.pk], "the live turn is followed, the stale one is not");
    assert_eq!(seqs_of(store.as_ref(), live.pk).await, vec![1, 2, 3]);
    assert!(seqs_of(store.as_ref(), stale.pk).await.is_empty(), "a stale runner wrote nothing");
    let row = store.turn_by_pk(live.pk).await.expect("query").expect("turn");
    assert_eq!(row.checkpoint.as_deref(), Some("two"), "the batch's last checkpoint of the turn");
    // A batch that ends a turn (or opens an interrupt) is not one the statement takes.
    let ends = vec![TurnWrites {
        turn: stale.pk,
        epoch: stale.epoch,
        ops: vec![WriteOp::FinishTurn { turn: stale.pk, status: store::TurnStatus::Succeeded, at_ms: 1 }],
    }];
    assert!(store.commit_at_once(&ends, now_ms()).await.expect("asked").is_none());
}
