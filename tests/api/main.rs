//! The gateway over real HTTP: every scenario against a real server on a random port, on
//! SQLite files and on a real PostgreSQL server.

#[path = "../support/gateway_process.rs"]
mod gateway_process;
mod helpers;

mod auth;
mod bad_input;
mod board;
mod cards;
mod conformance;
mod deciders;
mod decisions;
mod delegation;
mod instances;
mod interrupts;
mod metrics;
mod openai;
mod operations;
mod quotas;
mod reconnect;
mod redirects;
mod run_route;
mod takeover;
mod threads;
mod upstream;
