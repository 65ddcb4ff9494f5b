//! An open stream's life, in one place ([`serve_events`]): the engine hands over the events;
//! this module frames them as SSE (or, for a client that asked for it, as the binary
//! transport's frames: [`Framing`]), sends a `: keepalive` comment when nothing was sent for a
//! while, ends the stream cleanly (resumable with `Last-Event-ID`) at its time cap or when the
//! server shuts down, ends it with `RUN_ERROR revoked` when the caller's right to read ends
//! (§2.1), and holds the stream's slot until it ends.
//!
//! SSE framing: `id:` and `data:` lines, LF only, one JSON object per event (the official
//! client splits frames on `\n\n` and fails on CR), and `: keepalive` comments.
//!
//! Binary framing: each event as `@ag-ui/proto` frames it (`crate::protocol::proto`), its id in
//! its metadata. The format has no comment, so a binary stream sends no keepalive: an empty
//! frame would be an event the official decoder fails on.
//!
//! Framed by hand rather than with `axum::response::sse`: the event JSON is already encoded
//! once in the log and shared among streams, so each frame is two small copies, and consecutive
//! frames go out in one write. A binary frame of an event sent as logged is made once too and
//! shared the same way (`super::frames`).
//!
//! [`StreamSlots`] counts the streams open on this instance, per caller and per thread, so a
//! caller cannot hold an unbounded number of them (`limits.max_streams_per_*`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::watch;

use super::error::{ApiError, ErrorCode};
use super::frames::FrameCache;
use crate::auth::AccessEnd;
use crate::clock::Clock;
use crate::engine::StreamItem;
use crate::protocol::events::Envelope;
use crate::protocol::{proto, Event};

const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// What goes on the wire: an event, or a keepalive comment.
#[derive(Debug)]
enum Outgoing {
    Event(StreamItem),
    Keepalive,
    /// The instance stops with the stream's run unfinished: the body ends broken (no closing
    /// chunk on HTTP/1.1, a reset on HTTP/2), so the client reports the stream as cut instead
    /// of taking it for a run that ended, and a resuming client reconnects (§4.6).
    Cut,
}

/// How a stream's events go on the wire, chosen by the request's `Accept` (`runs.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`: `id:` and `data:` lines.
    Sse,
    /// `application/vnd.ag-ui.event+proto`: length-prefixed protobuf events.
    Binary,
}

impl Framing {
    fn content_type(self) -> &'static str {
        match self {
            Framing::Sse => "text/event-stream",
            Framing::Binary => proto::MEDIA_TYPE,
        }
    }
}

/// Appends the frame of `outgoing` to `chunk`, as `framing` frames it; a binary frame of an
/// event sent as logged comes from `frames` (made there once for every stream).
fn put_frame(chunk: &mut BytesMut, outgoing: &Outgoing, framing: Framing, frames: &FrameCache) {
    if framing == Framing::Binary {
        if let Outgoing::Event(StreamItem { id, json, as_logged }) = outgoing {
            let framed = if *as_logged {
                frames.frame(id, json).map(|frame| chunk.extend_from_slice(&frame))
            } else {
                proto::put_frame(chunk, id, json)
            };
            if let Err(error) = framed {
                // Only an event the 1.0 schema has no message for can get here (an upstream's
                // newer event): the official decoder would drop it too.
                tracing::warn!(%error, event = %id, "an event left out of a binary stream");
            }
        }
        return;
    }
    match outgoing {
        Outgoing::Event(StreamItem { id, json, .. }) => {
            chunk.reserve(json.len() + id.len() + 14);
            chunk.put_slice(b"id: ");
            chunk.put_slice(id.as_bytes());
            chunk.put_slice(b"\ndata: ");
            chunk.put_slice(json);
            chunk.put_slice(b"\n\n");
        }
        Outgoing::Keepalive => chunk.put_slice(KEEPALIVE),
        Outgoing::Cut => {}
    }
}

/// How long an open stream lives, and what ends it before its last event.
pub struct Lifetime {
    /// How the events are framed.
    pub framing: Framing,
    /// A `: keepalive` comment goes out after this long without a frame (between one and two
    /// of it: the timer is not moved for every event).
    pub keepalive: Duration,
    /// The stream ends cleanly after this long; the client continues with `Last-Event-ID`.
    pub max_duration: Duration,
    /// The gateway's clock: the cap is a time of day on it, and the stamp of a lone `RUN_ERROR`.
    pub clock: Arc<dyn Clock>,
    /// Becomes true when the server shuts down: the stream ends broken ([`Outgoing::Cut`]).
    pub shutdown: watch::Receiver<bool>,
    /// Resolves when the caller's right to read ends: the stream ends with `RUN_ERROR revoked`.
    pub access_ends: Pin<Box<dyn Future<Output = AccessEnd> + Send>>,
    /// The instance's binary frames of logged events, shared by its streams.
    pub frames: Arc<FrameCache>,
}

