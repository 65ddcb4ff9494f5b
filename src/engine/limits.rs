//! The tenant's limits (§8) as figures: the fixed windows they count in ([`quota_window`]),
//! the refusal a limit gives with its figures for the client ([`quota_refusal`]), and the
//! [`TokenBudget`] a running turn is held to. Below both rooms that enforce them: the check
//! before a turn starts (`request/quota.rs`) and the running turn's (`turn/budget.rs`).

use serde_json::json;

use super::plans::Refusal;
use crate::protocol::ErrorCode;

/// A tenant's token budget: `limit` tokens per `period_secs` (fixed periods from the epoch).
#[derive(Debug, Clone, Copy)]
pub struct TokenBudget {
    pub limit: u64,
    pub period_secs: u64,
}

/// The fixed window of `length_secs` (aligned to the epoch) that `now_ms` falls in: its start and
/// its end (when a limit counted in it resets).
pub fn quota_window(now_ms: i64, length_secs: u64) -> (i64, i64) {
    let length_ms = i64::try_from(length_secs.max(1)).unwrap_or(i64::MAX / 1000) * 1000;
    let start = now_ms - now_ms.rem_euclid(length_ms);
    (start, start + length_ms)
}

/// A refusal for a limit (§8), its figures for the client.
pub fn quota_refusal(code: ErrorCode, scope: &str, limit: i64, used: i64, resets_at_ms: Option<i64>) -> Refusal {
    let resets_at = resets_at_ms.map(crate::protocol::iso8601);
    Refusal {
        code,
        message: format!("the tenant's {scope} limit is reached ({used} of {limit})"),
        figures: Some(json!({ "scope": scope, "limit": limit, "used": used, "resetsAt": resets_at })),
    }
}
