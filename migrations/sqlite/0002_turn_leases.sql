-- Turn leases (SPEC §4.6): the instance running a turn holds a lease it renews by heartbeat;
-- when the lease lapses another instance takes the turn over from its last checkpoint.
ALTER TABLE turns ADD COLUMN owner_instance TEXT;
ALTER TABLE turns ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
CREATE INDEX turns_lapsed ON turns (lease_until_ms) WHERE status = 'running';
