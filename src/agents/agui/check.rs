//! What an upstream may send: each event checked as the official client checks it (its JSON,
//! its schema, and the order rules of its verification), before anything of it is relayed.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::turn::AgentError;
use crate::protocol::events::{Envelope, RunOutcome};
use crate::protocol::Event;

/// One upstream event, checked as the official client checks it: JSON, no `null` where AG-UI
/// wants a field absent, an integer timestamp, and the event's own schema.
pub(super) fn parse_upstream_event(data: &str) -> Result<Event, AgentError> {
    // Most events hold no `null` at all: read them once, straight into the event (a float
    // timestamp fails there too). Anything else takes the path that names what is wrong.
    if !data.contains("null") {
        if let Ok(envelope) = serde_json::from_str::<Envelope>(data) {
            return Ok(envelope.event);
        }
    }
    let invalid = |why: String| AgentError::Failed(format!("the upstream agent sent an invalid event: {why}"));
    let value: Value = serde_json::from_str(data).map_err(|e| AgentError::FailedOn {
        what: "the upstream agent sent an invalid event: not JSON".into(),
        source: Box::new(e),
    })?;
    let object = value.as_object().ok_or_else(|| invalid("not a JSON object".into()))?;
    let kind = object.get("type").and_then(Value::as_str).unwrap_or("?").to_string();
    // Required payloads may be null; every optional field must be absent instead.
    const MAY_BE_NULL: [&str; 3] = ["snapshot", "value", "event"];
    if let Some((field, _)) = object.iter().find(|(k, v)| v.is_null() && !MAY_BE_NULL.contains(&k.as_str())) {
        return Err(invalid(format!("{kind}.{field} is null")));
    }
    if let Some(timestamp) = object.get("timestamp") {
        if timestamp.as_i64().is_none() {
            return Err(invalid(format!("{kind}.timestamp is not an integer")));
        }
    }
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| AgentError::FailedOn {
        what: format!("the upstream agent sent an invalid event: {kind}"),
        source: Box::new(e),
    })?;
    Ok(envelope.event)
}

/// `id` opens in `set` (a message, a tool call, a step, …): it must not be open already.
fn start(set: &mut BTreeSet<String>, id: &str, what: &str) -> Result<(), String> {
    if set.insert(id.to_string()) {
        Ok(())
    } else {
        Err(format!("started {what} '{id}' twice"))
    }
}

/// An event of `id` (`what`) where `id` must be open in `set`.
fn open(set: &BTreeSet<String>, id: &str, what: &str) -> Result<(), String> {
    if set.contains(id) {
        Ok(())
    } else {
        Err(format!("sent {what} for '{id}', which is not open"))
    }
}

/// `what` closes `id`, which must be open in `set`.
fn end(set: &mut BTreeSet<String>, id: &str, what: &str) -> Result<(), String> {
    open(set, id, what)?;
    set.remove(id);
    Ok(())
}

/// The ordering rules of AG-UI 1.0 (what the official client's verification enforces), for
/// the events the gateway relays.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct UpstreamOrder {
    started: bool,
    messages: BTreeSet<String>,
    calls: BTreeSet<String>,
    steps: BTreeSet<String>,
    /// Reasoning spans and reasoning messages are tracked apart, as the client tracks them.
    reasoning_spans: BTreeSet<String>,
    reasoning_messages: BTreeSet<String>,
    /// Subagents started and not finished, and those finished in this run.
    #[serde(default)]
    subagents: BTreeSet<String>,
    #[serde(default)]
    subagents_done: BTreeSet<String>,
    /// Who opened each message, tool call, reasoning message and activity (`<kind>:<id>` →
    /// its subagent; absent: the agent itself), as the client tracks attribution.
    #[serde(default)]
    owners: std::collections::BTreeMap<String, Option<String>>,
}

