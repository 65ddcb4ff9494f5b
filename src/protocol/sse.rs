//! Reading a Server-Sent Events stream: the one decoder for every SSE stream the gateway reads
//! (an upstream AG-UI server, an OpenAI-compatible model) and for its tests.
//!
//! It follows the WHATWG event-stream grammar: lines end at CRLF, LF or a lone CR; `data`
//! lines of one event are joined with `\n`; `id` sets the last event id (kept across events, as
//! a browser keeps it, and never one containing NUL); `event` names the event; a line starting
//! with `:` is a comment; an event is dispatched at a blank line. Bytes are kept until their
//! line ends, so a line or a multi-byte character cut between two network chunks is decoded
//! whole. A line that is not UTF-8 is decoded lossily (U+FFFD), never dropped.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseMessage {
    /// The `event` field; empty for the default (`message`).
    pub event: String,
    /// The `data` lines, joined by `\n`.
    pub data: String,
    /// The last event id as it stands at this event (set by this event or an earlier one).
    pub id: Option<String>,
    /// Whether this event carried an `id` field itself.
    pub has_own_id: bool,
}

/// The decoder's state between chunks.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line not yet ended.
    pending: Vec<u8>,
    /// The previous chunk ended with CR: a LF starting this one belongs to it.
    after_cr: bool,
    data: String,
    has_data: bool,
    event: String,
    last_id: Option<String>,
    own_id: bool,
    comments: usize,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds the next chunk of the stream; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseMessage> {
        let mut events = Vec::new();
        let mut start = 0;
        let mut at = 0;
        if self.after_cr && chunk.first() == Some(&b'\n') {
            start = 1;
            at = 1;
        }
        self.after_cr = false;
        // Line ends found with memchr: a relayed stream is mostly long `data:` lines, which a
        // byte-at-a-time loop would walk one byte at a time.
        while let Some(offset) = memchr::memchr2(b'\n', b'\r', &chunk[at..]) {
            at += offset;
            let line_end = at;
            if chunk[at] == b'\r' {
                match chunk.get(at + 1) {
                    Some(b'\n') => at += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.pending.is_empty() {
                self.line(&chunk[start..line_end], &mut events);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(&chunk[start..line_end]);
                self.line(&line, &mut events);
            }
            at += 1;
            start = at;
        }
        self.pending.extend_from_slice(&chunk[start..]);
        events
    }

    /// How many comment lines (`: …`, a server's keepalives) the stream has had.
    pub fn comments(&self) -> usize {
        self.comments
    }

    /// The last event id seen so far (what a reconnect sends as `Last-Event-ID`).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<SseMessage>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line[0] == b':' {
            self.comments += 1;
            return;
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        // Valid UTF-8 (every line an AG-UI server sends) is checked by `from_utf8`'s word-at-a-
        // time path; the lossy reader, byte at a time, is only for a line that is not.
        let value = match std::str::from_utf8(value) {
            Ok(valid) => std::borrow::Cow::Borrowed(valid),
            Err(_) => String::from_utf8_lossy(value),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.event = value.into_owned(),
            b"id" if !value.contains('\0') => {
                self.last_id = Some(value.into_owned());
                self.own_id = true;
            }
            // `retry` and unknown fields change nothing a reader of AG-UI needs.
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseMessage>) {
        let own_id = std::mem::take(&mut self.own_id);
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        events.push(SseMessage {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
            has_own_id: own_id,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseMessage> {
        let mut decoder = SseDecoder::new();
        chunks.iter().flat_map(|chunk| decoder.push(chunk)).collect()
    }

    fn data(events: &[SseMessage]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn lines_and_events_join_across_chunks() {
        let events = all(&[b"id: 1\ndata: {\"a\":", b"1}\n\ndata: x\r\ndata: y\r\n\r\n"]);
        assert_eq!(data(&events), vec!["{\"a\":1}", "x\ny"]);
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert!(events[0].has_own_id);
        // The id is kept for later events, which did not set one.
        assert_eq!(events[1].id.as_deref(), Some("1"));
        assert!(!events[1].has_own_id);
    }

    #[test]
    fn a_character_cut_anywhere_arrives_whole() {
        let text = "data: Grüße, 你好 🎉\n\n";
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            for second in cut..bytes.len() {
                let events = all(&[&bytes[..cut], &bytes[cut..second], &bytes[second..]]);
                assert_eq!(data(&events), vec!["Grüße, 你好 🎉"], "cut at {cut} and {second}");
            }
        }
    }

    #[test]
    fn every_line_ending_is_one() {
        // CRLF split between chunks is one line end, not two (which would dispatch early).
        let events = all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(data(&events), vec!["a\nb"]);
        let events = all(&[b"data: a\rdata: b\r\rdata: c\n\n"]);
        assert_eq!(data(&events), vec!["a\nb", "c"]);
    }

    #[test]
    fn comments_fields_and_empty_events() {
        let events = all(&[b": keepalive\n\nevent: custom\ndata\ndata:  two spaces\nretry: 5\nid\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event, "custom");
        assert_eq!(events[0].data, "\n two spaces");
        let mut decoder = SseDecoder::new();
        decoder.push(b": keepalive\n\n: another\n");
        assert_eq!(decoder.comments(), 2);
        // An empty id resets it to the empty string; an id with NUL is ignored.
        assert_eq!(events[0].id.as_deref(), Some(""));
        let events = all(&[b"id: 7\ndata: a\n\nid: b\0ad\ndata: b\n\n"]);
        assert_eq!(events[1].id.as_deref(), Some("7"));
        // A blank line without data dispatches nothing, and no event is left half-read.
        assert!(all(&[b"\n\n\nevent: x\n\n"]).is_empty());
        assert!(all(&[b"data: not ended"]).is_empty());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_not_dropped() {
        let events = all(&[b"data: a\xffb\n\n"]);
        assert_eq!(data(&events), vec!["a\u{fffd}b"]);
    }
}
