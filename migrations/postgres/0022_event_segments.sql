-- The log in segments (src/store/segments.rs): the events one turn appends in one batch are one
-- row, inserted once and never changed. `first_seq`..`last_seq` are its events' sequence
-- numbers (a segment spans at most 256), `events` how many, `at_ms` its first event's time,
-- `body` the events in the segment encoding. Keyed by the last sequence number, so the segment
-- holding the event after any `Last-Event-ID` is the first key above it.
--
-- `events` (one row per event) keeps what was logged before and is still read; nothing writes
-- to it any more.
CREATE TABLE event_segments (
    turn      BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    first_seq BIGINT NOT NULL,
    events    INTEGER NOT NULL,
    at_ms     BIGINT NOT NULL,
    body      BYTEA NOT NULL,
    PRIMARY KEY (turn, last_seq)
);
-- A segment's bytes are JSON the gateway sends as they are: stored without compression (the
-- CPU a batch would spend compressing is what segments are for), in the row up to a page.
ALTER TABLE event_segments ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE event_segments SET (toast_tuple_target = 8160);
