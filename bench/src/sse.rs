//! The client side of a run: the RunAgentInput body, the POST, and an SSE reader that counts
//! what arrives without decoding every event (the load tool shares two cores with the server
//! under test). In strict mode (smoke runs) every event is also parsed as JSON and checked.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use memchr::memmem;
use serde_json::{json, Value};

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::http::{Body, Client, Response};

/// A RunAgentInput with one user message. `bench` goes into `forwardedProps.bench`: the peers
/// read what to stream from it; the gateway ignores it (its `script` agent is configured).
pub fn run_body(thread_id: &str, run_id: &str, bench: &Value) -> String {
    json!({
        "threadId": thread_id,
        "runId": run_id,
        "protocolVersion": "1.0",
        "state": {},
        "messages": [{ "id": format!("{run_id}-user"), "role": "user", "content": "bench" }],
        "tools": [],
        "context": [],
        "forwardedProps": { "bench": bench },
    })
    .to_string()
}

/// POSTs a run (optionally resuming after `last_event_id`) and checks that an SSE stream opens.
pub async fn open(client: &Client, url: &str, body: String, last_event_id: Option<&str>) -> Result<Response> {
    let mut headers = vec![("Accept", "text/event-stream")];
    if let Some(id) = last_event_id {
        headers.push(("Last-Event-ID", id));
    }
    let mut response = client.post(url, &body, &headers).await?;
    if response.status != 200 {
        let mut text = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), response.body.read_into(&mut text)).await;
        bail!(
            "POST {url} answered {}: {}",
            response.status,
            String::from_utf8_lossy(&text).chars().take(300).collect::<String>()
        );
    }
    let content_type = response.header("content-type").unwrap_or("");
    if !content_type.starts_with("text/event-stream") {
        bail!("POST {url} answered {content_type:?}, not text/event-stream");
    }
    Ok(response)
}

/// What to do while reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// Parse every event as JSON and check ids increase (smoke runs).
    pub strict: bool,
    /// Stop after this many events (idle streams read their first events, then wait).
    pub stop_after: Option<u64>,
    /// Stop after this many `gateway.tick` events.
    pub stop_after_ticks: Option<usize>,
    /// Record append→receive latency of `gateway.tick` events.
    pub ticks: bool,
    /// Record model→receive latency of text deltas that carry the microsecond they left the
    /// model (` t<micros>`, the chat scenario's scripted model, or ` t<micros> n<k>`, the
    /// upstream scenario's server), and keep `STATE_DELTA`s.
    pub tokens: bool,
}

/// One `gateway.tick` as received.
#[derive(Debug, Clone, Copy)]
pub struct TickSample {
    /// Wall-clock microsecond it arrived.
    pub received_us: u64,
    /// Arrival minus `madeAtUs`, in microseconds.
    pub latency_us: u64,
}

/// One model token as received (chat scenario), or one upstream delta (upstream scenario).
#[derive(Debug, Clone, Copy)]
pub struct TokenSample {
    /// Wall-clock microsecond the model server sent it (the token's text).
    pub sent_us: u64,
    /// Wall-clock microsecond it arrived.
    pub received_us: u64,
    /// The sender's index of it, when the text carries one after the stamp (` t<micros> n<k>`,
    /// the upstream scenario's server): a lost, repeated or reordered delta shows.
    pub seq: Option<u64>,
}

/// What a stream delivered.
#[derive(Debug, Default)]
pub struct Received {
    pub events: u64,
    pub content_events: u64,
    pub data_bytes: u64,
    /// Socket reads that brought body bytes.
    pub chunks: u64,
    pub first_at: Option<Instant>,
    pub last_at: Option<Instant>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    /// `RUN_FINISHED` or `RUN_ERROR` once the run ended.
    pub terminal: Option<String>,
    /// The terminal event's JSON when it was a `RUN_ERROR`.
    pub error: Option<String>,
    pub ticks: Vec<TickSample>,
    /// With [`ReadOptions::tokens`]: the model tokens, in arrival order.
    pub tokens: Vec<TokenSample>,
    pub tool_call_starts: u64,
    pub tool_call_results: u64,
    /// With [`ReadOptions::tokens`]: every `STATE_DELTA`'s JSON.
    pub state_deltas: Vec<String>,
    last_seq: Option<u64>,
}

