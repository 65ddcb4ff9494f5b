//! Answering a run request: what the run follows ([`plan`]), the decisions it or the decision
//! route brings ([`decide`]), and the stream plan every path ends in ([`follow`]); with the
//! checks they lean on: the client's history ([`history`], a person's action read into it by
//! [`actions`]), the tenant's quotas ([`quota`]) and the all-or-nothing check of a resume
//! ([`resume`]), which speaks the interrupt vocabulary of `engine/interrupts.rs` below this room.
//!
//! Calls go one way: `plan` → `decide` → `follow`, each of them down to the checks; nothing
//! below calls back up.

pub mod actions;
pub mod app_requests;
mod decide;
mod follow;
pub mod history;
mod plan;
mod quota;
pub mod resume;

pub(super) use decide::resumed_marker;
