//! The gateway over real HTTP: every scenario against a real server on a random port, on
//! SQLite files and on a real PostgreSQL server.

mod fakes;
#[path = "../support/gateway_process.rs"]
mod gateway_process;
mod helpers;
#[path = "../support/log_checks.rs"]
mod log_checks;
#[path = "../support/nats_server.rs"]
mod nats_server;
#[path = "../support/test_ca.rs"]
mod test_ca;
mod test_log;
#[path = "../support/tls.rs"]
mod tls_support;
#[path = "../support/watchdog.rs"]
mod watchdog;

mod actions;
mod activity;
mod atomic_audit;
mod auth;
mod bad_input;
mod binary_transport;
mod board;
mod branches;
mod cancels;
mod capabilities;
mod cards;
mod clock;
mod config_check;
mod conformance;
mod connect;
mod copilotkit_instances;
mod copilotkit_runtime;
mod corrupt_state;
mod credentials;
mod deciders;
mod decisions;
mod delegation;
mod deploys;
mod edge;
mod fencing;
mod followers;
mod frameworks;
mod fuzz_input;
mod https;
mod inbox;
mod instances;
mod internal_errors;
mod interrupts;
mod leases;
mod log_pipeline;
mod mcp;
mod mcp_apps;
mod metrics;
mod multimodal;
mod nats_bus;
mod openai;
mod operations;
mod partitions;
mod postgres_tls;
mod quotas;
mod races;
mod reasoning;
mod rechecks;
mod reconnect;
mod redirects;
mod run_route;
mod segments;
mod stream_access;
mod stream_limits;
mod takeover;
mod tenant_scope;
mod thread_admin;
mod thread_audit;
mod threads;
mod tls;
mod tool_effects;
mod upstream;
mod upstream_input;
mod upstream_takeover;
mod upstream_terms;
