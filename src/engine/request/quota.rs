//! The tenant's limits on starting turns (§8): the fixed windows they count in, the refusal a
//! limit gives (with its figures for the client), and the check made before a turn starts.
//! Kept apart from planning because the same window and refusal serve the token budget a
//! running turn checks (see `turn::budget`).

use serde_json::json;

use crate::engine::{Engine, EngineError, Refusal, RunErrorCode};
use crate::metrics::CodeLabel;

impl Engine {
    /// The tenant's limits (§8) for one more turn: the first one it would pass, as a refusal
    /// with its figures. (Counted, then started: instances starting turns at the same moment
    /// may each pass the last free place.)
    pub(in crate::engine) async fn over_quota(&self, tenant: &str) -> Result<Option<Refusal>, EngineError> {
        let Some(mut quotas) = self.inner.config.tenant(tenant).map(|t| t.quotas.clone()) else { return Ok(None) };
        // `0` turns the concurrency limit off.
        quotas.max_concurrent_turns = quotas.max_concurrent_turns.filter(|limit| *limit > 0);
        if quotas.max_concurrent_turns.is_none()
            && quotas.turns_per_minute.is_none()
            && quotas.tokens_per_period.is_none()
        {
            return Ok(None);
        }
        let now = self.now_ms();
        let (minute, next_minute) = quota_window(now, 60);
        let (period, next_period) = quota_window(now, quotas.token_period_secs);
        let usage = self.inner.store.tenant_usage(tenant, minute, period).await?;
        let refusal = if let Some(limit) = quotas.max_concurrent_turns.filter(|l| usage.running_turns >= i64::from(*l))
        {
            Some(quota_refusal(
                RunErrorCode::ConcurrencyLimit,
                "concurrent_turns",
                i64::from(limit),
                usage.running_turns,
                None,
            ))
        } else if let Some(limit) = quotas.turns_per_minute.filter(|l| usage.turns_started >= i64::from(*l)) {
            Some(quota_refusal(
                RunErrorCode::QuotaExceeded,
                "turns_per_minute",
                i64::from(limit),
                usage.turns_started,
                Some(next_minute),
            ))
        } else {
            quotas.tokens_per_period.filter(|l| usage.tokens >= *l as i64).map(|limit| {
                quota_refusal(RunErrorCode::QuotaExceeded, "tokens", limit as i64, usage.tokens, Some(next_period))
            })
        };
        if let Some(scope) = refusal.as_ref().and_then(|r| r.figures.as_ref()).and_then(|f| f["scope"].as_str()) {
            self.inner.metrics.quota_refusals.get_or_create(&CodeLabel { code: scope.into() }).inc();
        }
        Ok(refusal)
    }
}

/// The fixed window of `length_secs` (aligned to the epoch) that `now_ms` falls in: its start and
/// its end (when a limit counted in it resets).
pub fn quota_window(now_ms: i64, length_secs: u64) -> (i64, i64) {
    let length_ms = i64::try_from(length_secs.max(1)).unwrap_or(i64::MAX / 1000) * 1000;
    let start = now_ms - now_ms.rem_euclid(length_ms);
    (start, start + length_ms)
}

/// A refusal for a limit (§8), its figures for the client.
pub fn quota_refusal(code: RunErrorCode, scope: &str, limit: i64, used: i64, resets_at_ms: Option<i64>) -> Refusal {
    let resets_at = resets_at_ms.map(crate::protocol::iso8601);
    Refusal {
        code,
        message: format!("the tenant's {scope} limit is reached ({used} of {limit})"),
        figures: Some(json!({ "scope": scope, "limit": limit, "used": used, "resetsAt": resets_at })),
    }
}