/// A `200 text/event-stream` response streaming `events` for as long as `lifetime` lets it,
/// holding `slot` until the stream ends or its body is dropped (the client went away).
pub fn serve_events(
    events: impl Stream<Item = StreamItem> + Send + 'static,
    lifetime: Lifetime,
    slot: StreamSlot,
) -> Response {
    let Lifetime { framing, keepalive, max_duration, clock, mut shutdown, mut access_ends, frames } = lifetime;
    let ends_at_ms = clock.now_ms().saturating_add(i64::try_from(max_duration.as_millis()).unwrap_or(i64::MAX));
    // Pinned before the body takes it: pinned inside, the engine's stream would take its room
    // twice in the body for as long as the stream lives, once where it was moved from.
    let mut events = Box::pin(events);
    response(
        framing,
        frames,
        async_stream::stream! {
            let _slot = slot;
            let stopping = async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            };
            let mut stopping = std::pin::pin!(stopping);
            let mut cap = clock.sleep_until_ms(ends_at_ms);
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sent_since_tick = false;
            loop {
                tokio::select! {
                    biased;
                    why = &mut access_ends => {
                        if let Ok(item) = lone_run_error(ErrorCode::Revoked, why.message().to_string(), None, clock.now_ms()) {
                            yield Outgoing::Event(item);
                        }
                        return;
                    }
                    () = &mut stopping => {
                        yield Outgoing::Cut;
                        return;
                    }
                    () = &mut cap => return,
                    item = events.next() => match item {
                        Some(item) => {
                            sent_since_tick = true;
                            yield Outgoing::Event(item);
                        }
                        None => return,
                    },
                    _ = ticks.tick() => {
                        if !std::mem::take(&mut sent_since_tick) {
                            yield Outgoing::Keepalive;
                        }
                    }
                }
            }
        },
    )
}

/// A stream of one `RUN_ERROR` that is not of the log (its id is `0`): a refusal, or the end of
/// a stream whose caller may read no more; stamped `at_ms`.
pub fn lone_run_error(
    code: ErrorCode,
    message: String,
    figures: Option<Value>,
    at_ms: i64,
) -> Result<StreamItem, ApiError> {
    let event = Event::RunError { message, code: Some(code.spelled()), usage: None };
    let mut envelope = Envelope::new(event, at_ms);
    envelope.raw_event = figures.map(|figures| serde_json::json!({ "gateway": figures }));
    let json = serde_json::to_vec(&envelope).map_err(|error| ApiError::Internal(Box::new(error)))?;
    Ok(StreamItem::rendered("0".into(), Bytes::from(json)))
}

/// Frames ready together (a catch-up page, a batch committed at once) go out as one chunk.
const MOST_FRAMES_PER_CHUNK: usize = 512;

/// A `200 text/event-stream` response streaming `items` (answers of the gateway's own, none
/// of them as logged: their frames are not shared), holding `slot` until the stream ends or its
/// body is dropped (the client went away, the server closed it).
pub fn response_in_slot(
    items: impl Stream<Item = StreamItem> + Send + 'static,
    slot: StreamSlot,
    framing: Framing,
) -> Response {
    response(
        framing,
        Arc::new(FrameCache::new(0)),
        async_stream::stream! {
            let _slot = slot;
            let mut items = std::pin::pin!(items);
            while let Some(item) = items.next().await {
                yield Outgoing::Event(item);
            }
        },
    )
}

/// A `200` response streaming `items` framed by `framing` (binary frames of logged events from
/// `frames`), with proxies told not to buffer it.
fn response(
    framing: Framing,
    frames: Arc<FrameCache>,
    items: impl Stream<Item = Outgoing> + Send + 'static,
) -> Response {
    let chunks = items.ready_chunks(MOST_FRAMES_PER_CHUNK).flat_map(move |ready| {
        let mut chunk = BytesMut::new();
        for outgoing in &ready {
            put_frame(&mut chunk, outgoing, framing, &frames);
        }
        let mut pieces = vec![Ok(chunk.freeze())];
        if ready.iter().any(|outgoing| matches!(outgoing, Outgoing::Cut)) {
            pieces.push(Err(std::io::Error::other("the instance is stopping; resume with Last-Event-ID")));
        }
        futures_util::stream::iter(pieces)
    });
    let body = Body::from_stream(chunks);
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(framing.content_type()));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The streams open on this instance, by caller and by thread. Counted per instance: behind a
/// load balancer, a caller may hold the limit on each instance.
#[derive(Debug, Default)]
pub struct StreamSlots {
    open: Mutex<OpenCounts>,
}

#[derive(Debug, Default)]
struct OpenCounts {
    by_caller: HashMap<String, usize>,
    by_thread: HashMap<String, usize>,
}

/// Why a stream was refused a slot: which limit it would pass, and that limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRefused {
    Caller(usize),
    Thread(usize),
}

/// The most streams one caller and one thread may hold open.
#[derive(Debug, Clone, Copy)]
pub struct SlotLimits {
    pub per_caller: usize,
    pub per_thread: usize,
}

