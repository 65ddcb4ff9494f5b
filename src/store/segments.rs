//! The log in segments: the events one turn appends in one batch are one stored row of
//! `event_segments`, so the database pays for a row, an index entry and their WAL once per
//! batch instead of once per event. A segment is inserted once and never changed: the log is
//! still append-only, row by row.
//!
//! A row holds `turn`, `first_seq` and `last_seq` (its events' sequence numbers, dense within
//! a batch), `events` (how many), `at_ms` (its first event's time) and `body`, the events one
//! after another in this module's encoding, after a format byte:
//!
//! ```text
//! seq: i64 LE | kind: u8 | at_ms: i64 LE | length: u32 LE | the event's JSON (UTF-8)
//! ```
//!
//! so a reader cuts each event's JSON out of the row's bytes without copying or parsing it
//! ([`decode`] hands out slices of one shared buffer).
//!
//! Sequence numbers, `Last-Event-ID`, replay and takeover are unchanged: readers ask for the
//! events after a sequence number, and get exactly those, wherever a segment begins. Rows of the
//! log before segments (`events`, one row per event) are still read, by the same statements.

use bytes::Bytes;

use super::error::StoreError;
use super::rows::events::{EventKind, StoredEvent};

/// The body's first byte: the encoding below.
const FORMAT: u8 = 1;
/// Bytes before an event's JSON: seq, kind, at_ms, length.
const HEADER: usize = 8 + 1 + 8 + 4;

/// A segment spans at most this many sequence numbers: a batch's run of one turn's events
/// longer than that is cut into several rows. It bounds a read by key range (a page after
/// `seq` ends by `seq + page + MAX_SPAN`).
pub const MAX_SPAN: i64 = 256;

/// A segment is cut before it grows past this many bytes (a single larger event makes a
/// segment of its own): the row stays in its table page, where PostgreSQL neither moves it
/// out of line nor reassembles it on reading, and a reader that wants a few events fetches
/// a few kilobytes, not a whole batch.
pub const MAX_BYTES: usize = 8000;

/// One row of `event_segments`, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub turn: i64,
    /// The ownership epoch its events were appended under: a batch that writes in one
    /// statement admits or drops a segment by it (a segment never mixes two).
    pub epoch: i64,
    pub first_seq: i64,
    pub last_seq: i64,
    pub events: i32,
    pub at_ms: i64,
    pub body: Vec<u8>,
}

impl Segment {
    fn start(turn: i64, epoch: i64, event: &StoredEvent) -> Segment {
        let mut body = Vec::with_capacity(1 + HEADER + event.body.len());
        body.push(FORMAT);
        Segment { turn, epoch, first_seq: event.seq, last_seq: event.seq, events: 0, at_ms: event.at_ms, body }
    }

    fn push(&mut self, event: &StoredEvent) -> Result<(), StoreError> {
        // The log holds JSON text: a body that is not UTF-8 is refused here, as a text column
        // refused it before segments.
        let json = event.body_text()?;
        let length = u32::try_from(json.len()).map_err(|_| StoreError::Corrupt("an event over 4 GiB".into()))?;
        self.body.extend_from_slice(&event.seq.to_le_bytes());
        self.body.push(event.kind as u8);
        self.body.extend_from_slice(&event.at_ms.to_le_bytes());
        self.body.extend_from_slice(&length.to_le_bytes());
        self.body.extend_from_slice(json.as_bytes());
        self.last_seq = event.seq;
        self.events += 1;
        Ok(())
    }

    /// Whether `event` may join this segment: the same turn and epoch, the next sequence
    /// numbers, within [`MAX_SPAN`] and [`MAX_BYTES`].
    fn takes(&self, turn: i64, epoch: i64, event: &StoredEvent) -> bool {
        self.turn == turn
            && self.epoch == epoch
            && event.seq > self.last_seq
            && event.seq - self.first_seq < MAX_SPAN
            && self.body.len() + HEADER + event.body.len() <= MAX_BYTES
    }
}

