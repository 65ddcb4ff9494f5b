-- Instance leases (SPEC §4.6): an instance holds one lease, its row here, renewed by heartbeat
-- with one UPDATE however many turns it runs. A running turn names its owner instance
-- (`turns.owner_instance`) and its ownership epoch; it is lapsed when it names no owner, or an
-- owner whose lease lapsed or who has no row. Renewals touch no `turns` row, so they never
-- wait for (or hold up) the log writers' batches, which lock turn rows.
CREATE TABLE instances (
    id             TEXT PRIMARY KEY,
    lease_until_ms BIGINT NOT NULL,
    started_at_ms  BIGINT NOT NULL
);

-- Finds the running turns of one owner (a lapsed instance, or NULL: released) in id order,
-- without reading other owners' turns or sorting (a claim takes the first), and the distinct
-- owners of running turns by a loose index scan (one probe per owner, never one per turn).
CREATE INDEX turns_running_by_owner ON turns (owner_instance, id) WHERE status = 'running';

-- Upgraded databases keep their turns' liveness: every owner a running turn names gets a row
-- leased until the latest lease of its turns.
INSERT INTO instances (id, lease_until_ms, started_at_ms)
SELECT owner_instance, MAX(lease_until_ms), MIN(created_at_ms) FROM turns
WHERE status = 'running' AND owner_instance IS NOT NULL
GROUP BY owner_instance;
