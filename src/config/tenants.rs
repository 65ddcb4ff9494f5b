//! The `[[tenants]]` entries: each tenant's name, AI label, CORS origins and quotas (§8).

use serde::{Deserialize, Serialize};

/// A tenant's limits (§8). Turns per minute and tokens count in fixed windows (the minute, the
/// period) aligned to the epoch; a refusal says when its window resets.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Turns running at once; a limit by default, so that no tenant can start turns without
    /// bound. `0`: no limit.
    #[serde(default = "default_max_concurrent_turns")]
    pub max_concurrent_turns: Option<u32>,
    /// Turns started per minute.
    #[serde(default)]
    pub turns_per_minute: Option<u32>,
    /// Tokens the tenant's agents may use per period (counted from their reported usage).
    #[serde(default)]
    pub tokens_per_period: Option<u64>,
    /// The token budget's period, in seconds.
    #[serde(default = "default_token_period_secs")]
    pub token_period_secs: u64,
}

/// The default of `quotas.max_concurrent_turns`.
pub const DEFAULT_MAX_CONCURRENT_TURNS: u32 = 256;

fn default_max_concurrent_turns() -> Option<u32> {
    Some(DEFAULT_MAX_CONCURRENT_TURNS)
}

fn default_token_period_secs() -> u64 {
    86_400
}

impl Default for QuotaConfig {
    fn default() -> QuotaConfig {
        QuotaConfig {
            max_concurrent_turns: default_max_concurrent_turns(),
            turns_per_minute: None,
            tokens_per_period: None,
            token_period_secs: default_token_period_secs(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// Prefixes the first content of every assistant message (e.g. "[AI] ").
    #[serde(default)]
    pub ai_label: Option<String>,
    /// Browser origins allowed to call the tenant's routes (CORS, §8), e.g. `https://app.example`.
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Per-tenant limits (§8): concurrent turns are limited by default, each other absent one
    /// is no limit.
    #[serde(default)]
    pub quotas: QuotaConfig,
    /// Roles whose holders administer the tenant: they read any of its threads' audit trails
    /// (`GET /v1/threads/{thread}/audit`, the console). Empty: nobody (but the local person of
    /// development mode).
    #[serde(default)]
    pub admin_roles: Vec<String>,
}
