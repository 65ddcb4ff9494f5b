//! What authentication does in the background: the revocation watcher (streams of a revoked key
//! end), the end of local development mode once a key exists, and the periodic audit rows
//! counting refused credentials.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;

use super::{AuthSetupError, Inner};
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

/// Polls for keys revoked since the last look (one query per interval for all open streams)
/// and publishes the set; streams of a revoked key end within the interval.
pub(super) fn spawn_revocation_watcher(inner: Weak<Inner>) {
    tokio::spawn(async move {
        let every = match inner.upgrade() {
            Some(inner) => Duration::from_millis(inner.config.revocation_check_ms),
            None => return,
        };
        let mut since = 0;
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
