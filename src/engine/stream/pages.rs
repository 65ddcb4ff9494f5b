//! The catch-up read of a turn's log for `stream::tail`: pages of the table that start
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

use crate::store::{Store, StoreError, StoredEvent};

/// The most events read from the table per query (catch-up pages start smaller).
pub(super) const PAGE: i64 = 1000;

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
    /// The last page read was short: the stream has read the log to its end as of that read.
    reached_end: bool,
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
        LogPages { store, turn, size: FIRST_PAGE, ahead: None, reached_end: false }
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
        self.reached_end = !full;
        self.size = if full { (size * 2).min(PAGE) } else { FIRST_PAGE };
        if let Some(last) = page.last().filter(|_| full) {
            self.read_ahead(last.seq);
        }
        Ok(page)
    }

    /// Whether the last page read was short: it held the log up to its end as it was then
    /// (or up to a gap, which the next read steps over).
    pub(super) fn reached_end(&self) -> bool {
        self.reached_end
    }

    fn read_ahead(&mut self, after: i64) {
        let (store, turn, size) = (self.store.clone(), self.turn, self.size);
        let read = tokio::spawn(async move { store.events_after(turn, after, size).await });
        self.ahead = Some(ReadAhead { after, size, read });
    }
}
