//! `agui-gateway audit`: the audit trail (run starts, decisions, board reads, keys, token
//! exchanges), oldest first, one line per entry.

use super::{CommandResult, Common, Wiring};
use crate::auth::time::{format_ms, parse_since};

/// Print the audit trail, oldest first.
#[derive(clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long)]
    tenant: Option<String>,
    /// From when: an RFC 3339 time (2025-01-31T12:00:00Z), a date (2025-01-31), or an age
    /// (30m, 12h, 7d).
    #[arg(long)]
    since: Option<String>,
    #[arg(long, default_value_t = 1000)]
    limit: i64,
}

impl AuditArgs {
    pub async fn run(self, wiring: &dyn Wiring) -> CommandResult {
        let AuditArgs { common, tenant, since, limit } = self;
        let config = common.load()?;
        let since_ms = match since.as_deref() {
            Some(text) => {
                parse_since(text, crate::clock::Clock::now_ms(&crate::clock::SystemClock)).ok_or_else(|| {
                    format!("--since '{text}': give an RFC 3339 time, a date, or an age like 30m, 12h, 7d")
                })?
            }
            None => 0,
        };
        let store = wiring.store(&config).await?;
        for row in store.audit_rows(tenant.as_deref(), since_ms, limit).await? {
            let entry = row.entry;
            println!(
                "{}  {}  {}  {}  {}  {}",
                format_ms(entry.at_ms),
                entry.tenant,
                entry.action,
                entry.actor,
                entry.via.as_deref().unwrap_or("-"),
                entry.detail
            );
        }
        Ok(())
    }
}
