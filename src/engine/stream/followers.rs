//! Streams here of turns another instance runs: this instance follows such a turn once,
//! whatever the number of its streams here, and keeps its feed's memory filled, so the streams
//! are fed from memory as on the runner.
//!
//! Following a turn marks it on the bus (PostgreSQL: the turn's row, under the lock its
//! runner's batches take; NATS: a subscription), then reads the table once for what committed
//! before the mark took. From then on each notice of a batch fills the feed: with the events it
//! carries, or, when they did not fit or one was missed, with one read of the table for the
//! feed, never one per stream. What a bus may lose (a dropped listening connection, a runner
//! that died between its commit and its message) is caught up by one query for every followed
//! turn every [`CHECK_EVERY`] (a feed still behind what the check before saw is read), and a
//! lost connection fills every followed feed at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::hub::{Feed, Following, Hub};
use super::pages::PAGE;
use crate::bus::{Bus, WakeUp};
use crate::clock::Clock;
use crate::store::Store;

/// How long a follow mark holds unless renewed.
const FOLLOW_FOR: Duration = Duration::from_secs(60);
/// How often the marks of turns still followed are renewed.
const RENEW_EVERY: Duration = Duration::from_secs(20);
/// How often every followed turn's newest sequence number is checked against memory, in case
/// a notice was lost.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(2);

pub struct Followers {
    store: Arc<dyn Store>,
    /// The engine's clock: a mark holds until a time of day the writers' fences read by it.
    clock: Arc<dyn Clock>,
    bus: Arc<dyn Bus>,
    hub: Weak<Hub>,
    /// Turns this instance marked followed (to renew, and to let go of on the bus).
    followed: Mutex<HashSet<i64>>,
    /// Turns asked to be followed, for the marking task.
    to_mark: mpsc::UnboundedSender<(i64, Arc<Feed>)>,
    /// Each followed turn's newest sequence number at the last check.
    seen: Mutex<HashMap<i64, i64>>,
}

impl Followers {
    /// Starts following for `hub`'s feeds, and the task that renews marks and checks for lost
    /// notices.
    pub fn start(store: Arc<dyn Store>, clock: Arc<dyn Clock>, bus: Arc<dyn Bus>, hub: &Arc<Hub>) -> Arc<Followers> {
        let (to_mark, waiting) = mpsc::unbounded_channel();
        tokio::spawn(mark_waiting(store.clone(), clock.clone(), bus.clone(), waiting));
        let followers = Arc::new(Followers {
            store,
            clock,
            bus,
            hub: Arc::downgrade(hub),
            followed: Mutex::new(HashSet::new()),
            to_mark,
            seen: Mutex::default(),
        });
        hub.set_following(followers.clone());
        tokio::spawn(keep_up(Arc::downgrade(&followers)));
        followers
    }

    /// What another instance told this one of a turn's log (or that something was lost).
    pub fn heard(self: &Arc<Self>, wakeup: WakeUp) {
        let Some(hub) = self.hub.upgrade() else { return };
        match wakeup {
            WakeUp::Events { .. } | WakeUp::Committed { .. } => {
                let (turn, seq, events) = match wakeup {
                    WakeUp::Events { turn, events } => (turn, events.last().map_or(0, |e| e.seq), Some(events)),
                    WakeUp::Committed { turn, seq } => (turn, seq, None),
                    _ => return,
                };
                let Some(feed) = hub.existing(turn) else { return };
                if feed.is_local() {
                    return;
                }
                if !feed.is_followed() {
                    hub.wake(turn, seq);
                } else if seq > feed.filled_to() && !events.is_some_and(|events| feed.fill(events)) {
                    // No events carried, or not following on from memory: read the table.
                    self.fill(turn, feed, seq);
                }
            }
            WakeUp::Lost => {
                for (turn, feed) in hub.remote_feeds() {
                    if feed.is_followed() {
                        // What was missed is unknown: read whatever is there.
                        self.fill(turn, feed, i64::MAX);
                    }
                }
                hub.wake_every_feed();
            }
            WakeUp::Cancel { .. } | WakeUp::NewTurn { .. } => {}
        }
    }

