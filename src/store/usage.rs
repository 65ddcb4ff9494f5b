//! What a tenant used of its limits (§8): [`UsageStore`], read by the quotas and token budgets.

use async_trait::async_trait;

use super::backend::Backend;
use super::error::StoreError;
use super::rows::usage::TenantUsage;
use super::sql::Stmt;

#[async_trait]
pub trait UsageStore: Send + Sync {
    /// What a tenant has used (§8 limits): turns running now, turns started since `since_ms`,
    /// and tokens reported since `tokens_since_ms`.
    async fn tenant_usage(&self, tenant: &str, since_ms: i64, tokens_since_ms: i64) -> Result<TenantUsage, StoreError>;
    /// Records tokens an agent reported for a turn (the tenant's token budget).
    async fn add_tokens(&self, tenant: &str, turn: i64, tokens: i64, at_ms: i64) -> Result<(), StoreError>;
}

pub(super) const TENANT_USAGE: &str = "SELECT \
     (SELECT COUNT(*) FROM turns t JOIN threads h ON h.id = t.thread \
       WHERE h.tenant = $1 AND t.status = 'running') AS running_turns, \
     (SELECT COUNT(*) FROM turns t JOIN threads h ON h.id = t.thread \
       WHERE h.tenant = $1 AND t.created_at_ms >= $2) AS turns_started, \
     (SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM token_usage WHERE tenant = $1 AND at_ms >= $3) AS tokens";
const ADD_TOKENS: &str = "INSERT INTO token_usage (tenant, turn, tokens, at_ms) VALUES ($1, $2, $3, $4)";

#[async_trait]
impl<B: Backend> UsageStore for B {
    async fn tenant_usage(&self, tenant: &str, since_ms: i64, tokens_since_ms: i64) -> Result<TenantUsage, StoreError> {
        let row = Stmt::new(TENANT_USAGE)
            .bind(tenant)
            .bind(since_ms)
            .bind(tokens_since_ms)
            .fetch_one(self.read_pool())
            .await?;
        TenantUsage::read(&row)
    }

    async fn add_tokens(&self, tenant: &str, turn: i64, tokens: i64, at_ms: i64) -> Result<(), StoreError> {
        Stmt::new(ADD_TOKENS).bind(tenant).bind(turn).bind(tokens).bind(at_ms).execute(self.write_pool()).await?;
        Ok(())
    }
}
