//! The rows the store reads and writes, by role: what the gateway sees of its tables. The
//! role files beside this folder (`threads.rs`, `events.rs`, …) hold each role's trait and its
//! SQL; the row types live here, below them all, so the roles and the databases' `Backend`
//! share them without importing each other.

pub mod audit;
pub mod events;
pub mod interrupts;
pub mod threads;
pub mod usage;
