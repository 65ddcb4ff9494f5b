-- Tenant API keys and the audit trail (SPEC §2.1, §8).

-- A key is shown once, at creation; only the SHA-256 of its secret is kept.
CREATE TABLE api_keys (
    -- the public part of the key (agk_<id>_<secret>)
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    name          TEXT NOT NULL,
    -- 'tenant' (a bearer credential) or 'app' (accepted only by the token exchange)
    kind          TEXT NOT NULL,
    -- space-separated gateway scopes, e.g. 'threads:read threads:content agent:demo'
    scopes        TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE INDEX api_keys_tenant ON api_keys (tenant);
CREATE INDEX api_keys_revoked ON api_keys (revoked_at_ms) WHERE revoked_at_ms IS NOT NULL;

-- Append-only: rows are inserted, never changed or removed.
CREATE TABLE audit (
    id     BIGSERIAL PRIMARY KEY,
    at_ms  BIGINT NOT NULL,
    tenant TEXT NOT NULL,
    -- run.start, key.create, key.revoke, token.exchange, auth.failures
    action TEXT NOT NULL,
    -- person:<id>, key:<id>, cli, gateway
    actor  TEXT NOT NULL,
    -- app:<id> when an app acted for the person
    via    TEXT,
    -- JSON
    detail TEXT NOT NULL
);
CREATE INDEX audit_tenant_at ON audit (tenant, at_ms);
CREATE INDEX audit_at ON audit (at_ms);

CREATE FUNCTION audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_is_append_only();
