//! The append-only audit trail (§8): [`AuditStore`]. Rows that record another write (a run's
//! start, a decision, a key's creation) are appended in that write's transaction through
//! [`insert_audit`]; the rest on their own.

use async_trait::async_trait;

use super::backend::Backend;
use super::error::StoreError;
use super::rows::audit::{AuditEntry, AuditRow};
use super::sql::{On, Record, SqlDb, Stmt};

#[async_trait]
pub trait AuditStore: Send + Sync {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// The tenant's audit rows (every tenant's with `None`) at or after `since_ms`, oldest
    /// first, at most `limit`.
    async fn audit_rows(&self, tenant: Option<&str>, since_ms: i64, limit: i64) -> Result<Vec<AuditRow>, StoreError>;
    /// Every tenant's rows of `action` (e.g. `thread.delete`) at or after `since_ms`, oldest
    /// first: what a watcher polls for (one indexed range read, `audit_action_at`).
    async fn audit_rows_of(&self, action: &str, since_ms: i64) -> Result<Vec<AuditEntry>, StoreError>;
}

const INSERT_AUDIT: &str = "INSERT INTO audit (at_ms, tenant, action, actor, via, detail) \
     VALUES ($1, $2, $3, $4, $5, $6)";
const TENANT_AUDIT: &str = "SELECT * FROM audit WHERE tenant = $1 AND at_ms >= $2 ORDER BY at_ms, id LIMIT $3";
const ALL_AUDIT: &str = "SELECT * FROM audit WHERE at_ms >= $1 ORDER BY at_ms, id LIMIT $2";
const ACTION_AUDIT: &str = "SELECT * FROM audit WHERE action = $1 AND at_ms >= $2 ORDER BY at_ms, id";

/// Appends one audit row on a pool or inside an open transaction.
pub(super) async fn insert_audit<'e, 'q: 'e, DB: SqlDb>(
    on: impl Into<On<'e, DB>>,
    entry: &'q AuditEntry,
) -> Result<(), StoreError> {
    Stmt::new(INSERT_AUDIT)
        .bind(entry.at_ms)
        .bind(&entry.tenant)
        .bind(&entry.action)
        .bind(&entry.actor)
        .bind(&entry.via)
        .bind(&entry.detail)
        .execute(on)
        .await?;
    Ok(())
}

fn audit_row<DB: SqlDb>(row: &Record<DB>) -> Result<AuditRow, StoreError> {
    Ok(AuditRow {
        id: row.get("id")?,
        entry: AuditEntry {
            tenant: row.get("tenant")?,
            action: row.get("action")?,
            actor: row.get("actor")?,
            via: row.get("via")?,
            detail: row.get("detail")?,
            at_ms: row.get("at_ms")?,
        },
    })
}

#[async_trait]
impl<B: Backend> AuditStore for B {
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        insert_audit(self.write_pool(), entry).await
    }

    async fn audit_rows(&self, tenant: Option<&str>, since_ms: i64, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
        let listed = match tenant {
            Some(tenant) => Stmt::new(TENANT_AUDIT).bind(tenant),
            None => Stmt::new(ALL_AUDIT),
        };
        listed.bind(since_ms).bind(limit).fetch_all_as(self.read_pool(), audit_row).await
    }

    async fn audit_rows_of(&self, action: &str, since_ms: i64) -> Result<Vec<AuditEntry>, StoreError> {
        let found = Stmt::new(ACTION_AUDIT).bind(action).bind(since_ms).fetch_all(self.read_pool()).await?;
        found.iter().map(|row| audit_row(row).map(|row| row.entry)).collect()
    }
}
