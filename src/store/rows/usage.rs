//! What a tenant used of its limits: the vocabulary of [`crate::store::UsageStore`].

use crate::store::error::StoreError;
use crate::store::sql::{Record, SqlDb};
/// A tenant's use of its limits (§8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    pub running_turns: i64,
    pub turns_started: i64,
    pub tokens: i64,
}

impl TenantUsage {
    pub(crate) fn read<DB: SqlDb>(row: &Record<DB>) -> Result<TenantUsage, StoreError> {
        Ok(TenantUsage {
            running_turns: row.get("running_turns")?,
            turns_started: row.get("turns_started")?,
            tokens: row.get("tokens")?,
        })
    }
}
