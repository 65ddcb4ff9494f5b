//! A server under test, seen the same way by every scenario: the gateway (whose `bench` script
//! agent is configured for the scenario) or a peer (told what to stream in the request).

use serde_json::{json, Value};

use crate::database::Store;
use crate::http::{Client, Transport};

/// What a run streams, besides RUN_STARTED and the terminal event.
#[derive(Debug, Clone, Copy)]
pub enum Script {
    /// One message of `events` TEXT_MESSAGE_CONTENT events of `bytes` characters each.
    Burst { events: u64, bytes: usize },
    /// `ticks` CUSTOM `gateway.tick` events, one every `every_ms`.
    Tick { ticks: u64, every_ms: u64 },
    /// Nothing for `ms` milliseconds (an open stream waiting).
    Wait { ms: u64 },
}

impl Script {
    /// The gateway's script steps for it (TOML inline array).
    pub fn toml_steps(&self) -> String {
        match self {
            Script::Burst { events, bytes } => format!("[{{ burst = {events}, bytes = {bytes} }}]"),
            Script::Tick { ticks, every_ms } => {
                format!("[{{ tick = {ticks}, every_ms = {every_ms} }}]")
            }
            Script::Wait { ms } => format!("[{{ wait_ms = {ms} }}]"),
        }
    }

    /// How a peer is told: `forwardedProps.bench`.
    pub fn peer_props(&self) -> Value {
        match self {
            Script::Burst { events, bytes } => json!({ "burst": events, "bytes": bytes }),
            Script::Tick { ticks, every_ms } => json!({ "tick": ticks, "everyMs": every_ms }),
            Script::Wait { ms } => json!({ "waitMs": ms }),
        }
    }
}

/// Where runs go and whose CPU and memory to read.
#[derive(Debug, Clone)]
pub struct Target {
    /// "gateway/postgres", "python", "copilotkit".
    pub name: String,
    /// The run URL for the scenario's script.
    pub run_url: String,
    /// The run URL of a small warm-up burst.
    pub warmup_url: String,
    /// The server process.
    pub pid: u32,
    /// Whether it is the gateway (durable, `id:` lines, STATE_SNAPSHOT) or a peer.
    pub is_gateway: bool,
    /// The gateway's `GET /metrics` (None for a peer).
    pub metrics_url: Option<String>,
    /// The gateway's PostgreSQL database, whose counters a window reads (`crate::pgstats`);
    /// None for SQLite and for a peer.
    pub database_url: Option<String>,
    /// How runs reach it; [`Target::client`] makes a client of its own per scenario.
    pub connector: Client,
}

impl Target {
    /// A client for this target's transport sharing no connection with another.
    pub fn client(&self) -> Client {
        self.connector.fresh()
    }
}

/// A gateway's name in the figures: "gateway/postgres" over plain HTTP (the keys the targets
/// are judged on), "gateway/postgres/tls-h2" over TLS.
pub fn gateway_name(store: Store, transport: Transport) -> String {
    match transport {
        Transport::Plain => format!("gateway/{store}"),
        other => format!("gateway/{store}/{other}"),
    }
}

/// The warm-up run each scenario makes first (connections, caches, JIT in the Node peer).
pub const WARMUP: Script = Script::Burst { events: 2000, bytes: 64 };
