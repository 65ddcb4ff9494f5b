//! The tenant's limits on starting turns (§8): the check made before a turn starts, by the
//! windows and refusals of `engine/limits.rs` (which the token budget a running turn checks
//! shares, see `turn::budget`). The check that holds is the store's, in the
//! transaction that starts the turn (`NewTurn::limits`); the look before it only spares a
//! refused run a write.

use crate::engine::errors::EngineError;
use crate::engine::limits::{quota_refusal, quota_window};
use crate::engine::plans::Refusal;
use crate::engine::shape::Engine;
use crate::metrics::CodeLabel;
use crate::protocol::ErrorCode;
use crate::store::{TenantUsage, TurnLimits};

impl Engine {
    /// The tenant's limits (§8) on one more turn, as counts for the store; `None` when the
    /// tenant has none.
    pub(in crate::engine) fn turn_limits(&self, tenant: &str) -> Option<TurnLimits> {
        let quotas = &self.inner.config.tenant(tenant)?.quotas;
        // `0` turns the concurrency limit off.
        let max_running = quotas.max_concurrent_turns.filter(|limit| *limit > 0).map(i64::from);
        if max_running.is_none() && quotas.turns_per_minute.is_none() && quotas.tokens_per_period.is_none() {
            return None;
        }
        let now = self.now_ms();
        Some(TurnLimits {
            max_running,
            max_started: quotas.turns_per_minute.map(i64::from),
            started_since_ms: quota_window(now, 60).0,
            max_tokens: quotas.tokens_per_period.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX)),
            tokens_since_ms: quota_window(now, quotas.token_period_secs).0,
        })
    }

    /// The tenant's limits (§8) for one more turn: the first one it would pass, as a refusal
    /// with its figures. A look before the turn's start, to refuse without writing; the start
    /// counts again in its own transaction (see [`Engine::quota_refusal`]), so starts at the
    /// same moment never pass a limit together.
    pub(in crate::engine) async fn over_quota(&self, tenant: &str) -> Result<Option<Refusal>, EngineError> {
        let Some(limits) = self.turn_limits(tenant) else { return Ok(None) };
        let usage = self.inner.store.tenant_usage(tenant, limits.started_since_ms, limits.tokens_since_ms).await?;
        Ok(self.quota_refusal(tenant, &usage))
    }

    /// The refusal for the first limit (§8) of `tenant` that `usage` reached, counted by scope;
    /// `None` when it reached none.
    pub(in crate::engine) fn quota_refusal(&self, tenant: &str, usage: &TenantUsage) -> Option<Refusal> {
        let limits = self.turn_limits(tenant)?;
        let token_period = self.inner.config.tenant(tenant).map_or(60, |t| t.quotas.token_period_secs);
        let now = self.now_ms();
        let refusal = if let Some(limit) = limits.max_running.filter(|l| usage.running_turns >= *l) {
            quota_refusal(ErrorCode::ConcurrencyLimit, "concurrent_turns", limit, usage.running_turns, None)
        } else if let Some(limit) = limits.max_started.filter(|l| usage.turns_started >= *l) {
            let next_minute = quota_window(now, 60).1;
            quota_refusal(ErrorCode::QuotaExceeded, "turns_per_minute", limit, usage.turns_started, Some(next_minute))
        } else if let Some(limit) = limits.max_tokens.filter(|l| usage.tokens >= *l) {
            let next_period = quota_window(now, token_period).1;
            quota_refusal(ErrorCode::QuotaExceeded, "tokens", limit, usage.tokens, Some(next_period))
        } else {
            return None;
        };
        if let Some(scope) = refusal.figures.as_ref().and_then(|f| f["scope"].as_str()) {
            self.inner.metrics.quota_refusals.get_or_create(&CodeLabel { code: scope.into() }).inc();
        }
        Some(refusal)
    }
}
