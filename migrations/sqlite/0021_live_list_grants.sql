-- Grants of the CopilotKit runtime's live thread list (`POST …/threads/subscribe`): a browser's
-- WebSocket cannot send `Authorization`, so the page presents a join token instead, on whichever
-- instance its socket reaches. Only the token's SHA-256 is kept, with the tenant, the caller as
-- the gateway rebuilds it (JSON: its scopes, its credential's expiry, the app key of an
-- exchanged token) and when the grant ends, decided on the gateway's clock. Ended grants are
-- deleted when a new one is minted; a caller holds at most a bounded number, its newest by
-- `id` (the order grants were made in, even within one millisecond).
CREATE TABLE live_list_grants (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    token_sha256 TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    caller_label TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
CREATE INDEX live_list_grants_by_end ON live_list_grants (expires_at_ms);
CREATE INDEX live_list_grants_by_caller ON live_list_grants (tenant, caller_label, id);