impl Received {
    /// Fails unless the run ended with `RUN_FINISHED`.
    pub fn expect_finished(&self, what: &str) -> Result<()> {
        match self.terminal.as_deref() {
            Some("RUN_FINISHED") => Ok(()),
            Some(_) => bail!("{what}: the run ended with RUN_ERROR: {}", self.error.as_deref().unwrap_or("")),
            None => bail!("{what}: the stream ended after {} events without RUN_FINISHED", self.events),
        }
    }
}

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// An open event stream and the bytes received but not yet handled.
pub struct EventStream {
    body: Body,
    pending: Vec<u8>,
    /// Bytes of `pending` already handled (dropped once per chunk, not per frame).
    consumed: usize,
    /// Where the search for the next frame end resumes in `pending`.
    scanned: usize,
}

impl EventStream {
    pub fn new(response: Response) -> EventStream {
        EventStream { body: response.body, pending: Vec::with_capacity(16 * 1024), consumed: 0, scanned: 0 }
    }

    /// Reads until the terminal event, the end of the stream, or a `stop_after*` bound of
    /// `options`; frames after the stopping one stay buffered for the next call.
    pub async fn read(&mut self, received: &mut Received, options: ReadOptions) -> Result<()> {
        let mut now = Instant::now();
        let stamps = options.ticks || options.tokens;
        let mut now_us = if stamps { wall_us() } else { 0 };
        loop {
            while let Some(offset) = memmem::find(&self.pending[self.scanned..], b"\n\n") {
                let end = self.scanned + offset;
                let frame = &self.pending[self.consumed..end];
                let done = on_frame(frame, received, options, now, now_us)?;
                self.consumed = end + 2;
                self.scanned = self.consumed;
                if done {
                    return Ok(());
                }
            }
            self.pending.drain(..self.consumed);
            self.consumed = 0;
            // A frame without its end yet: search on from its last byte next time.
            self.scanned = self.pending.len().saturating_sub(1);
            if !self.body.read_into(&mut self.pending).await.context("reading the event stream")? {
                return Ok(());
            }
            received.chunks += 1;
            now = Instant::now();
            now_us = if stamps { wall_us() } else { 0 };
        }
    }
}

/// Reads a whole stream (see [`EventStream::read`]).
pub async fn read(response: Response, received: &mut Received, options: ReadOptions) -> Result<EventStream> {
    let mut stream = EventStream::new(response);
    stream.read(received, options).await?;
    Ok(stream)
}

/// Handles one frame; true when reading should stop.
fn on_frame(frame: &[u8], received: &mut Received, options: ReadOptions, now: Instant, now_us: u64) -> Result<bool> {
    let mut id: Option<&[u8]> = None;
    let mut data: Option<&[u8]> = None;
    for line in frame.split(|b| *b == b'\n') {
        if let Some(value) = line.strip_prefix(b"data: ") {
            if data.is_some() {
                bail!("an event with several data lines (one JSON line per event expected)");
            }
            data = Some(value);
        } else if let Some(value) = line.strip_prefix(b"id: ") {
            id = Some(value);
        } else if line.contains(&b'\r') {
            bail!("a CR in the event stream");
        }
    }
    let Some(data) = data else {
        return Ok(false); // a comment (keepalive)
    };
    received.events += 1;
    received.data_bytes += data.len() as u64;
    received.first_at.get_or_insert(now);
    received.last_at = Some(now);
    if let Some(id) = id {
        let id = std::str::from_utf8(id).map_err(|_| Error::msg("an id that is not UTF-8"))?;
        if received.first_id.is_none() {
            received.first_id = Some(id.to_string());
        }
        if options.strict {
            check_increasing(id, &mut received.last_seq)?;
        }
        received.last_id = Some(id.to_string());
    }
    let kind = event_type(data).context("an event without a \"type\"")?;
    if options.strict {
        let value: Value = serde_json::from_slice(data)
            .with_context(|| format!("an event that is not JSON: {}", String::from_utf8_lossy(data)))?;
        if value.get("type").and_then(Value::as_str) != std::str::from_utf8(kind).ok() {
            bail!("an event whose type is not its first \"type\": {value}");
        }
    }
    match kind {
        b"TEXT_MESSAGE_CONTENT" => {
            received.content_events += 1;
            if options.tokens {
                if let Some((sent_us, seq)) = stamp_and_seq(data) {
                    received.tokens.push(TokenSample { sent_us, received_us: now_us, seq });
                }
            }
        }
        b"TOOL_CALL_START" => received.tool_call_starts += 1,
        b"TOOL_CALL_RESULT" => received.tool_call_results += 1,
        b"STATE_DELTA" if options.tokens => received.state_deltas.push(String::from_utf8_lossy(data).into_owned()),
        b"CUSTOM" if options.ticks => {
            if let Some(made) = number_after(data, b"\"madeAtUs\":") {
                received.ticks.push(TickSample { received_us: now_us, latency_us: now_us.saturating_sub(made) });
                if options.stop_after_ticks.is_some_and(|n| received.ticks.len() >= n) {
                    return Ok(true);
                }
            }
        }
        b"RUN_FINISHED" | b"RUN_ERROR" => {
            let kind = String::from_utf8_lossy(kind).into_owned();
            if kind == "RUN_ERROR" {
                received.error = Some(String::from_utf8_lossy(data).into_owned());
            }
            received.terminal = Some(kind);
            return Ok(true);
        }
        _ => {}
    }
    Ok(options.stop_after.is_some_and(|n| received.events >= n))
}

