//! How long an open stream's caller may go on reading (SPEC §2.1): until a key its access
//! depends on is revoked, its token expires, or the thread it shows is erased.
//! [`Auth::access_ends`] resolves at the first of them; the stream then ends with `RUN_ERROR
//! revoked` saying which (`http/sse.rs`).

use super::state::Auth;
use crate::caller::Caller;

impl Auth {
    /// Resolves once any of `keys` is revoked (never, for an empty list).
    pub async fn revoked(&self, keys: Vec<String>) {
        if keys.is_empty() {
            return std::future::pending().await;
        }
        let mut revoked = self.inner.revoked.subscribe();
        loop {
            if keys.iter().any(|k| revoked.borrow_and_update().contains(k)) {
                return;
            }
            if revoked.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Resolves when `caller`'s right to read ends while a stream is open: a key it depends on
    /// is revoked, its token expires (past the same leeway its verification allowed), or the
    /// thread the stream shows (`sight`) is erased.
    pub async fn access_ends(&self, caller: &Caller, sight: Option<ThreadSight>) -> AccessEnd {
        let keys = caller.revocable_keys();
        // A wait for a time of day, on the gateway's clock (a test moves it past `exp`).
        let expiry = caller.expires_at().map(|exp| {
            let ends_ms = exp.saturating_add(self.inner.config.leeway_secs).saturating_mul(1000);
            self.inner.clock.sleep_until_ms(i64::try_from(ends_ms).unwrap_or(i64::MAX))
        });
        let expired = async {
            match expiry {
                Some(ends) => ends.await,
                None => std::future::pending().await,
            }
        };
        let erased = async {
            match sight {
                Some(sight) => self.thread_erased(sight).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.revoked(keys) => AccessEnd::Revoked,
            () = expired => AccessEnd::Expired,
            () = erased => AccessEnd::ThreadDeleted,
        }
    }

    /// Resolves once the thread of `sight` is erased (on any instance: the watcher reads the
    /// `thread.delete` audit rows). A thread erased and started again under the same id is
    /// another thread: the store says which one still stands, asked only when the id shows up.
    async fn thread_erased(&self, sight: ThreadSight) {
        let mut deleted = self.inner.deleted_threads.subscribe();
        let key = (sight.tenant, sight.thread_id);
        loop {
            let named = deleted.borrow_and_update().contains_key(&key);
            if named {
                match self.inner.store.thread_by_pk(sight.thread_pk).await {
                    Ok(Some(thread)) if (thread.tenant.as_str(), thread.thread_id.as_str()) == (&key.0, &key.1) => {}
                    Ok(_) => return,
                    Err(error) => tracing::warn!(%error, "could not tell whether a thread still stands"),
                }
            }
            if deleted.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// Why an open stream's caller may read no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessEnd {
    /// A key the caller's access depends on was revoked.
    Revoked,
    /// The caller's token expired.
    Expired,
    /// The thread the stream shows was erased.
    ThreadDeleted,
}

/// The thread an open stream shows: it ends when the thread is erased.
#[derive(Debug, Clone)]
pub struct ThreadSight {
    pub tenant: String,
    pub thread_id: String,
    pub thread_pk: i64,
}

/// How long an erased thread stays in the watcher's set: every open stream on it hears of the
/// erasure within `auth.revocation_check_ms`; this is the margin.
pub(super) const DELETIONS_KEPT_MS: i64 = 10 * 60 * 1000;

impl AccessEnd {
    /// What the stream's `RUN_ERROR` (code `revoked`) says.
    pub fn message(self) -> &'static str {
        match self {
            AccessEnd::Revoked => "the caller's access was withdrawn while the stream was open",
            AccessEnd::Expired => "the caller's token expired while the stream was open; reconnect with a fresh one",
            AccessEnd::ThreadDeleted => "the thread was deleted while the stream was open",
        }
    }
}
