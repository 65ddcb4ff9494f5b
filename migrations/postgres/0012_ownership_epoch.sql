-- Fencing: every claim of a running turn (its start, a takeover, a resume after a decision)
-- gives it a new ownership epoch. A runner's writes carry the epoch it was given and the store
-- refuses them, in the writing transaction itself, once the turn has a newer one or has ended:
-- a runner that lost its turn can never append after the next owner, nor after the end.
ALTER TABLE turns ADD COLUMN epoch BIGINT NOT NULL DEFAULT 1;
