//! A turn as an agent answers it. [`TurnContext`] is what the agent holds: it numbers and
//! writes what the agent says, remembers what is open, and obeys the engine's signals.
//!
//! Each file owns one concern of the context, as an `impl TurnContext` block of its own:
//! [`context`] (the context, its signals, events and checkpoints as log ops), [`vocabulary`]
//! (messages, reasoning, tool calls, steps, notes), [`reads`] (what a turn reads, patiently),
//! `waits` (interrupts it opens, client tool results), `delegation` (child agents), `budget`
//! (the tenant's tokens), `cards` and `lifecycle` (picking a turn up, ending it), and `open`
//! (what is open in a turn: the one record that appending, picking a log up and closing keep).
//! The context's state is its own: the other files ask it through methods, and the parts with
//! rules of their own are small types beside it — `identity` (which turn it is), `naming` (how
//! its items are numbered) and `answers` (the AI label, the latest answer).
//! What an agent is is [`agent`] (the [`Agent`] trait and the registry); what it answers with
//! is `outcome`, where it stands `checkpoint`: both below the context, which sees the registry
//! only as the `ChildAgents` it may delegate to, so the files here import one way. Everything
//! an agent needs is re-exported here, for the layers above; the files here name each other.

pub mod agent;
mod answers;
pub mod app_request;
mod budget;
mod cards;
mod checkpoint;
mod client_input;
mod context;
mod delegation;
mod identity;
mod lifecycle;
mod naming;
mod open;
mod outcome;
mod reads;
mod vocabulary;
mod waits;

pub use crate::engine::limits::TokenBudget;
pub use agent::{Agent, AgentRegistry};
pub use checkpoint::{Checkpoint, ChildCheckpoint};
pub use client_input::ClientInput;
pub(in crate::engine) use context::TurnServices;
pub use context::{TurnContext, TurnSignal};
pub use outcome::{AgentError, AgentOutput};
pub use vocabulary::{NotePin, Reasoning};
pub use waits::{new_interrupt_id, Decided, InterruptSpec};
