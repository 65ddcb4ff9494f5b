//! Stream wake-ups: one [`Feed`] per turn that someone is writing or watching.
//!
//! A feed carries the turn's newest committed sequence number (a `watch`, so a stream that
//! checked the log and then waits can never miss a wake-up) and the recently committed events
//! themselves, so live streams read them from memory instead of the database: for turns this
//! instance runs, from its own log writer; for turns another instance runs, once this instance
//! follows them ([`Following`], `followers.rs`), from the other instance's notices or one read
//! of the table per notice, whatever the number of streams. Feeds are held by whoever uses
//! them; the hub only keeps weak references.
//!
//! A thread being watched (a connect stream) has a [`ThreadWatch`] too: woken when a turn
//! starts on it, here or (by the start's announcement) on another instance, so the stream looks
//! for the new turn without polling the table.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::store::StoredEvent;

/// Most events a feed keeps in memory; older ones are read from the log.
const FEED_CAPACITY: usize = 16_384;

#[derive(Default)]
pub struct Hub {
    feeds: Mutex<HashMap<i64, Weak<Feed>>>,
    threads: Mutex<HashMap<i64, Weak<ThreadWatch>>>,
    /// How this instance follows turns another instance runs (none on a store no other
    /// instance shares: streams read the table when woken).
    following: OnceLock<Arc<dyn Following>>,
}

/// Follows turns another instance runs, so that their feeds here are kept filled.
pub trait Following: Send + Sync {
    /// Starts following the turn (its streams here have read the table up to the feed's
    /// [`Feed::filled_to`]): from then on the feed's memory is kept filled ([`Feed::fill`])
    /// and [`Feed::is_followed`].
    fn follow(&self, turn: i64, feed: Arc<Feed>);
}

/// Where events handed to a feed come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// This instance's log writer: every event, in order.
    Writer,
    /// A read of the table after the feed's memory.
    Table,
    /// Another instance's notice.
    Notice,
}

/// What a stream does next with a feed ([`Feed::next_after`]).
pub enum Next {
    /// The events after its position, from memory.
    Events(Vec<StoredEvent>),
    /// Memory holds everything committed that this instance knows of: wait for a wake-up.
    Wait,
    /// Memory does not reach back to its position (or is not kept): read the table.
    ReadLog,
}

/// Wakes whoever watches a thread when a turn may have started on it. A counter in a `watch`,
/// so a stream that looked at the thread's turns and then waits cannot miss a start.
pub struct ThreadWatch {
    started: watch::Sender<u64>,
}

impl ThreadWatch {
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.started.subscribe()
    }

    fn wake(&self) {
        self.started.send_modify(|count| *count = count.wrapping_add(1));
    }
}

pub struct Feed {
    committed: watch::Sender<i64>,
    recent: RwLock<VecDeque<StoredEvent>>,
    /// Set while this instance runs the turn: its writer publishes every event into memory, so
    /// streams need not poll the table.
    local: AtomicBool,
    /// Set while this instance runs a turn it started: every event of its log goes through
    /// memory, so while memory holds none there is none in the table either.
    from_start: AtomicBool,
    /// When the writer last published into this feed (nanoseconds after [`clock_base`], plus
    /// one; 0: not since the last wake-up from elsewhere), for the streams' wake-up time.
    published_at: AtomicU64,
    /// Set once this instance follows the turn another instance runs: memory is kept filled
    /// up to `filled_to`.
    followed: AtomicBool,
    /// Set when following was asked for (once per feed, until it leaves or fails).
    follow_asked: AtomicBool,
    /// Newest sequence number memory holds every event up to (from its front).
    filled_to: AtomicI64,
    /// Set while a read of the table fills memory (one at a time per feed).
    filling: AtomicBool,
    /// The newest sequence number a fill asked for while one was under way wants (0: none):
    /// that one reads once more unless it already reached it.
    fill_wanted: AtomicI64,
}

