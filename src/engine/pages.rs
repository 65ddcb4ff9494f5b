//! The catch-up read of a turn's log for [`super::stream::tail`]: pages of the table that start
//! small and grow, each next one read while the stream renders and sends the one before.
//!
//! Why: a replay of a long turn waited for a whole page of [`PAGE`] events to be read before
//! its first event was rendered, and each page's read started only once the page before had
//! been written out. A first page of [`FIRST_PAGE`] events goes out after a short read; the
//! pages then double up to [`PAGE`], and while one is on its way the next is already being
//! read, so the reads and the writes overlap instead of taking turns.
//!
//! A page read ahead is the log after the cursor it was asked for, as committed when it was
//! read: events are never changed once committed, so it is used as if it were read now, and
//! only when the stream asks for that same cursor. An empty or failed read ahead is read again
//! (an empty page means "caught up" only if read after the wake-up the stream just took).

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::stream::PAGE;
use crate::store::{Store, StoreError, StoredEvent};

/// Events in the first page of a catch-up: a quick read and render, so the first event leaves
/// early; the pages after it double up to [`PAGE`].
pub(super) const FIRST_PAGE: i64 = 32;

type PageRead = Result<Vec<StoredEvent>, StoreError>;

/// One stream's reads of one turn's table.
pub(super) struct LogPages {
    store: Arc<dyn Store>,
    turn: i64,
    /// The size of the next page asked for.
    size: i64,
    ahead: Option<ReadAhead>,
}

/// The next page, being read in a task of its own (so it progresses while the stream is
/// suspended at a yield); aborted when it is not wanted.
struct ReadAhead {
    after: i64,
    size: i64,
    read: JoinHandle<PageRead>,
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.read.abort();
    }
}

impl LogPages {
    pub(super) fn new(store: Arc<dyn Store>, turn: i64) -> LogPages {
        LogPages { store, turn, size: FIRST_PAGE, ahead: None }
    }

    /// The turn's events after `after`, in order: a page of them, or none when the table holds
    /// none yet. A full page starts the read of the next one.
    pub(super) async fn after(&mut self, after: i64) -> PageRead {
        let (page, size) = match self.ahead.take() {
            Some(mut ahead) if ahead.after == after => match (&mut ahead.read).await {
                Ok(Ok(events)) if !events.is_empty() => (events, ahead.size),
                _ => (self.store.events_after(self.turn, after, ahead.size).await?, ahead.size),
            },
            // None, or not this cursor's (the stream took those events from memory): dropped.
            _ => (self.store.events_after(self.turn, after, self.size).await?, self.size),
        };
        // Full: more may follow, in a page twice as large. Short: the stream has caught up (or
        // met a gap), and its next catch-up starts small again.
        let full = page.len() as i64 >= size;
        self.size = if full { (size * 2).min(PAGE) } else { FIRST_PAGE };
        if let Some(last) = page.last().filter(|_| full) {
            self.read_ahead(last.seq);
        }
        Ok(page)
    }

    fn read_ahead(&mut self, after: i64) {
        let (store, turn, size) = (self.store.clone(), self.turn, self.size);
        let read = tokio::spawn(async move { store.events_after(turn, after, size).await });
        self.ahead = Some(ReadAhead { after, size, read });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use futures_util::StreamExt;
    use serde_json::json;

    use super::*;
    use crate::engine::clock_tests::{begin, engine_with, run_to_end, Setup};
    use crate::engine::hub::Hub;
    use crate::engine::stream::tail;
    use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};
    use crate::engine::Agent;
    use crate::metrics::Metrics;
    use crate::protocol::Event;

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
}