    /// Reads the table after the feed's memory into it, up to at least `wanted`, one read at
    /// a time per feed.
    fn fill(self: &Arc<Self>, turn: i64, feed: Arc<Feed>, wanted: i64) {
        if !feed.start_filling() {
            // The fill under way reads again before it stops if what it read falls short.
            feed.fill_again(wanted);
            return;
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(error) = read_until_done(store.as_ref(), turn, &feed).await {
                tracing::warn!(%error, turn, "reading a followed turn's log failed; its streams read it themselves");
                feed.not_followed();
            }
        });
    }

    /// Renews the marks of the turns still followed; lets go of those no stream follows.
    async fn renew(&self) {
        let Some(hub) = self.hub.upgrade() else { return };
        let live: HashSet<i64> =
            hub.remote_feeds().into_iter().filter(|(_, feed)| feed.is_followed()).map(|(turn, _)| turn).collect();
        let gone: Vec<i64> = {
            let mut followed = self.followed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let gone = followed.difference(&live).copied().collect();
            followed.retain(|turn| live.contains(turn));
            gone
        };
        if !gone.is_empty() {
            self.bus.unfollow(&gone).await;
        }
        let turns: Vec<i64> = live.into_iter().collect();
        if let Err(error) = self.bus.follow(&turns, until(self.clock.as_ref())).await {
            tracing::warn!(%error, "renewing the follow marks failed; tried again later");
        }
    }

    /// Checks every followed turn's newest sequence number (one query) and fills the feeds
    /// that are behind: the catch-up for a notice that was lost.
    async fn check(self: &Arc<Self>) {
        let Some(hub) = self.hub.upgrade() else { return };
        let feeds: Vec<(i64, Arc<Feed>)> =
            hub.remote_feeds().into_iter().filter(|(_, feed)| feed.is_followed()).collect();
        if feeds.is_empty() {
            return;
        }
        let turns: Vec<i64> = feeds.iter().map(|(turn, _)| *turn).collect();
        match self.store.last_seqs(&turns).await {
            Ok(last) => {
                // A feed is read only when it is still behind what the check before this one
                // saw: a notice committed a moment ago is on its way, not lost, and under
                // load reading every feed a fresh commit left behind would double the reads.
                let mut seen = self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                for (turn, feed) in feeds {
                    if let Some(&seq) = seen.get(&turn).filter(|&&seq| seq > feed.filled_to()) {
                        self.fill(turn, feed, seq);
                    }
                }
                *seen = last;
            }
            Err(error) => tracing::warn!(%error, "checking followed turns failed; tried again later"),
        }
    }
}

impl Following for Followers {
    fn follow(&self, turn: i64, feed: Arc<Feed>) {
        self.followed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(turn);
        // Gone only with the followers themselves, when nobody follows anything any more.
        let _ = self.to_mark.send((turn, feed));
    }
}

/// Marks the turns asked for followed, everything asked for meanwhile in one write (1,000
/// streams reconnecting here cost a few writes, not 1,000 writes each waiting on its turn's
/// row lock behind the runner's batches), then reads the table once for each (what committed
/// before its mark took). Ends when the followers go.
async fn mark_waiting(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    bus: Arc<dyn Bus>,
    mut waiting: mpsc::UnboundedReceiver<(i64, Arc<Feed>)>,
) {
    while let Some(first) = waiting.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = waiting.try_recv() {
            batch.push(more);
        }
        let turns: Vec<i64> = batch.iter().map(|(turn, _)| *turn).collect();
        // The mark first, then the table: a batch that committed before the mark took is
        // read here; every later one tells this instance.
        if let Err(error) = bus.follow(&turns, until(clock.as_ref())).await {
            tracing::warn!(%error, turns = turns.len(), "following turns run elsewhere failed; their streams read the table");
            batch.iter().for_each(|(_, feed)| feed.not_followed());
            continue;
        }
        for (turn, feed) in batch {
            let store = store.clone();
            tokio::spawn(async move {
                while !feed.start_filling() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                match read_until_done(store.as_ref(), turn, &feed).await {
                    Ok(()) => feed.now_followed(),
                    Err(error) => {
                        tracing::warn!(%error, turn, "reading a followed turn's log failed; its streams read the table");
                        feed.not_followed();
                    }
                }
            });
        }
    }
}

/// When a mark taken now ends.
fn until(clock: &dyn Clock) -> i64 {
    clock.now_ms() + FOLLOW_FOR.as_millis() as i64
}

/// [`read_into`] with the feed's fill slot held (taken by the caller), again while more fills
/// were asked for meanwhile; gives the slot back.
async fn read_until_done(store: &dyn Store, turn: i64, feed: &Feed) -> Result<(), crate::store::StoreError> {
    loop {
        if let Err(error) = read_into(store, turn, feed).await {
            feed.release_filling();
            return Err(error);
        }
        if !feed.done_filling() {
            return Ok(());
        }
    }
}

/// The table after the feed's memory, page by page, into it.
async fn read_into(store: &dyn Store, turn: i64, feed: &Feed) -> Result<(), crate::store::StoreError> {
    loop {
        let after = feed.filled_to();
        let page = store.events_after(turn, after, PAGE).await?;
        tracing::debug!(turn, after, read = page.len(), "filled a followed turn's feed from the table");
        let full = page.len() as i64 == PAGE;
        if page.is_empty() {
            return Ok(());
        }
        feed.fill_after_read(page);
        if !full {
            return Ok(());
        }
    }
}

/// Renews marks every [`RENEW_EVERY`] and checks for lost notices every [`CHECK_EVERY`], for
/// as long as the followers live.
async fn keep_up(followers: Weak<Followers>) {
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(followers) = followers.upgrade() else { return };
        followers.check().await;
        if renewed.elapsed() >= RENEW_EVERY {
            renewed = tokio::time::Instant::now();
            followers.renew().await;
        }
    }
}
