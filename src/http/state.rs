//! What every handler shares: [`AppState`], the engine, the credential checks and the
//! configuration, with the instance's shutdown signal and its thread-list wake-ups.

use std::sync::Arc;

use tokio::sync::watch;

use super::frames::FrameCache;
use crate::auth::Auth;
use crate::config::Config;
use crate::engine::Engine;

/// What every handler shares; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub auth: Auth,
    pub config: Arc<Config>,
    /// Flips to true when the server begins shutting down: open streams end (resumably).
    pub(super) shutting_down: watch::Receiver<bool>,
    /// Moved on whenever this instance changes a thread's entry in a list (a run, a rename, an
    /// archive, an erasure), so the live thread lists (`copilotkit::realtime`) look again at
    /// once rather than at their next poll.
    pub(super) thread_changes: Arc<watch::Sender<u64>>,
    /// The binary frames of logged events, made once for all this instance's streams.
    pub(super) frames: Arc<FrameCache>,
}

impl AppState {
    /// A refused credential: counted per tenant (for the audit commands) and by reason in
    /// `/metrics`.
    pub fn auth_failed(&self, tenant: &str, reason: &'static str) {
        self.auth.record_failure(tenant, reason);
        let label = crate::metrics::CodeLabel { code: reason.to_string() };
        self.engine.metrics().auth_failures.get_or_create(&label).inc();
    }

    pub fn new(engine: Engine, auth: Auth) -> (AppState, watch::Sender<bool>) {
        let (sender, receiver) = watch::channel(false);
        let config = engine.config().clone();
        let thread_changes = Arc::new(watch::Sender::new(0));
        let frames = Arc::new(FrameCache::default());
        (AppState { engine, auth, config, shutting_down: receiver, thread_changes, frames }, sender)
    }

    /// Says that a thread's entry in a list may have changed on this instance.
    pub(crate) fn threads_changed(&self) {
        self.thread_changes.send_modify(|count| *count = count.wrapping_add(1));
    }
}
