//! A tenant's token budget as a running turn meets it (§8): tokens its model reported are
//! counted, and the turn ends cleanly before a model call once the budget is spent. The window
//! and the refusal are the tenant limits' own ([`crate::engine::limits`]). What the
//! agents report spending ([`TurnContext::report_usage`]) is also kept for the turn's end: a run
//! that fails or is cancelled still spent its tokens, and says so on its terminal event (`usage`,
//! AG-UI 1.0).

use super::context::TurnContext;
use super::outcome::AgentError;
use crate::protocol::ErrorCode;

impl TurnContext {
    /// Counts tokens an agent's model reported against the tenant's budget.
    pub async fn charge_tokens(&self, tokens: u64) -> Result<(), AgentError> {
        if tokens == 0 {
            return Ok(());
        }
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        let at_ms = self.now_ms();
        self.patiently("the token count could not be recorded", || {
            self.store().add_tokens(self.identity().tenant.as_str(), self.identity().turn_pk, tokens, at_ms)
        })
        .await
    }

    /// Ends the turn cleanly (before a model call, never in one) when the tenant's token budget
    /// is spent.
    pub async fn check_token_budget(&self) -> Result<(), AgentError> {
        let Some(budget) = self.token_budget() else { return Ok(()) };
        let now = self.now_ms();
        let (period, next_period) = crate::engine::limits::quota_window(now, budget.period_secs);
        let usage = self
            .patiently("the token budget could not be read", || {
                self.store().tenant_usage(self.identity().tenant.as_str(), now, period)
            })
            .await?;
        let limit = i64::try_from(budget.limit).unwrap_or(i64::MAX);
        if usage.tokens < limit {
            return Ok(());
        }
        let refusal = crate::engine::limits::quota_refusal(
            ErrorCode::QuotaExceeded,
            "tokens",
            limit,
            usage.tokens,
            Some(next_period),
        );
        Err(AgentError::QuotaExceeded { message: refusal.message, figures: refusal.figures.unwrap_or_default() })
    }
}
