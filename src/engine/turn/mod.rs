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
//! What an agent is and answers with is [`agent`]. Everything an agent needs is re-exported here.

pub mod agent;
mod answers;
pub mod app_request;
mod budget;
mod cards;
mod context;
mod delegation;
mod identity;
mod lifecycle;
mod naming;
mod open;
mod reads;
mod vocabulary;
mod waits;

pub use agent::{Agent, AgentError, AgentOutput, AgentRegistry, Checkpoint};
pub use budget::TokenBudget;
pub use context::{ClientInput, TurnContext, TurnSignal};
pub use delegation::ChildCheckpoint;
pub use vocabulary::{NotePin, Reasoning};
pub use waits::{new_interrupt_id, Decided, InterruptSpec};