impl StreamSlots {
    /// Takes a slot for a stream of `caller` on `thread`, unless either holds its limit already.
    pub fn take(
        self: &Arc<Self>,
        caller: String,
        thread: String,
        limits: SlotLimits,
    ) -> Result<StreamSlot, SlotRefused> {
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if open.by_caller.get(&caller).copied().unwrap_or(0) >= limits.per_caller {
            return Err(SlotRefused::Caller(limits.per_caller));
        }
        if open.by_thread.get(&thread).copied().unwrap_or(0) >= limits.per_thread {
            return Err(SlotRefused::Thread(limits.per_thread));
        }
        *open.by_caller.entry(caller.clone()).or_default() += 1;
        *open.by_thread.entry(thread.clone()).or_default() += 1;
        Ok(StreamSlot { slots: self.clone(), caller, thread })
    }

    /// Streams open for `caller`.
    pub fn open_for_caller(&self, caller: &str) -> usize {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).by_caller.get(caller).copied().unwrap_or(0)
    }
}

/// One open stream's place in [`StreamSlots`], given back when dropped.
#[derive(Debug)]
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    caller: String,
    thread: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let OpenCounts { by_caller, by_thread } = &mut *open;
        for (counts, key) in [(by_caller, &self.caller), (by_thread, &self.thread)] {
            if let Some(count) = counts.get_mut(key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_per_caller_and_thread_and_given_back() {
        let slots = Arc::new(StreamSlots::default());
        let limits = SlotLimits { per_caller: 2, per_thread: 3 };
        let a1 = slots.take("a".into(), "t1".into(), limits).expect("first");
        let _a2 = slots.take("a".into(), "t2".into(), limits).expect("second");
        assert_eq!(slots.take("a".into(), "t3".into(), limits).err(), Some(SlotRefused::Caller(2)));
        let _b1 = slots.take("b".into(), "t1".into(), limits).expect("another caller");
        let _c1 = slots.take("c".into(), "t1".into(), limits).expect("a third on t1");
        assert_eq!(slots.take("d".into(), "t1".into(), limits).err(), Some(SlotRefused::Thread(3)));
        drop(a1);
        assert_eq!(slots.open_for_caller("a"), 1);
        slots.take("a".into(), "t3".into(), limits).expect("a slot given back is free again");
    }

    #[test]
    fn frames_are_lf_only_with_an_id() {
        let item = StreamItem { id: "t1.3".into(), json: Bytes::from_static(br#"{"type":"X"}"#), as_logged: true };
        let mut chunk = BytesMut::new();
        let frames = FrameCache::default();
        put_frame(&mut chunk, &Outgoing::Event(item), Framing::Sse, &frames);
        put_frame(&mut chunk, &Outgoing::Keepalive, Framing::Sse, &frames);
        assert_eq!(&chunk[..], b"id: t1.3\ndata: {\"type\":\"X\"}\n\n: keepalive\n\n");
    }

    #[test]
    fn binary_frames_carry_no_keepalive() {
        let json = Bytes::from_static(br#"{"type":"RUN_ERROR","message":"m"}"#);
        let item = StreamItem { id: "t1.3".into(), json, as_logged: false };
        let mut chunk = BytesMut::new();
        let frames = FrameCache::default();
        put_frame(&mut chunk, &Outgoing::Keepalive, Framing::Binary, &frames);
        assert!(chunk.is_empty(), "no frame for a keepalive");
        put_frame(&mut chunk, &Outgoing::Event(item), Framing::Binary, &frames);
        let length = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) as usize;
        assert_eq!(length + 4, chunk.len());
    }

    /// The body of a binary response of `items`, framed with `frames`.
    async fn binary_body(items: Vec<StreamItem>, frames: &Arc<FrameCache>) -> Bytes {
        let outgoing = futures_util::stream::iter(items.into_iter().map(Outgoing::Event));
        let response = response(Framing::Binary, frames.clone(), outgoing);
        axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("the body")
    }

    #[tokio::test]
    async fn streams_of_one_event_share_its_frame_and_a_callers_own_rendering_is_its_own() {
        let logged = |seq: u32, text: &str| StreamItem {
            id: format!("t1.{seq}"),
            json: Bytes::from(format!(r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{text}"}}"#)),
            as_logged: true,
        };
        // Rendered for its caller (a redacted state, say): never taken for another's.
        let own = StreamItem {
            id: "t1.3".into(),
            json: Bytes::from_static(br#"{"type":"STATE_SNAPSHOT","snapshot":{"board":{"notes":[]}}}"#),
            as_logged: false,
        };
        let frames = Arc::new(FrameCache::default());
        let first = binary_body(vec![logged(1, "a"), logged(2, "b"), own.clone()], &frames).await;
        assert_eq!(frames.encoded(), 2, "each logged event encoded once");
        // Another stream of the same events, its copies read apart (other bytes, same JSON).
        let second = binary_body(vec![logged(1, "a"), logged(2, "b"), own.clone()], &frames).await;
        assert_eq!(frames.encoded(), 2, "the second stream copies the frames it can share");
        assert_eq!(first, second);
        // What it sends is what each stream would have encoded on its own.
        let mut alone = BytesMut::new();
        for item in [logged(1, "a"), logged(2, "b"), own] {
            proto::put_frame(&mut alone, &item.id, &item.json).expect("framed");
        }
        assert_eq!(first, alone.freeze());
    }
}
