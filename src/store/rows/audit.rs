//! The audit trail's rows: the vocabulary of [`crate::store::AuditStore`].

/// One row to append to the audit trail (§8).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub tenant: String,
    /// `run.start`, `key.create`, `key.revoke`, `token.exchange`, `auth.failures`,
    /// `thread.delete`, …
    pub action: String,
    /// `person:<id>`, `key:<id>`, `cli` or `gateway`.
    pub actor: String,
    /// `app:<id>` when an app acted for the person.
    pub via: Option<String>,
    /// JSON text.
    pub detail: String,
    pub at_ms: i64,
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub id: i64,
    pub entry: AuditEntry,
}
