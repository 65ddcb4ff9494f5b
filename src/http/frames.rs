//! The binary transport's frames of logged events, encoded once and shared by every stream
//! that sends them ([`FrameCache`]).
//!
//! Why: a binary frame is made by parsing the event's JSON, re-shaping it and writing protobuf
//! (`crate::protocol::proto`), several times the work of an SSE frame, which copies the logged
//! JSON as it is. An event the log holds is sent, as it is, to every stream of its turn — the
//! live viewers of a turn, each reconnect, each replay — so its frame is made on first use and
//! then copied, as its JSON is.
//!
//! The log stays the truth: a frame is a rendering of `(event id, JSON)`, and the cache is a
//! memo of that rendering, nothing more. An entry is used only for the same id *and* the same
//! JSON bytes, so whatever the cache holds, a stream sends exactly the frame it would have
//! encoded itself. Only what the engine sends as logged (`StreamItem::as_logged`) goes through
//! it: what is rendered for one caller (run ids, interrupts, redacted state, snapshots) is
//! encoded by its own stream, as before.
//!
//! The cache holds at most [`FRAME_CACHE_BYTES`] (ids, JSON and frames counted); the oldest
//! entries leave first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use crate::protocol::proto::{self, ProtoError};

/// What the frames of one instance may hold in memory: some 20,000 typical events.
pub const FRAME_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Room an entry takes beside its bytes (the map's and the queue's share, the `Bytes` heads).
const ENTRY_OVERHEAD: usize = 96;

/// Binary frames of logged events, by event id (see the module doc).
#[derive(Debug)]
pub struct FrameCache {
    budget: usize,
    held: Mutex<Held>,
    /// Frames encoded through the cache (its misses), for the tests and the figures.
    encoded: AtomicU64,
}

#[derive(Debug, Default)]
struct Held {
    by_id: HashMap<Arc<str>, Entry>,
    /// Ids in the order they came in: the oldest leaves first.
    order: VecDeque<Arc<str>>,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    /// The JSON the frame was made from (a copy: a body may be a slice of a larger buffer).
    json: Bytes,
    frame: Bytes,
}

impl Entry {
    fn size(id: &str, json: &[u8], frame: &[u8]) -> usize {
        id.len() + json.len() + frame.len() + ENTRY_OVERHEAD
    }
}

impl Default for FrameCache {
    fn default() -> FrameCache {
        FrameCache::new(FRAME_CACHE_BYTES)
    }
}

impl FrameCache {
    /// A cache holding at most `budget` bytes.
    pub fn new(budget: usize) -> FrameCache {
        FrameCache { budget, held: Mutex::new(Held::default()), encoded: AtomicU64::new(0) }
    }

    /// The frame of the logged event `json` with id `id`: the one made before for that id and
    /// that JSON, else made now (and kept, room allowing).
    pub fn frame(&self, id: &str, json: &Bytes) -> Result<Bytes, ProtoError> {
        if let Some(entry) = self.lock().by_id.get(id) {
            if entry.json == json {
                return Ok(entry.frame.clone());
            }
        }
        // Encoded outside the lock: two streams meeting a new event at once may both encode
        // it (the second keeps the first's frame), which is cheaper than making every stream
        // wait behind one encoding.
        let mut out = BytesMut::new();
        proto::put_frame(&mut out, id, json)?;
        self.encoded.fetch_add(1, Ordering::Relaxed);
        let frame = out.freeze();
        self.keep(id, json, frame.clone());
        Ok(frame)
    }

    /// How many frames were encoded through the cache.
    pub fn encoded(&self) -> u64 {
        self.encoded.load(Ordering::Relaxed)
    }

    fn keep(&self, id: &str, json: &Bytes, frame: Bytes) {
        let size = Entry::size(id, json, &frame);
        if size > self.budget {
            return;
        }
        let mut held = self.lock();
        if let Some(entry) = held.by_id.get(id) {
            if entry.json == json {
                return;
            }
            // The same id with other JSON (a log erased and its ids used again): the newer wins.
            let old = Entry::size(id, &entry.json, &entry.frame);
            held.bytes -= old;
            held.by_id.remove(id);
            held.order.retain(|kept| &**kept != id);
        }
        while held.bytes + size > self.budget {
            let Some(oldest) = held.order.pop_front() else { break };
            if let Some(entry) = held.by_id.remove(&oldest) {
                held.bytes -= Entry::size(&oldest, &entry.json, &entry.frame);
            }
        }
        let id: Arc<str> = Arc::from(id);
        held.order.push_back(id.clone());
        held.by_id.insert(id, Entry { json: Bytes::copy_from_slice(json), frame });
        held.bytes += size;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> Bytes {
        Bytes::from(format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{text}"}}"#))
    }

    fn encoded_alone(id: &str, json: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        proto::put_frame(&mut out, id, json).expect("framed");
        out.freeze()
    }

    #[test]
    fn an_event_is_encoded_once_and_its_frame_shared() {
        let cache = FrameCache::default();
        let first = cache.frame("t1.3", &delta("hi")).expect("framed");
        // Another stream's copy of the same event (read from the table: other bytes, same JSON).
        let second = cache.frame("t1.3", &delta("hi")).expect("framed");
        assert_eq!(cache.encoded(), 1);
        assert_eq!(first.as_ptr(), second.as_ptr(), "one frame, shared");
        assert_eq!(first, encoded_alone("t1.3", &delta("hi")), "the frame a stream would have made");
    }

    #[test]
    fn a_frame_is_used_only_for_its_own_id_and_json() {
        let cache = FrameCache::default();
        cache.frame("t1.3", &delta("hi")).expect("framed");
        let other_id = cache.frame("t1.4", &delta("hi")).expect("framed");
        assert_eq!(other_id, encoded_alone("t1.4", &delta("hi")), "the id rides in the frame");
        let other_json = cache.frame("t1.3", &delta("ho")).expect("framed");
        assert_eq!(other_json, encoded_alone("t1.3", &delta("ho")));
        assert_eq!(cache.encoded(), 3);
        assert_eq!(cache.frame("t1.3", &delta("ho")).expect("framed"), other_json);
        assert_eq!(cache.encoded(), 3, "the newer JSON of an id is kept");
    }

    #[test]
    fn the_oldest_frames_leave_when_the_budget_is_spent() {
        let one = Entry::size("t1.1", &delta("x"), &encoded_alone("t1.1", &delta("x")));
        let cache = FrameCache::new(2 * one);
        for seq in 1..=3 {
            cache.frame(&format!("t1.{seq}"), &delta("x")).expect("framed");
        }
        assert!(cache.lock().bytes <= 2 * one);
        cache.frame("t1.3", &delta("x")).expect("framed");
        assert_eq!(cache.encoded(), 3, "the newest is kept");
        cache.frame("t1.1", &delta("x")).expect("framed");
        assert_eq!(cache.encoded(), 4, "the oldest left");
    }

    #[test]
    fn an_event_the_schema_does_not_have_is_refused_and_not_kept() {
        let cache = FrameCache::default();
        let unknown = Bytes::from_static(br#"{"type":"SOMETHING_NEW"}"#);
        assert!(cache.frame("t1.1", &unknown).is_err());
        assert!(cache.lock().by_id.is_empty());
    }
}
