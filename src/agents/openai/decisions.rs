//! People deciding the `openai` agent's calls (SPEC §5): a tool's approval as an interrupt, the
//! decisions a turn waited for and how each reaches the call whose interrupt it answers, and
//! the arguments an approved call runs with. Which call asks a person, and asking again, is
//! `asking.rs`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::calls::PendingCall;
use crate::config::ToolPolicy;
use crate::engine::interrupts::{tool_call_schema, Deciders};
use crate::engine::turn::{new_interrupt_id, AgentError, Decided, InterruptSpec};

/// The decisions on the interrupts a turn waited for, by interrupt id and by the tool call
/// each was opened for; `awaiting` stays in the checkpoints written while they are applied, so
/// a takeover in the middle applies the rest of them.
pub(super) struct Decisions {
    pub(super) awaiting: Vec<String>,
    by_interrupt: BTreeMap<String, Value>,
    by_call: BTreeMap<String, Value>,
}

impl Decisions {
    pub(super) fn new(awaiting: Vec<String>, decided: Vec<Decided>) -> Decisions {
        let mut by_interrupt = BTreeMap::new();
        let mut by_call = BTreeMap::new();
        for decided in decided {
            if let Some(call) = decided.tool_call_id {
                by_call.insert(call, decided.decision.clone());
            }
            by_interrupt.insert(decided.interrupt_id, decided.decision);
        }
        Decisions { awaiting, by_interrupt, by_call }
    }

    /// The decision on the interrupt opened for `call`. Its absence is an error of the turn:
    /// a call is never run, nor reported denied, on a decision that is not its own.
    pub(super) fn for_call(&self, call: &PendingCall) -> Result<&Value, AgentError> {
        let found = match &call.interrupt {
            Some(interrupt) => self.by_interrupt.get(interrupt),
            // Saved before calls named their interrupt: the interrupt names the call.
            None => self.by_call.get(&call.gateway_id),
        };
        found.ok_or_else(|| {
            AgentError::Failed(format!(
                "no decision answers the interrupt opened for the tool call {} ({})",
                call.gateway_id, call.name
            ))
        })
    }
}

/// The approval interrupt of a call of a tool (HTTP or MCP) under `policy`.
pub(super) fn approval_for(call: &PendingCall, policy: &ToolPolicy) -> InterruptSpec {
    InterruptSpec {
        id: new_interrupt_id(),
        reason: "tool_call".into(),
        message: format!("Allow the tool '{}' to run?", call.name),
        tool_call_id: Some(call.gateway_id.clone()),
        response_schema: tool_call_schema(policy.allow_edit, policy.confirm.as_deref()),
        ttl_ms: policy.ttl_secs as i64 * 1000,
        deciders: Deciders::from_config(&policy.deciders),
        four_eyes: policy.four_eyes,
        details: serde_json::from_str(&call.arguments).ok(),
        asks_because: policy.approval_reason(),
        choices: Vec::new(),
        refusal: None,
    }
}

/// The arguments an approved call runs with: the approver's edit where the policy allows one.
pub(super) fn approved_arguments(decision: &Value, policy: &ToolPolicy, call: &PendingCall) -> String {
    decision
        .get("editedArgs")
        .filter(|a| a.is_object() && policy.allow_edit)
        .map_or_else(|| call.arguments.clone(), Value::to_string)
}

/// The result of a call a person did not approve.
pub(super) fn not_run(decision: &Value) -> String {
    let why = decision["comment"].as_str().map(|c| format!(": {c}")).unwrap_or_default();
    let denied = if decision["expired"] == Value::Bool(true) { "expired" } else { "denied" };
    format!("not run: the call was {denied}{why}")
}
