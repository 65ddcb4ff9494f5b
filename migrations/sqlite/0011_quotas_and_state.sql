-- Per-tenant limits (SPEC §8): tokens the agents reported, per tenant, for the token budget;
-- and indexes for counting a tenant's running turns and the turns started in a window.
CREATE TABLE token_usage (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant  TEXT NOT NULL,
    turn    BIGINT NOT NULL,
    tokens  BIGINT NOT NULL,
    at_ms   BIGINT NOT NULL
);
CREATE INDEX token_usage_by_tenant ON token_usage (tenant, at_ms);
CREATE INDEX turns_by_status ON turns (status, created_at_ms);

-- The thread's editable state (SPEC §7): the keys its agents list in `editable_state`, as a run's
-- `state` last wrote them (a JSON object; NULL: none written).
ALTER TABLE threads ADD COLUMN state TEXT;
