-- Threads a person can list and delete (SPEC §10). A thread's last activity, newest first in
-- `GET /v1/threads`: set when a turn starts, opens an interrupt or ends, in the same
-- transaction. Threads that existed before take their latest turn's end (or start).
ALTER TABLE threads ADD COLUMN updated_at_ms BIGINT NOT NULL DEFAULT 0;
UPDATE threads SET updated_at_ms = COALESCE(
    (SELECT MAX(COALESCE(turns.finished_at_ms, turns.created_at_ms)) FROM turns WHERE turns.thread = threads.id),
    threads.created_at_ms);

-- A tenant's threads by activity: one page of the list is a range of this index. The retention
-- sweep reads the oldest activity across tenants with the second.
CREATE INDEX threads_by_activity ON threads (tenant, updated_at_ms, id);
CREATE INDEX threads_idle ON threads (updated_at_ms);

-- Erasing a thread deletes its interrupts by thread and its turns, whose rows `runs` and
-- `interrupts` reference: without these, each deletion (and each foreign-key check it makes)
-- would read those tables whole.
CREATE INDEX interrupts_by_thread ON interrupts (thread);
CREATE INDEX runs_by_turn ON runs (turn);