/// The segments of a batch's events, given in batch order as (turn, epoch, event): one per
/// turn and epoch, cut at [`MAX_SPAN`] or [`MAX_BYTES`] and wherever a turn's sequence numbers
/// do not rise.
/// The turns' segments come in the order of their first events.
pub fn segments_of<'a>(
    events: impl IntoIterator<Item = (i64, i64, &'a StoredEvent)>,
) -> Result<Vec<Segment>, StoreError> {
    let mut segments: Vec<Segment> = Vec::new();
    // Where each (turn, epoch)'s open segment is: batches hold few turns, so a scan of this
    // short list beats hashing.
    let mut open: Vec<(i64, i64, usize)> = Vec::new();
    for (turn, epoch, event) in events {
        let slot = open.iter().position(|(t, e, _)| *t == turn && *e == epoch);
        let index = match slot {
            Some(slot) if segments[open[slot].2].takes(turn, epoch, event) => open[slot].2,
            _ => {
                segments.push(Segment::start(turn, epoch, event));
                let index = segments.len() - 1;
                match slot {
                    Some(slot) => open[slot].2 = index,
                    None => open.push((turn, epoch, index)),
                }
                index
            }
        };
        segments[index].push(event)?;
    }
    Ok(segments)
}

/// The events of a segment's body, each body a slice of `body` (no copy).
pub fn decode(body: Bytes) -> Result<Vec<StoredEvent>, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("event segment: {what}"));
    match body.first() {
        Some(&FORMAT) => {}
        Some(other) => return Err(corrupt(&format!("unknown format {other}"))),
        None => return Err(corrupt("empty")),
    }
    let mut events = Vec::new();
    let mut at = 1;
    while at < body.len() {
        let header = body.get(at..at + HEADER).ok_or_else(|| corrupt("cut inside a header"))?;
        let seq = i64::from_le_bytes(header[0..8].try_into().map_err(|_| corrupt("seq"))?);
        let kind = EventKind::from_i16(i16::from(header[8]))?;
        let at_ms = i64::from_le_bytes(header[9..17].try_into().map_err(|_| corrupt("time"))?);
        let length = u32::from_le_bytes(header[17..21].try_into().map_err(|_| corrupt("length"))?) as usize;
        let start = at + HEADER;
        let end =
            start.checked_add(length).filter(|end| *end <= body.len()).ok_or_else(|| corrupt("cut inside an event"))?;
        events.push(StoredEvent { seq, kind, body: body.slice(start..end), at_ms });
        at = end;
    }
    Ok(events)
}

/// One row of a log read: a segment (`segment`) or an event stored before segments (`seq`,
/// `kind`, `at_ms`, `body`).
pub(crate) enum LogRow {
    Segment(Vec<u8>),
    Event(StoredEvent),
}

