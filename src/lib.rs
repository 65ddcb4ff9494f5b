//! agui-gateway: an AG-UI 1.0 gateway with durable threads and a persisted, replayable event log.
//!
//! Layers, each in its own folder: [`protocol`] (AG-UI wire types), [`store`] (the storage
//! trait and its PostgreSQL/SQLite implementations), [`engine`] (turns, the group-commit event
//! log and stream wake-ups), [`agents`] (one file per agent kind), [`auth`] (who is calling),
//! [`http`] (routes, extractors, SSE rendering), [`telemetry`] (logs and traces). `main.rs`
//! only parses the command line.

pub mod admin;
pub mod agents;
pub mod auth;
pub mod caller;
pub mod config;
pub mod engine;
pub mod http;
pub mod ids;
pub mod metrics;
pub mod protocol;
pub mod redact;
pub mod server;
pub mod store;
pub mod telemetry;
