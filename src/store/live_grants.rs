//! Grants of the CopilotKit runtime's live thread list: [`LiveGrantStore`]. A grant lets a
//! page open the list's WebSocket, which cannot carry `Authorization`; it is kept here rather
//! than in one instance's memory so the socket may reach any instance. Only the token's SHA-256
//! is stored; the caller is kept as the HTTP layer serialised it, opaque to the store.

use async_trait::async_trait;

use super::backend::Backend;
use super::error::StoreError;
use super::sql::Stmt;

/// The grants one caller holds at most: a new one past it ends the caller's oldest. A page
/// asks for one per subscription, so this is many tabs' worth, and no caller fills the table.
pub const GRANTS_PER_CALLER: i64 = 100;

/// A grant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGrantRow {
    /// Hex SHA-256 of the join token.
    pub token_sha256: String,
    pub tenant: String,
    /// The caller's label (`person:<id>`, `key:<id>`): whose grants [`GRANTS_PER_CALLER`] counts.
    pub caller_label: String,
    /// The caller, serialised by whoever minted the grant.
    pub caller: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

#[async_trait]
pub trait LiveGrantStore: Send + Sync {
    /// Stores a grant, in one transaction with deleting every grant ended by `grant.created_at_ms`
    /// and the caller's oldest past [`GRANTS_PER_CALLER`] (by the order they were made in).
    async fn insert_live_grant(&self, grant: &LiveGrantRow) -> Result<(), StoreError>;
    /// The grant whose token hashes to `token_sha256`, if it has not ended at `now_ms`.
    async fn live_grant(&self, token_sha256: &str, now_ms: i64) -> Result<Option<LiveGrantRow>, StoreError>;
}

const DELETE_ENDED: &str = "DELETE FROM live_list_grants WHERE expires_at_ms <= $1";
const INSERT_GRANT: &str = "INSERT INTO live_list_grants \
     (token_sha256, tenant, caller_label, caller, created_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6)";
const TRIM_CALLER: &str = "DELETE FROM live_list_grants WHERE tenant = $1 AND caller_label = $2 \
     AND id NOT IN (SELECT id FROM live_list_grants WHERE tenant = $1 AND caller_label = $2 \
     ORDER BY id DESC LIMIT $3)";
const FIND_GRANT: &str = "SELECT token_sha256, tenant, caller_label, caller, created_at_ms, expires_at_ms \
     FROM live_list_grants WHERE token_sha256 = $1 AND expires_at_ms > $2";

#[async_trait]
impl<B: Backend> LiveGrantStore for B {
    async fn insert_live_grant(&self, grant: &LiveGrantRow) -> Result<(), StoreError> {
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        Stmt::new(DELETE_ENDED).bind(grant.created_at_ms).execute(&mut tx).await?;
        Stmt::new(INSERT_GRANT)
            .bind(grant.token_sha256.as_str())
            .bind(grant.tenant.as_str())
            .bind(grant.caller_label.as_str())
            .bind(grant.caller.as_str())
            .bind(grant.created_at_ms)
            .bind(grant.expires_at_ms)
            .execute(&mut tx)
            .await?;
        Stmt::new(TRIM_CALLER)
            .bind(grant.tenant.as_str())
            .bind(grant.caller_label.as_str())
            .bind(GRANTS_PER_CALLER)
            .execute(&mut tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn live_grant(&self, token_sha256: &str, now_ms: i64) -> Result<Option<LiveGrantRow>, StoreError> {
        let Some(row) = Stmt::new(FIND_GRANT).bind(token_sha256).bind(now_ms).fetch_optional(self.read_pool()).await?
        else {
            return Ok(None);
        };
        Ok(Some(LiveGrantRow {
            token_sha256: row.get("token_sha256")?,
            tenant: row.get("tenant")?,
            caller_label: row.get("caller_label")?,
            caller: row.get("caller")?,
            created_at_ms: row.get("created_at_ms")?,
            expires_at_ms: row.get("expires_at_ms")?,
        }))
    }
}
