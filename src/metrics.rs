//! Prometheus metrics, rendered at `GET /metrics` in the text format. The engine owns one
//! [`Metrics`]; each layer counts what it does where it does it. Labels are bounded by config
//! (agent names, outcome and error codes), never by callers or threads.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    pub agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub agent: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: String,
}

pub struct Metrics {
    registry: Registry,
    pub runs_started: Family<AgentLabel, Counter>,
    pub runs_refused: Family<CodeLabel, Counter>,
    pub reconnects: Counter,
    pub turns_finished: Family<OutcomeLabels, Counter>,
    pub turns_running: Gauge,
    pub streams_open: Gauge,
    pub events_appended: Counter,
    pub events_streamed: Counter,
    pub append_batch_events: Histogram,
    pub append_commit_seconds: Histogram,
    pub stream_lag_seconds: Histogram,
    /// The phases of an event's way to its client, in order (see docs/operations.md).
    pub log_queue_seconds: Histogram,
    pub log_write_seconds: Histogram,
    pub log_commit_seconds: Histogram,
    pub log_notify_seconds: Histogram,
    pub stream_wakeup_seconds: Histogram,
    pub stream_write_seconds: Histogram,
    pub interrupts_opened: Counter,
    pub interrupts_decided: Family<CodeLabel, Counter>,
    pub quota_refusals: Family<CodeLabel, Counter>,
    pub auth_failures: Family<CodeLabel, Counter>,
    pub db_connections: Gauge,
    pub db_connections_idle: Gauge,
}

/// Registers each named field of `metrics` in `registry` under the field's own name, with its
/// help text, so a metric's name cannot drift from the field that holds it.
macro_rules! register_each {
    ($registry:ident, $metrics:ident, { $($field:ident: $help:literal,)* }) => {
        $( $registry.register(stringify!($field), $help, $metrics.$field.clone()); )*
    };
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("agui");
        let metrics = Metrics {
            runs_started: Family::default(),
            runs_refused: Family::default(),
            reconnects: Counter::default(),
            turns_finished: Family::default(),
            turns_running: Gauge::default(),
            streams_open: Gauge::default(),
            events_appended: Counter::default(),
            events_streamed: Counter::default(),
            append_batch_events: Histogram::new(exponential_buckets(1.0, 4.0, 7)),
            append_commit_seconds: Histogram::new(exponential_buckets(0.0001, 3.0, 10)),
            stream_lag_seconds: Histogram::new(exponential_buckets(0.0005, 3.0, 10)),
            log_queue_seconds: phase_histogram(),
            log_write_seconds: phase_histogram(),
            log_commit_seconds: phase_histogram(),
            log_notify_seconds: phase_histogram(),
            stream_wakeup_seconds: phase_histogram(),
            stream_write_seconds: phase_histogram(),
            interrupts_opened: Counter::default(),
            interrupts_decided: Family::default(),
            quota_refusals: Family::default(),
            auth_failures: Family::default(),
            db_connections: Gauge::default(),
            db_connections_idle: Gauge::default(),
            registry: Registry::default(),
        };
        register_each!(registry, metrics, {
            runs_started: "Runs that opened a stream, by agent",
            runs_refused: "Runs refused with a lone RUN_ERROR, by code",
            reconnects: "Runs that continued a stream with Last-Event-ID",
            turns_finished: "Turns that ended, by agent and outcome",
            turns_running: "Turns this instance runs now",
            streams_open: "Streams open on this instance",
            events_appended: "Events committed to the log by this instance",
            events_streamed: "Events sent to clients",
            append_batch_events: "Events per group-committed batch",
            append_commit_seconds: "Time to commit one batch of the event log",
            stream_lag_seconds: "From an event's append to its sending on a live stream",
            log_queue_seconds: "From an append's queueing to the start of the batch that writes it",
            log_write_seconds: "From a batch's start to its COMMIT being sent (begin, insert, fence, side writes, waiting for the batch before it)",
            log_commit_seconds: "From a batch's COMMIT being sent to the database acknowledging it",
            log_notify_seconds: "From a batch's commit to other instances being notified of it",
            stream_wakeup_seconds: "From committed events being handed to the streams to a waiting stream task having them",
            stream_write_seconds: "From a stream task having events to their frames being taken by the response body",
            interrupts_opened: "Interrupts opened",
            interrupts_decided: "Interrupts decided, by outcome (decided or expired)",
            quota_refusals: "Runs and turns refused or ended by a tenant limit, by scope (the tenant is not a label)",
            auth_failures: "Refused credentials, by reason (never the credential)",
            db_connections: "Database connections held by this instance",
            db_connections_idle: "Of those, idle",
        });
        Arc::new(Metrics { registry, ..metrics })
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// Buckets for one phase of an event's way: 20 µs doubling to ≈ 2.6 s, fine enough to tell a
/// 0.2 ms fsync from a 0.4 ms one.
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00002, 2.0, 18))
}