/// The instant feeds count their publish times from (an `Instant` does not fit an atomic).
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Feed {
    fn new() -> Feed {
        Feed {
            committed: watch::channel(0).0,
            recent: RwLock::new(VecDeque::new()),
            local: AtomicBool::new(false),
            from_start: AtomicBool::new(false),
            published_at: AtomicU64::new(0),
            followed: AtomicBool::new(false),
            follow_asked: AtomicBool::new(false),
            filled_to: AtomicI64::new(0),
            filling: AtomicBool::new(false),
            fill_wanted: AtomicI64::new(0),
        }
    }

    /// What a stream at `after_seq` does next: take events from memory, wait, or read the log.
    pub fn next_after(&self, after_seq: i64, limit: usize) -> Next {
        if let Some(events) = self.recent_after(after_seq, limit) {
            if !events.is_empty() {
                return Next::Events(events);
            }
            if self.is_local() {
                return Next::Wait;
            }
        }
        // A turn started here has written nothing yet: its first events will come to memory
        // (the stream of the run that started it waits for them rather than reading the table).
        if self.is_local() && self.from_start.load(Ordering::Acquire) && self.holds_nothing() {
            return Next::Wait;
        }
        // Followed, or following asked for and not yet under way or failed: memory holds (or
        // is about to hold) everything after `filled_to`, so a stream caught up with it waits
        // for the feed rather than reading the table on its own.
        if (self.is_followed() || self.follow_asked.load(Ordering::Acquire)) && after_seq >= self.filled_to() {
            return Next::Wait;
        }
        Next::ReadLog
    }

    /// Whether this instance follows the turn (run elsewhere) and keeps memory filled.
    pub fn is_followed(&self) -> bool {
        self.followed.load(Ordering::Acquire)
    }

    /// The newest sequence number memory holds every event up to.
    pub fn filled_to(&self) -> i64 {
        self.filled_to.load(Ordering::Acquire)
    }

    /// Asks for following once; `true` for the one caller that is to start it.
    pub(super) fn ask_to_follow(&self) -> bool {
        !self.is_local() && !self.follow_asked.swap(true, Ordering::AcqRel)
    }

    /// Memory is to be filled from after `from` (where the stream that asked for following
    /// read the table up to): no stream here needs an older event from it.
    pub fn fill_from(&self, from: i64) {
        self.filled_to.fetch_max(from, Ordering::AcqRel);
    }

    /// Following started: memory is kept filled from now on.
    pub fn now_followed(&self) {
        self.followed.store(true, Ordering::Release);
        self.committed.send_modify(|_| {});
    }

    /// Following failed or stopped: streams read the table again (and may ask again).
    pub fn not_followed(&self) {
        self.followed.store(false, Ordering::Release);
        self.follow_asked.store(false, Ordering::Release);
        self.committed.send_modify(|_| {});
    }

    /// Takes the feed's one fill slot; `false` when a fill is already under way.
    pub fn start_filling(&self) -> bool {
        let took = !self.filling.swap(true, Ordering::AcqRel);
        if took {
            self.fill_wanted.store(0, Ordering::Release);
        }
        took
    }

    /// A fill up to `wanted` was asked for while one is under way: that one reads once more
    /// if it stops short of it.
    pub fn fill_again(&self, wanted: i64) {
        self.fill_wanted.fetch_max(wanted, Ordering::AcqRel);
    }

    /// Gives the fill slot back; `true` when it was taken again at once because a fill asked
    /// for meanwhile wants more than memory holds (the caller reads once more).
    pub fn done_filling(&self) -> bool {
        let wanted = self.fill_wanted.swap(0, Ordering::AcqRel);
        self.filling.store(false, Ordering::Release);
        (wanted > self.filled_to() || self.fill_wanted.load(Ordering::Acquire) > self.filled_to())
            && self.start_filling()
    }

    /// Gives the fill slot back after a failed read (nothing is read again).
    pub fn release_filling(&self) {
        self.filling.store(false, Ordering::Release);
    }

    /// Events read from the table after `filled_to` (a gap in the log, events of a batch that
    /// never committed, is no reason to refuse them).
    pub fn fill_after_read(&self, events: Vec<StoredEvent>) {
        self.store_events(events, Source::Table);
    }

    /// Events of a turn run elsewhere, from its runner's notice, in order: those after
    /// `filled_to` join memory when they follow on from it. Returns
    /// `false` when they do not (a notice was missed): the table is to be read.
    pub fn fill(&self, events: Vec<StoredEvent>) -> bool {
        self.store_events(events, Source::Notice)
    }

    /// When this instance's writer last handed events to this feed, if that is what the latest
    /// wake-up was (not a wake-up from another instance or a turn leaving).
    pub fn published_at(&self) -> Option<Instant> {
        match self.published_at.load(Ordering::Acquire) {
            0 => None,
            nanos => clock_base().checked_add(Duration::from_nanos(nanos - 1)),
        }
    }

    /// A receiver that is woken whenever the turn's log may have grown.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.committed.subscribe()
    }

    /// Events after `after_seq` held in memory, when memory holds the very next one. `None`
    /// means "read the log instead".
    pub fn recent_after(&self, after_seq: i64, limit: usize) -> Option<Vec<StoredEvent>> {
        let recent = self.recent.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = recent.front()?.seq;
        if after_seq + 1 < first {
            return None;
        }
        let skip = usize::try_from(after_seq + 1 - first).ok()?;
        Some(recent.iter().skip(skip).take(limit).cloned().collect())
    }

    /// Whether this instance writes the turn (so its memory holds every new event).
    pub fn is_local(&self) -> bool {
        self.local.load(Ordering::Acquire)
    }

    /// This instance runs the turn from now on.
    pub fn enter(&self) {
        self.from_start.store(false, Ordering::Release);
        self.local.store(true, Ordering::Release);
    }

    /// This instance runs the turn from its start (it started it: its log is empty), so every
    /// event of it will be published here.
    pub fn enter_at_start(&self) {
        self.from_start.store(true, Ordering::Release);
        self.local.store(true, Ordering::Release);
    }

    fn holds_nothing(&self) -> bool {
        self.recent.read().unwrap_or_else(|poisoned| poisoned.into_inner()).is_empty()
    }

    /// This instance stopped running the turn (it ended, moved or was lost): its memory may no
    /// longer hold every new event, so streams read the log again, starting now (and follow
    /// the turn where it went).
    pub fn leave(&self) {
        self.local.store(false, Ordering::Release);
        self.from_start.store(false, Ordering::Release);
        self.published_at.store(0, Ordering::Release);
        self.followed.store(false, Ordering::Release);
        self.follow_asked.store(false, Ordering::Release);
        self.committed.send_modify(|_| {});
    }

    /// Events just committed by this instance's writer, in order.
    fn publish(&self, events: Vec<StoredEvent>) {
        self.store_events(events, Source::Writer);
    }

    /// Events into memory, in order, and the streams woken. From elsewhere, only those after
    /// `filled_to` are taken (checked under the lock, so a notice and a read of the table that
    /// overlap join up); a notice's must follow on from it, else nothing is taken and `false`
    /// says the table is to be read.
    fn store_events(&self, events: Vec<StoredEvent>, source: Source) -> bool {
        let last = {
            let mut recent = self.recent.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            let events: Vec<StoredEvent> = match source {
                Source::Writer => events,
                Source::Table | Source::Notice => {
                    let filled = self.filled_to();
                    let fresh: Vec<StoredEvent> = events.into_iter().filter(|e| e.seq > filled).collect();
                    if source == Source::Notice && fresh.first().is_some_and(|e| e.seq != filled + 1) {
                        return false;
                    }
                    fresh
                }
            };
            let Some(last) = events.last().map(|e| e.seq) else {
                return true;
            };
            for event in events {
                // Keep the window contiguous: a gap (a takeover mid-turn) starts it afresh.
                if recent.back().is_some_and(|back| back.seq + 1 != event.seq) {
                    recent.clear();
                }
                recent.push_back(event);
                if recent.len() > FEED_CAPACITY {
                    recent.pop_front();
                }
            }
            self.filled_to.fetch_max(last, Ordering::AcqRel);
            last
        };
        let nanos = u64::try_from(clock_base().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        let nanos = if source == Source::Writer { nanos + 1 } else { 0 };
        self.published_at.store(nanos, Ordering::Release);
        self.committed.send_if_modified(|seq| {
            let grew = last > *seq;
            *seq = (*seq).max(last);
            grew
        });
        true
    }

    /// Another instance appended up to `seq` (or `None`: something may have been missed).
    fn wake(&self, seq: Option<i64>) {
        self.published_at.store(0, Ordering::Release);
        match seq {
            Some(seq) => {
                self.committed.send_if_modified(|current| {
                    let grew = seq > *current;
                    *current = (*current).max(seq);
                    grew
                });
            }
            None => self.committed.send_modify(|_| {}),
        }
    }
}

