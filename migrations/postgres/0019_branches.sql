-- Threads that branch (SPEC §6): a thread's turns form a tree. `parent` is the turn whose
-- answer the run's client had last (NULL for a first turn); a regenerate or an edit adds a
-- sibling under the same parent, never erasing anything. `ordinal` stays the order in which the
-- thread's turns started (one at a time: UNIQUE (thread, ordinal)), so the thread's newest turn
-- is the one with the highest ordinal, and the current branch is the path from the first turn
-- to it (the head is that newest turn: no column of its own to drift from it).
-- Threads recorded before branching read as one branch: each turn's parent is the turn before.
ALTER TABLE turns ADD COLUMN parent BIGINT;
UPDATE turns AS t SET parent = p.id FROM turns AS p WHERE p.thread = t.thread AND p.ordinal = t.ordinal - 1;
