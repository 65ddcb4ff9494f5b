//! SSE rendering: `id:` and `data:` lines, LF only, one JSON object per event (the official
//! client splits frames on `\n\n` and fails on CR), and `: keepalive` comments.
//!
//! Framed by hand rather than with `axum::response::sse`: the event JSON is already encoded
//! once in the log and shared among streams, so each frame is two small copies, and consecutive
//! frames go out in one write.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

use crate::engine::StreamItem;

const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// One SSE frame for a stream item.
pub fn frame(item: &StreamItem) -> Bytes {
    match item {
        StreamItem::Event { id, json } => {
            let mut frame = BytesMut::with_capacity(json.len() + id.len() + 14);
            frame.put_slice(b"id: ");
            frame.put_slice(id.as_bytes());
            frame.put_slice(b"\ndata: ");
            frame.put_slice(json);
            frame.put_slice(b"\n\n");
            frame.freeze()
        }
        StreamItem::Keepalive => Bytes::from_static(KEEPALIVE),
    }
}

/// Frames ready together (a catch-up page, a batch committed at once) go out as one chunk.
const MOST_FRAMES_PER_CHUNK: usize = 512;

/// A `200 text/event-stream` response streaming `items`, with proxies told not to buffer it.
pub fn response(items: impl Stream<Item = StreamItem> + Send + 'static) -> Response {
    let chunks = items.ready_chunks(MOST_FRAMES_PER_CHUNK).map(|ready| {
        let mut chunk = BytesMut::new();
        for item in &ready {
            chunk.put_slice(&frame(item));
        }
        Ok::<_, Infallible>(chunk.freeze())
    });
    let body = Body::from_stream(chunks);
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_lf_only_with_an_id() {
        let item = StreamItem::Event { id: "t1.3".into(), json: Bytes::from_static(br#"{"type":"X"}"#) };
        assert_eq!(&frame(&item)[..], b"id: t1.3\ndata: {\"type\":\"X\"}\n\n");
        assert_eq!(&frame(&StreamItem::Keepalive)[..], b": keepalive\n\n");
    }
}
