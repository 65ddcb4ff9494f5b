//! The engine's decisions by the time of day, driven by a [`TestClock`] moved by hand: nothing
//! here sleeps to let time pass. Each test runs a real engine on a real SQLite file, with a
//! small agent of its own behind the engine's `Agent` trait.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::plans::RunPlan;
use super::test_engine::{begin, engine_with, question, run_to_end, Setup, GUARD};
use super::turn::agent::Agent;
use super::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};
use crate::clock::Clock;
use crate::protocol::ErrorCode;
use crate::store::InterruptStatus;

/// How long an interrupt of [`Asker`] stays open.
const TTL: Duration = Duration::from_secs(60);

/// Asks one question, and finishes once it is answered (or denied by expiry).
struct Asker;

#[async_trait]
impl Agent for Asker {
    async fn run(&self, turn: &mut TurnContext, checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        if !checkpoint.awaiting.is_empty() {
            return Ok(AgentOutput { result: None, usage: None });
        }
        let spec = question("which one?", TTL);
        Err(turn.wait_for(vec![spec], Checkpoint { step: 1, ..Checkpoint::default() }).await)
    }
}

/// Answers at once.
struct Quick;

#[async_trait]
impl Agent for Quick {
    async fn run(&self, _turn: &mut TurnContext, _checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        Ok(AgentOutput { result: None, usage: None })
    }
}

#[tokio::test]
async fn the_sweeper_expires_an_interrupt_once_the_clock_passes_its_deadline() {
    let Setup { engine, store, clock, _dir } = engine_with(Arc::new(Asker), |_| {}).await;
    let plan = begin(&engine, "th-expiry", "run-1").await;
    let events = run_to_end(&engine, plan).await;
    let finished = events.last().expect("events");
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let expires_at = finished["outcome"]["interrupts"][0]["expiresAt"].as_str().expect("expiresAt").to_string();
    assert_eq!(expires_at, crate::protocol::iso8601(clock.now_ms() + TTL.as_millis() as i64));

    let thread = store.find_thread("default", "th-expiry").await.expect("query").expect("the thread");
    let turn = store.thread_turns(thread.pk).await.expect("query").pop().expect("the turn");
    let status = || async { store.turn_interrupts(turn.pk).await.expect("query")[0].status };

    // One millisecond before the deadline the sweeper leaves it open.
    clock.advance(TTL - Duration::from_millis(1));
    engine.sweep().await;
    assert_eq!(status().await, InterruptStatus::Open);

    // At the deadline it is denied as expired — the same instant a resume is refused as
    // expired — and the turn goes on to its end.
    clock.advance(Duration::from_millis(1));
    engine.sweep().await;
    let interrupt = store.turn_interrupts(turn.pk).await.expect("query").remove(0);
    assert_eq!(interrupt.status, InterruptStatus::Expired);
    assert_eq!(interrupt.decided_by.as_deref(), Some("gateway"));
    let decided_seq = interrupt.decided_seq.expect("the expiry is in the log");

    // A later sweep decides nothing again.
    clock.advance(TTL);
    engine.sweep().await;
    let again = store.turn_interrupts(turn.pk).await.expect("query").remove(0);
    assert_eq!(again.decided_seq, Some(decided_seq), "the expiry was recorded once");

    let ended = tokio::time::timeout(GUARD, async {
        loop {
            let turn = store.turn_by_pk(turn.pk).await.expect("query").expect("the turn");
            if turn.status == crate::store::TurnStatus::Succeeded {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the turn did not finish after its interrupt expired");
}

#[tokio::test]
async fn a_turns_per_minute_quota_refuses_until_its_window_rolls_over() {
    let Setup { engine, clock, _dir, .. } = engine_with(Arc::new(Quick), |config| {
        let tenant = config.tenants.iter_mut().find(|t| t.name == "default").expect("the default tenant");
        tenant.quotas.turns_per_minute = Some(1);
    })
    .await;
    let first = run_to_end(&engine, begin(&engine, "th-q1", "run-1").await).await;
    assert_eq!(first.last().expect("events")["type"], "RUN_FINISHED");

    let refused = begin(&engine, "th-q2", "run-2").await;
    let RunPlan::Refused(refusal) = refused else { panic!("a second turn in the minute was let through") };
    assert_eq!(refusal.code, ErrorCode::QuotaExceeded);
    let figures = refusal.figures.expect("the limit's figures");
    assert_eq!(figures["scope"], "turns_per_minute", "{figures}");
    let (_, next_minute) = super::limits::quota_window(clock.now_ms(), 60);
    assert_eq!(figures["resetsAt"], crate::protocol::iso8601(next_minute), "{figures}");

    // Still inside the minute: refused again.
    clock.set(next_minute - 1);
    assert!(matches!(begin(&engine, "th-q2", "run-3").await, RunPlan::Refused(_)));

    // The next minute: the count starts over.
    clock.set(next_minute);
    let later = run_to_end(&engine, begin(&engine, "th-q2", "run-4").await).await;
    assert_eq!(later.last().expect("events")["type"], "RUN_FINISHED", "{later:?}");
}

#[tokio::test]
async fn retention_erases_by_the_engines_clock_only_a_thread_idle_past_its_threshold() {
    let Setup { engine, store, clock, _dir } = engine_with(Arc::new(Quick), |config| {
        config.retention.thread_idle_days = 30;
    })
    .await;
    let day = Duration::from_secs(86_400);
    let idle_since = clock.now_ms();
    run_to_end(&engine, begin(&engine, "th-idle", "run-1").await).await;
    clock.advance(20 * day);
    run_to_end(&engine, begin(&engine, "th-fresh", "run-1").await).await;

    // Exactly 30 days after its last activity the thread is not yet idle for longer.
    clock.set(idle_since + (30 * day).as_millis() as i64);
    assert_eq!(engine.sweep_retention().await.expect("a pass"), 0);
    assert!(store.find_thread("default", "th-idle").await.expect("query").is_some());

    clock.advance(Duration::from_millis(1));
    assert_eq!(engine.sweep_retention().await.expect("a pass"), 1);
    assert!(store.find_thread("default", "th-idle").await.expect("query").is_none());
    assert!(store.find_thread("default", "th-fresh").await.expect("query").is_some(), "idle for 10 days only");
    let erased = store.audit_rows(Some("default"), 0, 100).await.expect("audit").pop().expect("a row").entry;
    assert_eq!((erased.action.as_str(), erased.actor.as_str()), ("thread.delete", "gateway"));
    assert_eq!(erased.at_ms, clock.now_ms(), "written at the engine's time");
}