impl UpstreamOrder {
    // Each rule records what it checks (an insert that must be new): a guard would hide that.
    #[allow(clippy::collapsible_match)]
    pub(super) fn check(&mut self, event: &Event) -> Result<(), String> {
        if !self.started {
            return match event {
                Event::RunStarted { .. } => {
                    self.started = true;
                    Ok(())
                }
                Event::RunError { .. } => Ok(()),
                _ => Err(format!("sent {} before RUN_STARTED", event_name(event))),
            };
        }
        self.check_attribution(event)?;
        match event {
            Event::RunStarted { .. } => return Err("sent RUN_STARTED twice".into()),
            Event::TextMessageStart { message_id, .. } => start(&mut self.messages, message_id, "message")?,
            Event::TextMessageContent { message_id, .. } => open(&self.messages, message_id, "TEXT_MESSAGE_CONTENT")?,
            Event::TextMessageEnd { message_id, .. } => end(&mut self.messages, message_id, "TEXT_MESSAGE_END")?,
            Event::ToolCallStart { tool_call_id, .. } => start(&mut self.calls, tool_call_id, "tool call")?,
            Event::ToolCallArgs { tool_call_id, .. } => open(&self.calls, tool_call_id, "TOOL_CALL_ARGS")?,
            Event::ToolCallEnd { tool_call_id, .. } => end(&mut self.calls, tool_call_id, "TOOL_CALL_END")?,
            // Steps are matched by their owner and name, as the client matches them.
            Event::StepStarted { step_name, subagent_run_id, .. } => {
                start(&mut self.steps, &step_key(subagent_run_id, step_name), "step")?
            }
            Event::StepFinished { step_name, subagent_run_id, .. } => {
                end(&mut self.steps, &step_key(subagent_run_id, step_name), "STEP_FINISHED")?
            }
            Event::SubagentStarted { subagent_run_id, parent_subagent_run_id, .. } => {
                if self.subagents.contains(subagent_run_id) || self.subagents_done.contains(subagent_run_id) {
                    return Err(format!("started subagent '{subagent_run_id}' twice"));
                }
                if let Some(parent) = parent_subagent_run_id {
                    if !self.subagents.contains(parent) && !self.subagents_done.contains(parent) {
                        return Err(format!("started a subagent under '{parent}', which was never started"));
                    }
                }
                self.subagents.insert(subagent_run_id.clone());
            }
            Event::SubagentFinished { subagent_run_id, .. } | Event::SubagentError { subagent_run_id, .. } => {
                end(&mut self.subagents, subagent_run_id, "the end of a subagent")?;
                self.subagents_done.insert(subagent_run_id.clone());
            }
            Event::ReasoningStart { message_id, .. } => start(&mut self.reasoning_spans, message_id, "reasoning span")?,
            Event::ReasoningEnd { message_id, .. } => end(&mut self.reasoning_spans, message_id, "REASONING_END")?,
            Event::ReasoningMessageStart { message_id, role, .. } => {
                if role != "reasoning" {
                    return Err(format!("sent REASONING_MESSAGE_START with role '{role}', not 'reasoning'"));
                }
                start(&mut self.reasoning_messages, message_id, "reasoning message")?;
            }
            Event::ReasoningMessageContent { message_id, .. } => {
                open(&self.reasoning_messages, message_id, "REASONING_MESSAGE_CONTENT")?
            }
            Event::ReasoningMessageEnd { message_id, .. } => {
                end(&mut self.reasoning_messages, message_id, "REASONING_MESSAGE_END")?
            }
            Event::ActivityDelta { patch, .. } => check_patch(patch, "ACTIVITY_DELTA")?,
            Event::StateDelta { delta, .. } => check_patch(delta, "STATE_DELTA")?,
            Event::RunFinished { outcome, .. } => {
                if !(self.messages.is_empty() && self.calls.is_empty() && self.steps.is_empty()) {
                    return Err("sent RUN_FINISHED with messages, tool calls or steps still open".into());
                }
                if !(self.reasoning_spans.is_empty() && self.reasoning_messages.is_empty()) {
                    return Err("sent RUN_FINISHED with reasoning still open".into());
                }
                if !self.subagents.is_empty() {
                    return Err("sent RUN_FINISHED with subagents still running".into());
                }
                if let Some(RunOutcome::Interrupt { interrupts }) = outcome {
                    if interrupts.is_empty() {
                        return Err("sent an interrupt outcome without interrupts".into());
                    }
                }
            }
            // Chunks reach the check only expanded (`super::chunks`).
            _ => {}
        }
        Ok(())
    }
}

