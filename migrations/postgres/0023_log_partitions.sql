-- Growth without scatter: `event_segments` becomes a table partitioned by turn, a range of
-- turn ids per partition (src/store/postgres/partitions.rs; docs/operations.md, "The log's
-- partitions"). Turn ids only grow, so new segments go to the pages of the newest partition
-- however large the log is, never into the free space a vacuum recorded in old pages all over
-- it; and a range whose turns are all gone is dropped whole instead of vacuumed.
--
-- What was logged before stays where it is, as the first partition (every turn up to the
-- newest one). The gateway makes the partitions after it ahead of the turns that will need
-- them, `event_log.partition_turns` turn ids each, and records every partition in
-- `log_partitions`.
ALTER TABLE event_segments RENAME TO event_segments_first;
ALTER INDEX event_segments_pkey RENAME TO event_segments_first_pkey;

CREATE TABLE event_segments (
    turn      BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    first_seq BIGINT NOT NULL,
    events    INTEGER NOT NULL,
    at_ms     BIGINT NOT NULL,
    body      BYTEA NOT NULL,
    PRIMARY KEY (turn, last_seq)
) PARTITION BY RANGE (turn);
-- Partitions made later take the column's storage from here (toast_tuple_target, a setting of
-- each partition's own, is given as each is made).
ALTER TABLE event_segments ALTER COLUMN body SET STORAGE EXTERNAL;

-- One row per partition: its name, its turns `lower` (included) to `upper` (excluded), and
-- since when new turns have been numbered past it (it can then get no new turn; a partition
-- is dropped only a while after that, once no turn of its range is left).
CREATE TABLE log_partitions (
    name         TEXT PRIMARY KEY,
    lower        BIGINT NOT NULL,
    upper        BIGINT NOT NULL UNIQUE,
    passed_at_ms BIGINT
);

DO $$
DECLARE
    bound BIGINT;
BEGIN
    SELECT GREATEST(
        COALESCE((SELECT MAX(id) FROM turns), 0),
        COALESCE((SELECT MAX(turn) FROM event_segments_first), 0)) + 1 INTO bound;
    EXECUTE format(
        'ALTER TABLE event_segments ATTACH PARTITION event_segments_first FOR VALUES FROM (MINVALUE) TO (%s)',
        bound);
    INSERT INTO log_partitions (name, lower, upper) VALUES ('event_segments_first', -9223372036854775808, bound);
END $$;
