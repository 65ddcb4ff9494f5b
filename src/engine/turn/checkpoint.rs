//! Where a turn's agent stands: the [`Checkpoint`] a turn goes on from, the
//! [`ChildCheckpoint`] of a delegation saved inside its parent's, and the live frame of a
//! delegation under way. Below the context, which holds them, and the files that write them.

use serde_json::Value;

/// Where a turn's agent stood when the turn started (a fresh turn starts at zero).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// The next script step to run.
    pub step: usize,
    /// Interrupts the step waits on; their decisions are read when the turn goes on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<String>,
    /// The last answer a person gave to a question (`{answer}` in later script steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The tool calls awaiting approval, in the order of `awaiting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// An LLM agent's conversation so far and its unfinished tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
    /// The delegation this step is in the middle of, and where its child stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<Box<ChildCheckpoint>>,
}

/// A child turn under way inside a delegating step (§3 steps).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ChildCheckpoint {
    /// The child turn's id: its `STEP_STARTED`/`STEP_FINISHED` name and `gateway/turn`.
    pub id: String,
    pub agent: String,
    /// What the child was asked (its `{input}`).
    pub input: String,
    pub checkpoint: Checkpoint,
    /// Its step was finished when the turn waited; the resuming run starts it again.
    #[serde(default)]
    pub reopen: bool,
}

/// A delegation under way: where the delegating agent stands, and the child.
#[derive(Debug, Clone)]
pub(super) struct NestFrame {
    pub(super) parent: Checkpoint,
    pub(super) id: String,
    pub(super) agent: String,
    pub(super) input: String,
    /// Its step was finished for a wait: the run that resumes it starts it again.
    pub(super) reopen: bool,
}
