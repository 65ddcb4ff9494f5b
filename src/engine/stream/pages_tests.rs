//! The catch-up pages of `pages.rs`, read through `stream::tail`: every event once and in
//! order from any position, and page sizes that start small and double.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::json;

use super::pages::{LogPages, FIRST_PAGE, PAGE};
use crate::engine::stream::hub::Hub;
use crate::engine::stream::tail::tail;
use crate::engine::test_engine::{begin, engine_with, run_to_end, Setup};
use crate::engine::turn::agent::Agent;
use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};
use crate::metrics::Metrics;
use crate::protocol::Event;
use crate::store::Store;

/// Says this many events: over two full pages of [`PAGE`], with every smaller page before.
const SAID: usize = 2_500;

struct Chatty;

#[async_trait]
impl Agent for Chatty {
    async fn run(&self, turn: &mut TurnContext, _checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        for n in 0..SAID {
            turn.emit(Event::Custom { name: "n".into(), value: json!(n), subagent_run_id: None }).await?;
        }
        Ok(AgentOutput::default())
    }
}

/// The sequence numbers `tail` yields after `after`, up to `last`.
async fn tailed(store: Arc<dyn Store>, turn: i64, after: i64, last: i64) -> Vec<i64> {
    // A hub of its own: no memory of the turn, so every event comes from the table.
    let log = tail(store, Arc::new(Hub::default()), Metrics::new(), turn, after);
    let mut log = std::pin::pin!(log);
    let mut seqs = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while seqs.last().copied().unwrap_or(after) < last {
            let batch = log.next().await.expect("the log goes on").expect("the table reads");
            seqs.extend(batch.iter().map(|event| event.seq));
        }
    });
    assert!(read.await.is_ok(), "the log after {after} did not reach {last}");
    seqs
}

#[tokio::test]
async fn a_long_log_is_read_from_any_position_each_event_once_and_in_order() {
    // Held whole to the end: its folder holds the database.
    let setup: Setup = engine_with(Arc::new(Chatty), |_| {}).await;
    let (engine, store) = (&setup.engine, setup.store.clone());
    let events = run_to_end(engine, begin(engine, "th-pages", "run-1").await).await;
    assert_eq!(events.last().expect("events")["type"], "RUN_FINISHED");
    let thread = store.find_thread("default", "th-pages").await.expect("query").expect("the thread");
    let turn = store.thread_turns(thread.pk).await.expect("query").pop().expect("the turn").pk;
    let last = store.last_seq(turn).await.expect("query");
    assert!(last > SAID as i64, "the turn logged {last} events");
    // At and around every page boundary: 32, 32 + 64, … and the full pages of 1,000.
    let firsts = [0, 1, 31, 32, 33, 95, 96, 97, 991, 992, 993, 1000, 1992, 1993, 2001];
    for after in firsts.into_iter().chain([last - 2, last - 1]) {
        let seqs = tailed(store.clone(), turn, after, last).await;
        let expected: Vec<i64> = (after + 1..=last).collect();
        assert_eq!(seqs.len(), expected.len(), "after {after}: no event missed or repeated");
        assert_eq!(seqs, expected, "after {after}: every event once, in order");
    }
}

#[tokio::test]
async fn pages_start_small_and_double_up_to_the_most() {
    let setup: Setup = engine_with(Arc::new(Chatty), |_| {}).await;
    let (engine, store) = (&setup.engine, setup.store.clone());
    run_to_end(engine, begin(engine, "th-sizes", "run-1").await).await;
    let thread = store.find_thread("default", "th-sizes").await.expect("query").expect("the thread");
    let turn = store.thread_turns(thread.pk).await.expect("query").pop().expect("the turn").pk;
    let mut pages = LogPages::new(store.clone(), turn);
    let (mut cursor, mut sizes) = (0, Vec::new());
    loop {
        let page = pages.after(cursor).await.expect("the table reads");
        let Some(last) = page.last() else { break };
        cursor = last.seq;
        sizes.push(page.len() as i64);
    }
    assert_eq!(&sizes[..6], &[FIRST_PAGE, 64, 128, 256, 512, PAGE], "{sizes:?}");
    assert!(sizes[6..sizes.len() - 1].iter().all(|&size| size == PAGE), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<i64>(), store.last_seq(turn).await.expect("query"));
}
