-- Threads, turns, runs and the event log (SPEC §1, §4, §6).

CREATE TABLE threads (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT NOT NULL,
    thread_id     TEXT NOT NULL,
    -- 'person' (private to owner_id) or 'tenant' (created by an API key)
    owner_kind    TEXT NOT NULL,
    owner_id      TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (tenant, thread_id)
);

CREATE TABLE turns (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id        TEXT NOT NULL UNIQUE,
    thread           BIGINT NOT NULL REFERENCES threads (id),
    -- 1, 2, 3… within the thread: one turn per user message, one at a time
    ordinal          INTEGER NOT NULL,
    agent            TEXT NOT NULL,
    status           TEXT NOT NULL,
    user_message_id  TEXT NOT NULL,
    user_text        TEXT NOT NULL,
    started_by       TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    finished_at_ms   BIGINT,
    checkpoint       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    UNIQUE (thread, ordinal)
);
CREATE INDEX turns_running ON turns (status) WHERE status = 'running';

-- A run is a client's request id; the same (thread, run_id) always follows the same turn.
CREATE TABLE runs (
    thread        BIGINT NOT NULL REFERENCES threads (id),
    run_id        TEXT NOT NULL,
    turn          BIGINT NOT NULL REFERENCES turns (id),
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (thread, run_id)
);

-- The event log: append-only, written in batches by the group-commit writer. No foreign key:
-- the writer only appends to turns it owns, and the check would cost every batch.
CREATE TABLE events (
    turn  BIGINT NOT NULL,
    seq   BIGINT NOT NULL,
    -- 0 plain, 1 RUN_STARTED, 2 RUN_FINISHED, 3 RUN_ERROR, 4 STATE_SNAPSHOT
    kind  SMALLINT NOT NULL,
    body  TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (turn, seq)
);

-- The board: notes pinned to a thread, numbered from 1.
CREATE TABLE notes (
    thread  BIGINT NOT NULL REFERENCES threads (id),
    note_no BIGINT NOT NULL,
    body    TEXT NOT NULL,
    PRIMARY KEY (thread, note_no)
);
