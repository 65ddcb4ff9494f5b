//! The `[limits]`, `[event_log]`, `[turns]` and `[retention]` sections: request and event
//! sizes, stream limits, the timeouts and caps of every connection, the log writer's batching,
//! instance leases, and how long idle threads are kept.

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
    /// Connections open at once on this instance (TLS handshakes included); past it, new
    /// connections wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// How long a connection may take to finish its TLS handshake, to tell its protocol (the
    /// h2c preface) and to send a whole request head; an HTTP/1.1 connection waiting for its
    /// next request is waiting for a head too.
    pub header_read_timeout_secs: u64,
    /// A connection with no request in flight for this long is closed (HTTP/2 with GOAWAY). A
    /// response still streaming (an SSE stream) is in flight.
    pub idle_timeout_secs: u64,
    /// How often an HTTP/2 connection is pinged when the peer has been silent.
    pub h2_keepalive_interval_secs: u64,
    /// An HTTP/2 connection whose ping is not answered within this is closed.
    pub h2_keepalive_timeout_secs: u64,
    /// The longest a request body may take to arrive whole (408 `request_timeout` beyond).
    pub body_read_timeout_secs: u64,
    /// The largest request head (request line and headers), HTTP/1.1 and HTTP/2 alike.
    pub max_header_bytes: usize,
    /// JSON values (objects, arrays, strings, numbers, …) one request body may hold: what a
    /// parsed body costs in memory grows with them more than with its bytes.
    pub max_json_values: usize,
    /// The largest JSON Schema (`parameters`) of one client tool, in bytes as serialized.
    pub max_tool_schema_bytes: usize,
    /// The deepest nesting of objects and arrays in one client tool's schema.
    pub max_tool_schema_depth: usize,
    /// The largest content part of a user message, every byte of it as kept (its base64 data
    /// or URL, media type, file name, metadata; a text part without its words) (413
    /// `payload_too_large` naming the part beyond).
    pub max_content_part_bytes: usize,
    /// The content parts of one run's new user message together, measured so: the turn keeps
    /// them, and they go to the agent on every model call of it.
    pub max_content_bytes: usize,
    /// The URL schemes a media part's URL may have (lower-case; `https` and `data` by
    /// default): the gateway fetches none, but a model server given one might.
    pub content_url_schemes: Vec<String>,
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
    /// PostgreSQL: turn ids per partition of the log (`event_segments` is partitioned by
    /// turn; the gateway makes the partitions ahead and drops emptied ones).
    pub partition_turns: u64,
}

impl EventLogConfig {
    /// `partition_turns` as the store takes it (turn ids are `BIGINT`).
    pub fn turns_per_partition(&self) -> i64 {
        i64::try_from(self.partition_turns).unwrap_or(i64::MAX)
    }
}

/// Turn ownership across instances (§4.6) and shutdown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnsConfig {
    pub lease_ms: u64,
    pub heartbeat_ms: u64,
    pub sweep_ms: u64,
    /// On SIGTERM: how long the turns running here may go on to their end before what is left
    /// is handed over (§4.6); `readyz` answers 503 meanwhile.
    pub drain_secs: u64,
    pub shutdown_grace_secs: u64,
    /// A decision on an interrupt shown longer ago than this is checked again against what the
    /// agent would ask now (§5.3); a call that changed is superseded (`interrupt_changed`).
    pub decision_recheck_secs: u64,
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