impl Hub {
    /// The turn's feed, created on first use.
    pub fn feed(&self, turn: i64) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(feed) = feeds.get(&turn).and_then(Weak::upgrade) {
            return feed;
        }
        if feeds.len() > 1024 && feeds.len().is_power_of_two() {
            feeds.retain(|_, feed| feed.strong_count() > 0);
        }
        let feed = Arc::new(Feed::new());
        feeds.insert(turn, Arc::downgrade(&feed));
        feed
    }

    /// How this instance follows turns run elsewhere (set once, at start).
    pub fn set_following(&self, following: Arc<dyn Following>) {
        let _ = self.following.set(following);
    }

    /// A stream read the table up to `from` and found nothing newer of a turn run elsewhere:
    /// this instance follows the turn from now on (once per feed).
    pub fn follow(&self, turn: i64, feed: &Arc<Feed>, from: i64) {
        if let Some(following) = self.following.get() {
            if feed.ask_to_follow() {
                // From now on the streams caught up to `from` wait for the feed.
                feed.fill_from(from);
                following.follow(turn, feed.clone());
            }
        }
    }

    /// Every live feed of a turn run elsewhere, with its turn.
    pub fn remote_feeds(&self) -> Vec<(i64, Arc<Feed>)> {
        let feeds = self.feeds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        feeds
            .iter()
            .filter_map(|(turn, feed)| Some((*turn, feed.upgrade()?)))
            .filter(|(_, feed)| !feed.is_local())
            .collect()
    }

    pub fn existing(&self, turn: i64) -> Option<Arc<Feed>> {
        let feeds = self.feeds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        feeds.get(&turn).and_then(Weak::upgrade)
    }

    /// The thread's watch, created on first use.
    pub fn thread_watch(&self, thread: i64) -> Arc<ThreadWatch> {
        let mut threads = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(watch) = threads.get(&thread).and_then(Weak::upgrade) {
            return watch;
        }
        if threads.len() > 1024 && threads.len().is_power_of_two() {
            threads.retain(|_, watch| watch.strong_count() > 0);
        }
        let watch = Arc::new(ThreadWatch { started: watch::channel(0).0 });
        threads.insert(thread, Arc::downgrade(&watch));
        watch
    }

    /// A turn started on `thread`: its watches look for it.
    pub fn wake_thread(&self, thread: i64) {
        let watch =
            self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&thread).and_then(Weak::upgrade);
        if let Some(watch) = watch {
            watch.wake();
        }
    }

    /// Announcements of turn starts may have been lost: every watch looks again.
    pub fn wake_every_thread(&self) {
        let watches: Vec<Arc<ThreadWatch>> = {
            let threads = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            threads.values().filter_map(Weak::upgrade).collect()
        };
        for watch in watches {
            watch.wake();
        }
    }

    /// Called by the writer after a commit with the turn's new events.
    pub fn publish(&self, turn: i64, events: Vec<StoredEvent>) {
        if let Some(feed) = self.existing(turn) {
            feed.publish(events);
        }
    }

    /// Another instance committed the turn's events up to `seq` (for streams that read the
    /// table themselves: a turn this instance does not follow).
    pub fn wake(&self, turn: i64, seq: i64) {
        if let Some(feed) = self.existing(turn) {
            feed.wake(Some(seq));
        }
    }

    /// Announcements of appends may have been lost: every feed reads its log again.
    pub fn wake_every_feed(&self) {
        let feeds: Vec<Arc<Feed>> = {
            let feeds = self.feeds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            feeds.values().filter_map(Weak::upgrade).collect()
        };
        for feed in feeds {
            feed.wake(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventKind;
    use bytes::Bytes;

    fn event(seq: i64) -> StoredEvent {
        StoredEvent { seq, kind: EventKind::Plain, body: Bytes::from_static(b"{}"), at_ms: 0 }
    }

    #[tokio::test]
    async fn a_publish_wakes_subscribers_and_serves_from_memory() {
        let hub = Hub::default();
        let feed = hub.feed(7);
        let mut woken = feed.subscribe();
        hub.publish(7, vec![event(1), event(2)]);
        woken.changed().await.expect("woken");
        assert_eq!(*woken.borrow(), 2);
        let after_one = feed.recent_after(1, 10).expect("in memory");
        assert_eq!(after_one.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2]);
        assert_eq!(feed.recent_after(2, 10).map(|v| v.len()), Some(0));
    }

    #[test]
    fn a_turn_started_here_is_waited_for_in_memory_and_one_taken_over_is_read() {
        let hub = Hub::default();
        let feed = hub.feed(3);
        feed.enter_at_start();
        assert!(matches!(feed.next_after(0, 10), Next::Wait), "its log is empty: nothing to read");
        hub.publish(3, vec![event(1)]);
        assert!(matches!(feed.next_after(0, 10), Next::Events(events) if events.len() == 1));
        // Taken over (or back after leaving), its log holds what memory does not.
        let taken = hub.feed(4);
        taken.enter();
        assert!(matches!(taken.next_after(0, 10), Next::ReadLog));
        // Handed over before it wrote anything: whoever runs it now writes the table.
        let left = hub.feed(5);
        left.enter_at_start();
        left.leave();
        assert!(matches!(left.next_after(0, 10), Next::ReadLog));
    }

    #[test]
    fn memory_that_does_not_reach_back_far_enough_sends_readers_to_the_log() {
        let hub = Hub::default();
        let feed = hub.feed(1);
        hub.publish(1, vec![event(5), event(6)]);
        assert!(feed.recent_after(2, 10).is_none());
        assert!(feed.recent_after(4, 10).is_some());
    }

    #[tokio::test]
    async fn a_turn_start_wakes_the_watchers_of_its_thread_only() {
        let hub = Hub::default();
        let watch = hub.thread_watch(4);
        let other = hub.thread_watch(5);
        let mut woken = watch.subscribe();
        let not_woken = other.subscribe();
        hub.wake_thread(4);
        woken.changed().await.expect("woken");
        assert!(!not_woken.has_changed().expect("open"));
        hub.wake_every_thread();
        assert!(not_woken.has_changed().expect("open"), "a lost announcement wakes every watch");
    }

    #[test]
    fn a_followed_feed_takes_notices_that_follow_on_and_sends_streams_to_the_log_otherwise() {
        let hub = Hub::default();
        let feed = hub.feed(8);
        assert!(matches!(feed.next_after(0, 10), Next::ReadLog), "not followed: streams read the log");
        feed.fill_from(3);
        feed.now_followed();
        assert!(matches!(feed.next_after(3, 10), Next::Wait), "caught up with what the feed knows");
        assert!(matches!(feed.next_after(1, 10), Next::ReadLog), "memory does not reach back that far");
        assert!(feed.fill(vec![event(4), event(5)]));
        assert!(matches!(feed.next_after(3, 10), Next::Events(events) if events.len() == 2));
        // A notice that overlaps what a read of the table brought joins up.
        feed.fill_after_read(vec![event(5), event(6)]);
        assert!(feed.fill(vec![event(6), event(7)]));
        assert_eq!(feed.filled_to(), 7);
        // One that skips a batch is refused: the table is read instead.
        assert!(!feed.fill(vec![event(9)]));
        assert_eq!(feed.filled_to(), 7);
        match feed.next_after(4, 10) {
            Next::Events(events) => assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![5, 6, 7]),
            _ => panic!("memory holds 5 to 7"),
        }
        // A turn that moves here and leaves again is followed afresh.
        feed.enter();
        feed.leave();
        assert!(!feed.is_followed());
        assert!(feed.ask_to_follow());
        assert!(!feed.ask_to_follow(), "asked once per feed");
    }

    #[test]
    fn while_following_is_under_way_streams_caught_up_wait_and_others_read_the_log() {
        let hub = Hub::default();
        let feed = hub.feed(9);
        assert!(matches!(feed.next_after(5, 10), Next::ReadLog));
        assert!(feed.ask_to_follow());
        feed.fill_from(5);
        assert!(matches!(feed.next_after(5, 10), Next::Wait), "the follow brings what comes after 5");
        assert!(matches!(feed.next_after(2, 10), Next::ReadLog), "3 to 5 are not coming to memory");
        feed.not_followed();
        assert!(matches!(feed.next_after(5, 10), Next::ReadLog), "the follow failed: read the log again");
    }

    #[test]
    fn feeds_live_only_while_someone_holds_them() {
        let hub = Hub::default();
        drop(hub.feed(3));
        assert!(hub.existing(3).is_none());
    }
}
