//! What is open in a turn: the messages, tool calls, reasoning, steps and sub-agents its log
//! has started and not ended, which `RUN_FINISHED` requires closed (AG-UI's verifier refuses a
//! run that ends with any of them open, or that ends one twice).
//!
//! One transition, [`OpenItems::observe`], reads every event the turn appends (the context
//! calls it as each event becomes a write) and every event of a log it picks up after another
//! owner, so what is known open while a turn runs and what is rebuilt after a takeover are the
//! same by construction. The closers take what they close from here.

use std::collections::BTreeMap;

use crate::protocol::Event;

#[derive(Debug, Default)]
pub(super) struct OpenItems {
    messages: Vec<String>,
    tool_calls: Vec<String>,
    reasoning_spans: Vec<String>,
    reasoning_messages: Vec<String>,
    /// Open steps, oldest first, with the sub-agent each belongs to where one does.
    steps: Vec<String>,
    step_owners: BTreeMap<String, String>,
    subagents: Vec<String>,
    /// The sub-agent each open message, tool call and reasoning item belongs to, where one
    /// does: what closes it where a cut left it open names the same owner (the official client
    /// refuses an end attributed otherwise than its start).
    item_owners: BTreeMap<String, String>,
    /// The newest assistant message, which a tool call opened now belongs to (none after a
    /// tool's result: the answer after it is a new message).
    last_message: Option<String>,
}

impl OpenItems {
    /// What `event` opens or ends.
    pub(super) fn observe(&mut self, event: &Event) {
        self.observe_owner(event);
        match event {
            Event::TextMessageStart { message_id, .. } => {
                push_once(&mut self.messages, message_id);
                self.last_message = Some(message_id.clone());
            }
            Event::TextMessageEnd { message_id, .. } => self.messages.retain(|m| m != message_id),
            Event::ToolCallStart { tool_call_id, .. } => push_once(&mut self.tool_calls, tool_call_id),
            Event::ToolCallEnd { tool_call_id, .. } => self.tool_calls.retain(|c| c != tool_call_id),
            Event::ToolCallResult { .. } => self.last_message = None,
            Event::ReasoningStart { message_id, .. } => push_once(&mut self.reasoning_spans, message_id),
            Event::ReasoningEnd { message_id, .. } => self.reasoning_spans.retain(|s| s != message_id),
            Event::ReasoningMessageStart { message_id, .. } => push_once(&mut self.reasoning_messages, message_id),
            Event::ReasoningMessageEnd { message_id, .. } => self.reasoning_messages.retain(|m| m != message_id),
            Event::StepStarted { step_name, subagent_run_id, .. } => {
                if let Some(subagent) = subagent_run_id {
                    self.step_owners.insert(step_name.clone(), subagent.clone());
                }
                push_once(&mut self.steps, step_name);
            }
            Event::StepFinished { step_name, .. } => {
                self.step_owners.remove(step_name);
                self.steps.retain(|s| s != step_name);
            }
            Event::SubagentStarted { subagent_run_id, .. } => push_once(&mut self.subagents, subagent_run_id),
            Event::SubagentFinished { subagent_run_id, .. } | Event::SubagentError { subagent_run_id, .. } => {
                self.subagents.retain(|s| s != subagent_run_id)
            }
            _ => {}
        }
    }

    /// Which sub-agent an item `event` opens belongs to; an end forgets it.
    fn observe_owner(&mut self, event: &Event) {
        match event {
            Event::TextMessageStart { message_id: id, subagent_run_id: Some(owner), .. }
            | Event::ToolCallStart { tool_call_id: id, subagent_run_id: Some(owner), .. }
            | Event::ReasoningStart { message_id: id, subagent_run_id: Some(owner), .. }
            | Event::ReasoningMessageStart { message_id: id, subagent_run_id: Some(owner), .. } => {
                self.item_owners.insert(id.clone(), owner.clone());
            }
            Event::TextMessageEnd { message_id: id, .. }
            | Event::ToolCallEnd { tool_call_id: id, .. }
            | Event::ReasoningEnd { message_id: id, .. }
            | Event::ReasoningMessageEnd { message_id: id, .. } => {
                self.item_owners.remove(id);
            }
            _ => {}
        }
    }

    /// `items`, each with the sub-agent it belongs to.
    fn with_owners(&mut self, items: Vec<String>) -> Vec<(String, Option<String>)> {
        items
            .into_iter()
            .map(|id| {
                let owner = self.item_owners.remove(&id);
                (id, owner)
            })
            .collect()
    }

    /// The open tool calls, oldest first, each with its sub-agent; none is open afterwards.
    pub(super) fn take_tool_calls(&mut self) -> Vec<(String, Option<String>)> {
        let taken = std::mem::take(&mut self.tool_calls);
        self.with_owners(taken)
    }

    /// The open text messages, oldest first, each with its sub-agent; none is open afterwards.
    pub(super) fn take_messages(&mut self) -> Vec<(String, Option<String>)> {
        let taken = std::mem::take(&mut self.messages);
        self.with_owners(taken)
    }

