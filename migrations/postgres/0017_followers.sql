-- A stream on one instance may follow a turn another instance runs (§4.6). The follower marks
-- the turn's row until when it listens; the runner's batch reads the mark under the lock its
-- fence takes anyway, and only turns someone follows are announced (with the new events, when
-- they fit). Marking takes the same row lock as the fence, so a batch either sees the mark or
-- committed before it was set (and the follower reads the table once after marking).
ALTER TABLE turns ADD COLUMN followed_until_ms BIGINT NOT NULL DEFAULT 0;
