//! The gateway over real HTTP: every scenario against a real server on a random port, on
//! SQLite files and on a real PostgreSQL server.

#[path = "../support/gateway_process.rs"]
mod gateway_process;
mod helpers;

mod auth;
mod bad_input;
mod board;
mod cards;
mod config_check;
mod conformance;
mod deciders;
mod delegation;
mod instances;
mod interrupts;
mod metrics;
mod openai;
mod operations;
mod quotas;
mod reconnect;
mod run_route;
mod stream_limits;
mod takeover;
mod threads;
mod upstream;