    /// The open reasoning messages, oldest first, each with its sub-agent; none is open
    /// afterwards.
    pub(super) fn take_reasoning_messages(&mut self) -> Vec<(String, Option<String>)> {
        let taken = std::mem::take(&mut self.reasoning_messages);
        self.with_owners(taken)
    }

    /// The open reasoning spans, oldest first, each with its sub-agent; none is open afterwards.
    pub(super) fn take_reasoning_spans(&mut self) -> Vec<(String, Option<String>)> {
        let taken = std::mem::take(&mut self.reasoning_spans);
        self.with_owners(taken)
    }

    /// The open steps, oldest first, each with the sub-agent it belongs to; none is open
    /// afterwards.
    pub(super) fn take_steps(&mut self) -> Vec<(String, Option<String>)> {
        let mut owners = std::mem::take(&mut self.step_owners);
        std::mem::take(&mut self.steps)
            .into_iter()
            .map(|step| {
                let owner = owners.remove(&step);
                (step, owner)
            })
            .collect()
    }

    /// The open sub-agents to end now, oldest first. With `keep_delegated`, a delegated
    /// child's (its step still open) stays open: its work goes on when it is re-entered.
    pub(super) fn cut_subagents(&mut self, keep_delegated: bool) -> Vec<String> {
        let (kept, cut) =
            std::mem::take(&mut self.subagents).into_iter().partition(|s| keep_delegated && self.steps.contains(s));
        self.subagents = kept;
        cut
    }

    /// Ends the sub-agent `id` if it is open; whether it was.
    pub(super) fn end_subagent(&mut self, id: &str) -> bool {
        let open = self.has_subagent(id);
        self.subagents.retain(|s| s != id);
        open
    }

    pub(super) fn has_subagent(&self, id: &str) -> bool {
        self.subagents.iter().any(|s| s == id)
    }

    pub(super) fn step_count(&self) -> usize {
        self.steps.len()
    }

    pub(super) fn last_message(&self) -> Option<&str> {
        self.last_message.as_deref()
    }

    /// What is said next starts a new message (a delegation's lane begins or ends).
    pub(super) fn forget_last_message(&mut self) {
        self.last_message = None;
    }
}

/// Opens `id` in `lane` unless it is open already: an id is opened once, so it is closed once.
fn push_once(lane: &mut Vec<String>, id: &str) {
    if !lane.iter().any(|open| open == id) {
        lane.push(id.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, owner: Option<&str>) -> Event {
        Event::StepStarted { step_name: name.into(), subagent_run_id: owner.map(str::to_string) }
    }

    #[test]
    fn what_an_event_opens_its_end_closes() {
        let mut open = OpenItems::default();
        open.observe(&Event::TextMessageStart {
            message_id: "t:m1".into(),
            role: None,
            name: None,
            subagent_run_id: None,
        });
        assert_eq!(open.last_message(), Some("t:m1"));
        open.observe(&step("outer", None));
        open.observe(&step("inner", Some("child")));
        open.observe(&Event::StepFinished { step_name: "outer".into(), subagent_run_id: None });
        assert_eq!(open.take_steps(), vec![("inner".to_string(), Some("child".to_string()))]);
        assert_eq!(open.take_messages(), vec![("t:m1".to_string(), None)]);
        assert!(open.take_messages().is_empty(), "taken is closed");
    }

    /// What a sub-agent opened is taken with its owner, so what closes it names the same one.
    #[test]
    fn an_item_a_subagent_opened_is_taken_with_its_owner() {
        let mut open = OpenItems::default();
        open.observe(&Event::TextMessageStart {
            message_id: "t:m1".into(),
            role: None,
            name: None,
            subagent_run_id: Some("t:s1".into()),
        });
        open.observe(&Event::TextMessageStart {
            message_id: "t:m2".into(),
            role: None,
            name: None,
            subagent_run_id: None,
        });
        let owned = vec![("t:m1".to_string(), Some("t:s1".to_string())), ("t:m2".to_string(), None)];
        assert_eq!(open.take_messages(), owned);
    }

    /// A step the log already holds, opened again by a takeover re-entering its delegation, is
    /// still closed once.
    #[test]
    fn an_id_opened_twice_is_closed_once() {
        let mut open = OpenItems::default();
        open.observe(&step("d1", None));
        open.observe(&step("d1", None));
        assert_eq!(open.step_count(), 1);
    }

    #[test]
    fn a_delegated_childs_subagent_stays_open_when_delegations_are_kept() {
        let mut open = OpenItems::default();
        open.observe(&step("d1", None));
        for id in ["d1", "relayed"] {
            open.observe(&Event::SubagentStarted {
                subagent_run_id: id.into(),
                name: "x".into(),
                description: None,
                parent_subagent_run_id: None,
                parent_tool_call_id: None,
                parent_message_id: None,
            });
        }
        assert_eq!(open.cut_subagents(true), vec!["relayed".to_string()]);
        assert!(open.has_subagent("d1"));
        assert_eq!(open.cut_subagents(false), vec!["d1".to_string()]);
    }
}