impl UpstreamOrder {
    /// The client's attribution rules: what continues a message, tool call, reasoning message
    /// or activity names the subagent that opened it, or none; a tool call named by a subagent
    /// belongs to a message of that subagent.
    fn check_attribution(&mut self, event: &Event) -> Result<(), String> {
        let tag = event.attribution().map(str::to_string);
        let opened = |kind: &str, id: &str| format!("{kind}:{id}");
        let (key, opens) = match event {
            Event::TextMessageStart { message_id, .. } => (opened("m", message_id), true),
            Event::TextMessageContent { message_id, .. } | Event::TextMessageEnd { message_id, .. } => {
                (opened("m", message_id), false)
            }
            Event::ToolCallStart { tool_call_id, parent_message_id, .. } => {
                if let (Some(tag), Some(parent)) = (&tag, parent_message_id) {
                    if let Some(owner) = self.owners.get(&opened("m", parent)) {
                        if owner.as_ref() != Some(tag) {
                            return Err(format!(
                                "sent TOOL_CALL_START for subagent '{tag}' in message '{parent}' of another"
                            ));
                        }
                    }
                }
                (opened("c", tool_call_id), true)
            }
            Event::ToolCallArgs { tool_call_id, .. } | Event::ToolCallEnd { tool_call_id, .. } => {
                (opened("c", tool_call_id), false)
            }
            Event::ToolCallResult { message_id, .. } => (opened("m", message_id), true),
            Event::ReasoningMessageStart { message_id, .. } => (opened("r", message_id), true),
            Event::ReasoningMessageContent { message_id, .. } | Event::ReasoningMessageEnd { message_id, .. } => {
                (opened("r", message_id), false)
            }
            Event::ActivitySnapshot { message_id, .. } => (opened("a", message_id), true),
            Event::ActivityDelta { message_id, .. } => (opened("a", message_id), false),
            _ => return Ok(()),
        };
        match (opens, self.owners.get(&key)) {
            // Reopened after its end, or opened anew: it is the opener's again.
            (true, None) => {
                self.owners.insert(key, tag);
            }
            (_, Some(owner)) => {
                if tag.is_some() && *owner != tag {
                    let who = owner.clone().unwrap_or_else(|| "the agent itself".into());
                    return Err(format!("sent {} attributed to another subagent than '{who}'", event_name(event)));
                }
            }
            (false, None) => {}
        }
        Ok(())
    }
}

/// A step's key: its owner and its name (the agent's own steps under "").
fn step_key(owner: &Option<String>, name: &str) -> String {
    match owner {
        Some(subagent) => format!("{subagent}\u{0}{name}"),
        None => name.to_string(),
    }
}

/// A JSON Patch as the client's schema wants it: a known op, RFC 6901 pointers, and a value
/// where the op needs one.
fn check_patch(patch: &[crate::protocol::events::PatchOp], kind: &str) -> Result<(), String> {
    let pointer = |p: &str| p.is_empty() || p.starts_with('/');
    for op in patch {
        if !["add", "remove", "replace", "move", "copy", "test"].contains(&op.op.as_str()) {
            return Err(format!("sent {kind} with an unknown patch op '{}'", op.op));
        }
        if !pointer(&op.path) || op.from.as_deref().is_some_and(|from| !pointer(from)) {
            return Err(format!("sent {kind} with a path that is not a JSON pointer"));
        }
        if ["add", "replace", "test"].contains(&op.op.as_str()) && op.value.is_none() {
            return Err(format!("sent {kind} with a '{}' op without a value", op.op));
        }
        if ["move", "copy"].contains(&op.op.as_str()) && op.from.is_none() {
            return Err(format!("sent {kind} with a '{}' op without 'from'", op.op));
        }
    }
    Ok(())
}

