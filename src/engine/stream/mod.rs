//! The streaming side of the engine: how a turn's log becomes the events a caller is sent.
//!
//! Nothing here writes the log; every file reads it, in memory or from the table:
//! - [`hub`]: one feed per turn someone writes or watches (the newest committed sequence and the
//!   recent events), filled by the log writer here or, for a turn another instance runs, by
//!   [`followers`], which follows that turn once for all its streams here;
//! - [`pages`]: the catch-up read of a turn's log, in pages read ahead of the renderer;
//! - [`tail`]: one run's stream, the log rendered from a position on for one caller;
//! - [`connect`]: a thread watched across its turns (`POST …/connect`), each turn rendered as
//!   [`tail`] renders it.

pub mod connect;
pub(crate) mod followers;
pub mod hub;
pub(crate) mod pages;
#[cfg(test)]
mod pages_tests;
pub mod tail;
