//! What one gateway's authentication holds: [`Auth`] and its shared state. The checks are
//! `mod.rs` (credentials), `access.rs` (how long a caller may read) and `watchers.rs` (the
//! background revocation watch and failure reports).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::jwt::AppTokens;
use super::providers::Provider;
use crate::clock::Clock;
use crate::config::AuthConfig;
use crate::store::Store;

/// Authentication for one gateway: cheap to clone.
#[derive(Clone)]
pub struct Auth {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) config: AuthConfig,
    /// Local development mode; under `auto` it switches off for good once a key exists.
    pub(super) local_dev: AtomicBool,
    pub(super) tenants: HashSet<String>,
    pub(super) store: Arc<dyn Store>,
    pub(super) app: AppTokens,
    pub(super) providers: Vec<Arc<Provider>>,
    pub(super) failures: Mutex<Failures>,
    pub(super) revoked: watch::Sender<Arc<HashSet<String>>>,
    /// Threads erased lately (`(tenant, thread id)` → when), so that open streams on them end;
    /// kept for `access::DELETIONS_KEPT_MS`, far longer than a stream takes to hear of one.
    pub(super) deleted_threads: watch::Sender<Arc<HashMap<(String, String), i64>>>,
    /// What time it is for minted tokens' lifetimes and the failure and revocation windows.
    pub(super) clock: Arc<dyn Clock>,
}

#[derive(Default)]
pub(super) struct Failures {
    /// Since the last report, per tenant and reason.
    pub(super) pending: HashMap<String, BTreeMap<&'static str, u64>>,
    pub(super) pending_since_ms: i64,
    /// Since start, per tenant.
    pub(super) total: HashMap<String, u64>,
}
