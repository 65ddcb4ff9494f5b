//! agui-gateway: an AG-UI 1.0 gateway with durable threads and a persisted, replayable event log.
//!
//! Layers, lowest first; a module imports only modules below it (`tests/layers.rs` checks):
//! [`protocol`] (AG-UI wire types) and [`ids`]; [`config`] (settings as plain data, agents'
//! included); [`store`] (the storage trait and its PostgreSQL/SQLite implementations);
//! [`caller`] (the authenticated principal); [`auth`] (who is calling, from credentials);
//! [`engine`] (turns, the [`engine::turn::agent::Agent`] trait, the group-commit event log and stream
//! wake-ups); [`agents`] (one file per agent kind); [`http`] (routes, extractors, SSE rendering)
//! and [`admin`] (operator commands); [`server`] (wires everything and builds the agent
//! registry). [`metrics`], [`redact`], [`clock`] (wall-clock time, injectable), [`retry`] (one
//! backoff, `Retry-After`) and [`telemetry`] (logs and traces) sit low, for anyone.
//! `main.rs` parses the command line and dispatches: the operator commands to [`admin`] (with
//! the store and engine [`server::CommandWiring`] opens), serving and migrating to [`server`].

pub mod admin;
pub mod agents;
pub mod auth;
pub mod bus;
pub mod caller;
pub mod clock;
pub mod config;
pub mod engine;
pub mod http;
pub mod ids;
pub mod metrics;
pub mod protocol;
pub mod redact;
pub mod retry;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;
