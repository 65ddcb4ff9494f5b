//! What authentication does in the background: the revocation watcher (streams of a revoked
//! key, and streams on an erased thread, end), the end of local development mode once a key
//! exists, and the periodic audit rows counting refused credentials.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;

use super::access::DELETIONS_KEPT_MS;
use super::error::AuthSetupError;
use super::state::Inner;
use crate::store::{AuditEntry, Store, StoreError};

impl Inner {
    /// Under `auto`, a key created while serving (`keys create` beside a running gateway) means
    /// the gateway is meant to be protected: local development mode ends, until a restart
    /// decides again.
    pub(super) async fn end_local_dev_once_a_key_exists(&self) {
        if self.config.local_dev != "auto" || !self.local_dev.load(Ordering::Acquire) {
            return;
        }
        match holds_api_keys(self.store.as_ref()).await {
            Ok(false) => {}
            Ok(true) => {
                self.local_dev.store(false, Ordering::Release);
                tracing::warn!("an API key exists now: local development mode is off, anonymous callers are refused");
            }
            Err(error) => tracing::warn!(%error, "looking for API keys failed"),
        }
    }

    /// Adds the threads the `thread.delete` rows name to the published set, and drops those
    /// erased longer ago than [`DELETIONS_KEPT_MS`]; publishes only when the set changed.
    fn publish_deletions(&self, rows: Vec<AuditEntry>, now_ms: i64) {
        self.deleted_threads.send_if_modified(|set| {
            let fresh: Vec<((String, String), i64)> = rows
                .into_iter()
                .filter_map(|row| {
                    let detail: serde_json::Value = serde_json::from_str(&row.detail).ok()?;
                    let thread = detail.get("thread")?.as_str()?.to_string();
                    Some(((row.tenant, thread), row.at_ms))
                })
                .filter(|(key, _)| !set.contains_key(key))
                .collect();
            let stale = set.values().any(|at| *at < now_ms - DELETIONS_KEPT_MS);
            if fresh.is_empty() && !stale {
                return false;
            }
            let mut grown: HashMap<(String, String), i64> = set
                .iter()
                .filter(|(_, at)| **at >= now_ms - DELETIONS_KEPT_MS)
                .map(|(k, at)| (k.clone(), *at))
                .collect();
            grown.extend(fresh);
            *set = Arc::new(grown);
            true
        });
    }

    pub(super) async fn report_failures(&self) -> Result<(), StoreError> {
        let (pending, since) = {
            let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            let since = std::mem::replace(&mut failures.pending_since_ms, self.clock.now_ms());
            (std::mem::take(&mut failures.pending), since)
        };
        for (tenant, reasons) in pending {
            let count: u64 = reasons.values().sum();
            let entry = AuditEntry {
                tenant,
                action: "auth.failures".into(),
                actor: "gateway".into(),
                via: None,
                detail: json!({ "count": count, "reasons": reasons, "sinceMs": since }).to_string(),
                at_ms: self.clock.now_ms(),
            };
            self.store.append_audit(&entry).await?;
        }
        Ok(())
    }
}

/// True when the store holds any API key (of any tenant, revoked ones too).
pub(super) async fn holds_api_keys(store: &dyn Store) -> Result<bool, AuthSetupError> {
    let keys = store.list_api_keys(None).await.map_err(AuthSetupError::Store)?;
    Ok(!keys.is_empty())
}

/// Polls for keys revoked and threads erased since the last look (two queries per interval for
/// all open streams) and publishes them; streams of a revoked key, or on an erased thread, end
/// within the interval.
pub(super) fn spawn_revocation_watcher(inner: Weak<Inner>) {
    tokio::spawn(async move {
        let every = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.revocation_check_ms),
            None => return,
        };
        let mut since = 0;
        let mut deletions_since = match inner.upgrade() {
            Some(inner) => inner.clock.now_ms() - 60_000,
            None => return,
        };
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(inner) = inner.upgrade() else { return };
            inner.end_local_dev_once_a_key_exists().await;
            // Revocations are stamped by whoever made them (another instance, the CLI): look a
            // minute back to forgive their clocks.
            let started = inner.clock.now_ms();
            match inner.store.revoked_keys_since(since).await {
                Ok(ids) => {
                    since = started - 60_000;
                    inner.revoked.send_if_modified(|set| {
                        let fresh: Vec<String> = ids.into_iter().filter(|id| !set.contains(id)).collect();
                        if fresh.is_empty() {
                            return false;
                        }
                        let mut grown = (**set).clone();
                        grown.extend(fresh);
                        *set = Arc::new(grown);
                        true
                    });
                }
                Err(error) => tracing::warn!(%error, "looking for revoked keys failed"),
            }
            match inner.store.audit_rows_of("thread.delete", deletions_since).await {
                Ok(rows) => {
                    deletions_since = started - 60_000;
                    inner.publish_deletions(rows, started);
                }
                Err(error) => tracing::warn!(%error, "looking for erased threads failed"),
            }
        }
    });
}

pub(super) fn spawn_failure_reporter(inner: Weak<Inner>) {
    tokio::spawn(async move {
        let every = match inner.upgrade() {
            Some(inner) => Duration::from_secs(inner.config.failure_report_secs),
            None => return,
        };
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(inner) = inner.upgrade() else { return };
            if let Err(error) = inner.report_failures().await {
                tracing::warn!(%error, "could not write the counts of refused credentials to the audit trail");
            }
        }
    });
}
