-- Interrupts (SPEC §5): what a waiting turn waits for, and how each was decided.
CREATE TABLE interrupts (
    id             TEXT PRIMARY KEY,
    thread         BIGINT NOT NULL REFERENCES threads (id),
    turn           BIGINT NOT NULL REFERENCES turns (id),
    -- the AG-UI Interrupt as shown to clients (id, reason, message, responseSchema, …)
    shown          TEXT NOT NULL,
    -- who may decide: {"persons": [...], "roles": [...]}; empty = the person who started the turn
    deciders       TEXT NOT NULL,
    four_eyes      INTEGER NOT NULL,
    started_by     TEXT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    -- open, decided, expired, superseded
    status         TEXT NOT NULL,
    decision       TEXT,
    decided_by     TEXT,
    decided_via    TEXT,
    decided_at_ms  BIGINT,
    -- the log position of the event that records the decision
    decided_seq    BIGINT,
    created_at_ms  BIGINT NOT NULL
);
CREATE INDEX interrupts_by_turn ON interrupts (turn);
CREATE INDEX interrupts_open_expiry ON interrupts (expires_at_ms) WHERE status = 'open';

-- Where in its turn's log a run begins (a resume run begins at the decision).
ALTER TABLE runs ADD COLUMN start_seq BIGINT NOT NULL DEFAULT 0;