/// The events after `after_seq` in `rows` (in log order), at most `limit` of them.
pub(crate) fn page_of(rows: Vec<LogRow>, after_seq: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
    let limit = usize::try_from(limit).unwrap_or(0);
    let mut page = Vec::new();
    for row in rows {
        let events = match row {
            LogRow::Segment(body) => decode(Bytes::from(body))?,
            LogRow::Event(event) => vec![event],
        };
        for event in events.into_iter().filter(|event| event.seq > after_seq) {
            if page.len() == limit {
                return Ok(page);
            }
            page.push(event);
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: EventKind, body: &'static str) -> StoredEvent {
        StoredEvent { seq, kind, body: Bytes::from_static(body.as_bytes()), at_ms: 1_000 + seq }
    }

    #[test]
    fn a_segment_gives_back_exactly_the_events_it_was_made_of() {
        let events = [
            event(1, EventKind::RunStarted, r#"{"type":"RUN_STARTED"}"#),
            event(2, EventKind::Plain, r#"{"type":"TEXT_MESSAGE_CONTENT","delta":"héllo"}"#),
            event(3, EventKind::RunFinished, ""),
        ];
        let segments = segments_of(events.iter().map(|e| (7, 1, e))).expect("encoded");
        assert_eq!(segments.len(), 1);
        let segment = &segments[0];
        assert_eq!(
            (segment.turn, segment.first_seq, segment.last_seq, segment.events, segment.at_ms),
            (7, 1, 3, 3, 1_001)
        );
        assert_eq!(decode(Bytes::from(segment.body.clone())).expect("decoded"), events);
    }

    #[test]
    fn a_batch_is_cut_by_turn_epoch_span_and_order() {
        let many: Vec<StoredEvent> = (1..=MAX_SPAN + 3).map(|seq| event(seq, EventKind::Plain, "{}")).collect();
        let other = event(1, EventKind::Plain, "{}");
        let stale = event(9, EventKind::Plain, "{}");
        let back = event(2, EventKind::Plain, "{}");
        let mut batch: Vec<(i64, i64, &StoredEvent)> = many.iter().map(|e| (1, 1, e)).collect();
        batch.insert(5, (2, 1, &other));
        batch.push((1, 0, &stale));
        batch.push((1, 1, &back));
        let cuts: Vec<(i64, i64, i64, i64)> =
            segments_of(batch).expect("encoded").iter().map(|s| (s.turn, s.epoch, s.first_seq, s.last_seq)).collect();
        assert_eq!(
            cuts,
            vec![(1, 1, 1, MAX_SPAN), (2, 1, 1, 1), (1, 1, MAX_SPAN + 1, MAX_SPAN + 3), (1, 0, 9, 9), (1, 1, 2, 2)]
        );
    }

    #[test]
    fn a_segment_is_cut_before_it_grows_past_its_bytes_and_a_large_event_stands_alone() {
        let small = "x".repeat(1_000);
        let large = "y".repeat(3 * MAX_BYTES);
        let events: Vec<StoredEvent> = (1..=20)
            .map(|seq| StoredEvent {
                seq,
                kind: EventKind::Plain,
                body: Bytes::from(if seq == 10 { large.clone() } else { small.clone() }),
                at_ms: seq,
            })
            .collect();
        let segments = segments_of(events.iter().map(|e| (1, 1, e))).expect("encoded");
        for segment in &segments {
            assert!(segment.body.len() <= MAX_BYTES || segment.events == 1, "{} bytes", segment.body.len());
        }
        let large_alone = segments.iter().find(|s| s.first_seq == 10).expect("the large event's segment");
        assert_eq!((large_alone.last_seq, large_alone.events), (10, 1));
        let decoded: Vec<StoredEvent> =
            segments.iter().flat_map(|s| decode(Bytes::from(s.body.clone())).expect("decoded")).collect();
        assert_eq!(decoded, events, "nothing lost or reordered by the cuts");
    }

    #[test]
    fn a_body_that_is_not_utf8_is_refused() {
        let bad = StoredEvent { seq: 1, kind: EventKind::Plain, body: Bytes::from_static(&[0xff, 0xfe]), at_ms: 0 };
        assert!(matches!(segments_of([(1, 1, &bad)]), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn a_damaged_segment_is_an_error_not_a_panic() {
        let events = [event(1, EventKind::Plain, r#"{"a":1}"#), event(2, EventKind::Plain, r#"{"b":2}"#)];
        let body = segments_of(events.iter().map(|e| (1, 1, e))).expect("encoded").remove(0).body;
        for cut in 0..body.len() {
            let _ = decode(Bytes::copy_from_slice(&body[..cut]));
        }
        assert!(decode(Bytes::from_static(&[])).is_err());
        assert!(decode(Bytes::from_static(&[9])).is_err());
        assert!(decode(Bytes::copy_from_slice(&body[..body.len() - 1])).is_err());
        let mut bad_kind = body.clone();
        bad_kind[1 + 8] = 200;
        assert!(decode(Bytes::from(bad_kind)).is_err());
    }

    #[test]
    fn a_page_starts_exactly_after_the_sequence_number_asked_for_even_inside_a_segment() {
        let events: Vec<StoredEvent> = (1..=6).map(|seq| event(seq, EventKind::Plain, "{}")).collect();
        let segment = |range: std::ops::Range<usize>| {
            LogRow::Segment(segments_of(events[range].iter().map(|e| (1, 1, e))).expect("encoded").remove(0).body)
        };
        let seqs = |after, limit| -> Vec<i64> {
            page_of(vec![segment(0..3), segment(3..6)], after, limit).expect("page").iter().map(|e| e.seq).collect()
        };
        assert_eq!(seqs(0, 10), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(seqs(1, 10), vec![2, 3, 4, 5, 6]);
        assert_eq!(seqs(2, 2), vec![3, 4]);
        assert_eq!(seqs(4, 1), vec![5]);
        assert_eq!(seqs(6, 10), Vec::<i64>::new());
    }
}
