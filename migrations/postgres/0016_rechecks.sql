-- The deletion watcher (auth/watchers.rs) reads the `thread.delete` rows of the last interval
-- every `auth.revocation_check_ms`, so that open streams on an erased thread end: one range of
-- this index, whatever the trail's size.
CREATE INDEX audit_action_at ON audit (action, at_ms);

-- A decision after a long wait is checked again (SPEC §5.3): the digest of what the interrupt
-- asked under the policy of its time (deciders, four eyes, schema, ttl, the call's arguments),
-- compared with what the agent would ask now. Empty for interrupts opened before: never
-- re-checked.
ALTER TABLE interrupts ADD COLUMN policy_digest TEXT NOT NULL DEFAULT '';
