//! The `openai` agent asking a person (SPEC §5): the interrupt a call waits on (its tool's
//! approval, or the model's question), and asking again about calls whose interrupts were
//! superseded (§5.3, a re-check after a long wait).

use serde_json::Value;

use super::decisions::approval_for;
use super::{CallKind, Conversation, OpenaiAgent, PendingCall};
use crate::engine::interrupts::{question_schema, Deciders};
use crate::engine::turn::{new_interrupt_id, AgentError, Decided, InterruptSpec, TurnContext};

impl OpenaiAgent {
    /// Asks again, under the current configuration, about the calls whose interrupts were
    /// superseded (their policy or arguments changed since they were shown, §5.3): each opens a
    /// new interrupt, and the turn waits for those besides the decisions it has (`awaiting`). A
    /// call whose policy now asks nobody runs with the rest.
    pub(super) async fn ask_again(
        &self,
        turn: &mut TurnContext,
        conversation: &mut Conversation,
        superseded: &[Decided],
        awaiting: &[String],
    ) -> Result<(), AgentError> {
        let mut specs = Vec::new();
        for call in conversation.pending.iter_mut() {
            let stale = call.interrupt.as_ref().is_some_and(|id| superseded.iter().any(|s| s.interrupt_id == *id));
            if !stale {
                continue;
            }
            call.interrupt = None;
            if let Some(spec) = self.interrupt_for(call) {
                call.interrupt = Some(spec.id.clone());
                specs.push(spec);
            }
        }
        if specs.is_empty() {
            return Ok(());
        }
        let checkpoint = self.checkpoint(conversation, awaiting);
        Err(turn.wait_for(specs, checkpoint).await)
    }

    /// The interrupt a call waits on, if it needs a person: its tool's approval, or a question.
    pub(super) fn interrupt_for(&self, call: &PendingCall) -> Option<InterruptSpec> {
        match self.kind_of(call) {
            CallKind::AskUser => {
                let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
                let choices: Vec<String> = serde_json::from_value(args["choices"].clone()).unwrap_or_default();
                Some(InterruptSpec {
                    id: new_interrupt_id(),
                    reason: "input_required".into(),
                    message: args["question"].as_str().unwrap_or("The agent has a question.").to_string(),
                    tool_call_id: Some(call.gateway_id.clone()),
                    response_schema: question_schema(&choices),
                    ttl_ms: 3_600_000,
                    deciders: Deciders::default(),
                    four_eyes: false,
                    details: None,
                    asks_because: None,
                    choices,
                    refusal: None,
                })
            }
            CallKind::Http(tool) if tool.policy.needs_approval() => Some(approval_for(call, &tool.policy)),
            CallKind::Mcp(server, _) if server.policy.needs_approval() => Some(approval_for(call, &server.policy)),
            _ => None,
        }
    }
}
