//! The `[limits]`, `[event_log]`, `[turns]` and `[retention]` sections: request and event
//! sizes, stream limits, the log writer's batching, instance leases, and how long idle threads
//! are kept.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_event_bytes: usize,
    pub keepalive_secs: u64,
    pub stream_max_secs: u64,
    pub max_open_steps: usize,
    /// Streams one caller may hold open on this instance (429 `too_many_streams` beyond).
    pub max_streams_per_caller: usize,
    /// Streams open on one thread on this instance, whoever holds them.
    pub max_streams_per_thread: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventLogConfig {
    /// Most events committed in one transaction.
    pub batch_max_events: usize,
    /// Writer tasks (each with its own connection); turns are spread over them by id.
    pub writers: usize,
    /// Batches of one writer in flight at once (PostgreSQL; SQLite always 1): while one waits
    /// for its commit the next is already being written, each on its own connection.
    pub pipeline_depth: usize,
}

/// Turn ownership across instances (§4.6) and shutdown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnsConfig {
    pub lease_ms: u64,
    pub heartbeat_ms: u64,
    pub sweep_ms: u64,
    pub shutdown_grace_secs: u64,
}

/// Erasing idle threads (SPEC §10): off unless `thread_idle_days` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Threads with no activity for this many days are erased, with everything stored for
    /// them; 0 keeps every thread.
    pub thread_idle_days: u64,
    /// Most threads one pass erases, each in its own transaction.
    pub batch: usize,
    /// Seconds between passes.
    pub interval_secs: u64,
}
