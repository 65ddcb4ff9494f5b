//! The turn engine: decides what a run follows (a new turn, the same turn again, or a refusal),
//! runs turns on their agents, and renders a turn's log as a stream of events for a run.
//!
//! Nothing here knows HTTP: the `http` layer turns [`EngineError`] into statuses and
//! [`StreamItem`]s into SSE frames. The log is the truth; a stream is a view of it.
//!
//! This file only declares the engine's files and re-exports what the layers above use; no
//! file of the engine imports through it. The engine's shape sits below its rooms: [`shape`]
//! ([`Engine`], its shared state and how it starts), [`errors`] ([`EngineError`],
//! [`StartError`]), [`plans`] (a [`RunRequest`] and the [`RunPlan`] it is answered with) and
//! `limits` (the tenant limits' windows, refusals and token budget). The rooms are folders
//! whose files own their code: [`request`] answers a run request (plan → decide → follow, with
//! the history, quota and resume checks); [`turn`] is a turn as an agent answers it
//! ([`turn::TurnContext`], the words it says, what it reads, the [`turn::agent::Agent`] trait
//! and what an agent answers with); [`log`] is the event log ([`log::LogWriter`], its writer
//! loop, batch stages and recovery, and the gateway's own [`log::events`]); [`stream`] is how
//! the log becomes a caller's events (the hub, following other instances' turns, catch-up
//! pages, a run's tail and a connect stream). Below them all, [`interrupts`] is the interrupt
//! vocabulary every room speaks, and [`meaning`] what a decision of one means (read once). Beside them, as `impl Engine` blocks of their own: [`runner`]
//! (the turns running here), [`sweeper`] (leases, takeovers, expiries, wake-ups), [`audit`]
//! (audit rows), [`threads`] (lists, erasure, retention) and [`branches`] (a thread's branches
//! and tree of turns); with [`board`] and [`conversation`].

mod audit;
pub mod board;
pub mod branches;
#[cfg(test)]
mod clock_tests;
pub mod conversation;
pub mod errors;
pub mod inbox;
pub mod interrupts;
mod limits;
pub mod log;
pub mod meaning;
pub mod plans;
#[cfg(test)]
mod reasoning_tests;
pub mod request;
#[cfg(test)]
mod round_trip_tests;
mod runner;
pub mod shape;
pub mod stream;
mod sweeper;
#[cfg(test)]
mod test_engine;
pub mod thread_titles;
pub mod threads;
pub mod trail;
pub mod turn;

/// The one set of error codes (HTTP bodies and `RUN_ERROR`s alike), by which the engine names
/// its refusals and how a turn failed.
pub use crate::protocol::ErrorCode;
pub use errors::{EngineError, StartError};
pub use plans::{FollowPlan, Refusal, RunPlan, RunRequest};
pub use shape::Engine;
pub use stream::connect::{ConnectPlan, ConnectRequest};
pub use stream::tail::StreamItem;
