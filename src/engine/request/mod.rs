//! Answering a run request: what the run follows ([`plan`]), the decisions it or the decision
//! route brings ([`decide`]), and the stream plan every path ends in ([`follow`]); with the
//! checks they lean on: the client's history ([`history`], a person's action read into it by
//! [`actions`]), the tenant's quotas ([`quota`]) and
//! who decides an interrupt ([`interrupts`]).
//!
//! Calls go one way: `plan` → `decide` → `follow`, each of them down to the checks; nothing
//! below calls back up.

pub mod actions;
mod decide;
mod follow;
pub mod history;
pub mod interrupts;
mod plan;
mod quota;

pub(super) use decide::resumed_marker;
pub use quota::{quota_refusal, quota_window};
