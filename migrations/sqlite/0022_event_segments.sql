-- The log in segments (src/store/segments.rs): the events one turn appends in one batch are one
-- row, inserted once and never changed. `first_seq`..`last_seq` are its events' sequence
-- numbers (a segment spans at most 256), `events` how many, `at_ms` its first event's time,
-- `body` the events in the segment encoding. Keyed by the last sequence number, so the segment
-- holding the event after any `Last-Event-ID` is the first key above it.
--
-- `events` (one row per event) keeps what was logged before and is still read; nothing writes
-- to it any more.
CREATE TABLE event_segments (
    turn      INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    events    INTEGER NOT NULL,
    at_ms     INTEGER NOT NULL,
    body      BLOB NOT NULL,
    PRIMARY KEY (turn, last_seq)
);