/// The value of the first `"type":"…"` in an event (the envelope's own: it comes first).
fn event_type(data: &[u8]) -> Option<&[u8]> {
    let at = memmem::find(data, b"\"type\":\"")? + 8;
    let len = memchr::memchr(b'"', &data[at..])?;
    Some(&data[at..at + len])
}

fn number_after(data: &[u8], key: &[u8]) -> Option<u64> {
    let at = memmem::find(data, key)? + key.len();
    leading_number(&data[at..]).map(|(n, _)| n)
}

/// The number `bytes` starts with, and how many digits it had.
fn leading_number(bytes: &[u8]) -> Option<(u64, usize)> {
    let len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = std::str::from_utf8(&bytes[..len]).ok()?.parse().ok()?;
    Some((n, len))
}

/// A delta's ` t<micros>` stamp and, right after it, its ` n<k>` index when it has one.
fn stamp_and_seq(data: &[u8]) -> Option<(u64, Option<u64>)> {
    const KEY: &[u8] = b"\"delta\":\" t";
    let at = memmem::find(data, KEY)? + KEY.len();
    let (stamp, len) = leading_number(&data[at..])?;
    let seq = data[at + len..].strip_prefix(b" n").and_then(leading_number).map(|(k, _)| k);
    Some((stamp, seq))
}

/// Gateway ids are `<turn>.<seq>`: the seq must grow along a stream.
fn check_increasing(id: &str, last: &mut Option<u64>) -> Result<()> {
    let Some(seq) = id.rsplit_once('.').and_then(|(_, s)| s.parse::<u64>().ok()) else {
        return Ok(()); // not a gateway id (a peer's): nothing to check
    };
    if last.is_some_and(|last| seq <= last) {
        bail!("event id {id} does not increase after seq {last:?}");
    }
    *last = Some(seq);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_type_and_tick_time_are_found_without_parsing() {
        let data =
            br#"{"type":"CUSTOM","timestamp":1,"name":"gateway.tick","value":{"n":3,"madeAtUs":1700000000000123}}"#;
        assert_eq!(event_type(data), Some(&b"CUSTOM"[..]));
        assert_eq!(number_after(data, b"\"madeAtUs\":"), Some(1_700_000_000_000_123));
        let token = br#"data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":" t1700000000000456"}"#;
        let mut received = Received::default();
        let options = ReadOptions { tokens: true, ..ReadOptions::default() };
        assert!(!on_frame(token, &mut received, options, Instant::now(), 1_700_000_000_001_000).expect("frame"));
        assert_eq!(received.tokens.len(), 1);
        assert_eq!(received.tokens[0].sent_us, 1_700_000_000_000_456);
        assert_eq!(received.tokens[0].seq, None);
        let delta = br#"data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":" t1700000000000789 n41 xxxx"}"#;
        assert!(!on_frame(delta, &mut received, options, Instant::now(), 1_700_000_000_001_000).expect("frame"));
        assert_eq!((received.tokens[1].sent_us, received.tokens[1].seq), (1_700_000_000_000_789, Some(41)));
    }

    #[test]
    fn frames_are_counted_and_the_terminal_event_stops_reading() {
        let mut received = Received::default();
        let options = ReadOptions { strict: true, ..ReadOptions::default() };
        let now = Instant::now();
        let frame = br#"id: t1.1
data: {"type":"TEXT_MESSAGE_CONTENT","delta":"x"}"#;
        assert!(!on_frame(frame, &mut received, options, now, 0).expect("frame"));
        assert!(!on_frame(b": keepalive", &mut received, options, now, 0).expect("comment"));
        let end = br#"id: t1.2
data: {"type":"RUN_FINISHED","outcome":{"type":"success"}}"#;
        assert!(on_frame(end, &mut received, options, now, 0).expect("frame"));
        assert_eq!((received.events, received.content_events), (2, 1));
        assert_eq!(received.terminal.as_deref(), Some("RUN_FINISHED"));
        assert_eq!(received.last_id.as_deref(), Some("t1.2"));
        let again = br#"id: t1.2
data: {"type":"X"}"#;
        assert!(on_frame(again, &mut received, options, now, 0).is_err());
    }
}