pub(super) fn event_name(event: &Event) -> String {
    serde_json::to_value(event).ok().and_then(|v| v["type"].as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_events_are_checked_like_the_official_client() {
        assert!(parse_upstream_event(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":""}"#).is_ok());
        for bad in [
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":null}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"tool"}"#,
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","timestamp":1.5}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt"}}"#,
            r#"not json"#,
        ] {
            assert!(parse_upstream_event(bad).is_err(), "{bad}");
        }
        let mut order = UpstreamOrder::default();
        let content = parse_upstream_event(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#).unwrap();
        assert!(order.check(&content).is_err(), "before RUN_STARTED");
        let started = parse_upstream_event(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).unwrap();
        assert!(order.check(&started).is_ok());
        assert!(order.check(&content).is_err(), "content of a message never started");
    }

    fn checked(order: &mut UpstreamOrder, event: &str) -> Result<(), String> {
        order.check(&parse_upstream_event(event).map_err(|e| e.to_string())?)
    }

    #[test]
    fn upstream_reasoning_and_activity_are_checked_like_the_official_client() {
        let mut order = UpstreamOrder::default();
        checked(&mut order, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).expect("started");
        assert!(checked(&mut order, r#"{"type":"REASONING_MESSAGE_CONTENT","messageId":"x","delta":"a"}"#).is_err());
        assert!(checked(&mut order, r#"{"type":"REASONING_END","messageId":"s"}"#).is_err(), "a span never started");
        checked(&mut order, r#"{"type":"REASONING_START","messageId":"s"}"#).expect("span");
        assert!(checked(&mut order, r#"{"type":"REASONING_START","messageId":"s"}"#).is_err(), "twice");
        // Spans and messages are tracked apart: one id may name both.
        checked(&mut order, r#"{"type":"REASONING_MESSAGE_START","messageId":"s","role":"reasoning"}"#).expect("msg");
        assert!(
            parse_upstream_event(r#"{"type":"REASONING_MESSAGE_START","messageId":"m"}"#).is_err(),
            "role is required"
        );
        assert!(
            checked(&mut order, r#"{"type":"REASONING_MESSAGE_START","messageId":"m","role":"assistant"}"#).is_err()
        );
        let finish = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#;
        assert!(checked(&mut order, finish).is_err(), "reasoning still open");
        checked(&mut order, r#"{"type":"REASONING_MESSAGE_END","messageId":"s"}"#).expect("msg end");
        checked(&mut order, r#"{"type":"REASONING_END","messageId":"s"}"#).expect("span end");
        checked(
            &mut order,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"add","path":"/x","value":null}]}"#,
        )
        .expect("a delta of any activity");
        for bad in [
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"add","path":"x","value":1}]}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"replace","path":"/x"}]}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"merge","path":"/x"}]}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"move","path":"/x"}]}"#,
        ] {
            assert!(checked(&mut order, bad).is_err(), "{bad}");
        }
        assert!(parse_upstream_event(
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"p","content":[1]}"#
        )
        .is_err());
        checked(&mut order, finish).expect("nothing open");
    }

    #[test]
    fn upstream_subagents_are_checked_like_the_official_client() {
        let mut order = UpstreamOrder::default();
        checked(&mut order, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).expect("started");
        assert!(checked(&mut order, r#"{"type":"SUBAGENT_FINISHED","subagentRunId":"s"}"#).is_err(), "never started");
        checked(&mut order, r#"{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}"#).expect("start");
        assert!(checked(&mut order, r#"{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}"#).is_err());
        let orphan = r#"{"type":"SUBAGENT_STARTED","subagentRunId":"x","name":"n","parentSubagentRunId":"nobody"}"#;
        assert!(checked(&mut order, orphan).is_err(), "an unknown parent");
        checked(&mut order, r#"{"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s"}"#).expect("msg");
        let other = r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","subagentRunId":"o"}"#;
        assert!(checked(&mut order, other).is_err(), "attributed to another subagent");
        checked(&mut order, r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#).expect("an untagged end is the opener's");
        // Steps are the owner's: the same name may be open in the agent and in a subagent.
        checked(&mut order, r#"{"type":"STEP_STARTED","stepName":"s1","subagentRunId":"s"}"#).expect("step");
        checked(&mut order, r#"{"type":"STEP_STARTED","stepName":"s1"}"#).expect("the agent's own step");
        checked(&mut order, r#"{"type":"STEP_FINISHED","stepName":"s1"}"#).expect("own");
        checked(&mut order, r#"{"type":"STEP_FINISHED","stepName":"s1","subagentRunId":"s"}"#).expect("sub");
        let finish = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#;
        assert!(checked(&mut order, finish).is_err(), "a subagent still running");
        checked(&mut order, r#"{"type":"SUBAGENT_ERROR","subagentRunId":"s","message":"down"}"#).expect("ended");
        assert!(
            checked(&mut order, r#"{"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}"#).is_err(),
            "ids are per invocation"
        );
        checked(&mut order, finish).expect("nothing open");
    }
}
