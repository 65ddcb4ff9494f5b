//! Re-serving one upstream run's checked events under the gateway's ids, and keeping where that
//! run stands ([`LiveRun`], in `memory`): what it has open, its ids mapped to the gateway's, its chunk state,
//! and the last upstream event id the log holds. The live run is saved in the turn's
//! checkpoint with every event that carries an upstream id, in the same write, so an instance
//! that takes the turn over knows exactly where the upstream stream stood when it was cut.

use serde_json::Value;

use super::memory::{LiveRun, Upstream};
use crate::engine::turn::{AgentError, TurnContext};
use crate::protocol::events::{RunOutcome, SubagentOutcome};
use crate::protocol::{Event, TokenUsage};

/// How an upstream run ended.
pub(super) enum Ending {
    Finished {
        result: Option<Value>,
        usage: Option<Vec<TokenUsage>>,
        /// The upstream's own `pendingToolCallIds`, its ids.
        pending: Vec<String>,
    },
    Interrupted(Vec<crate::protocol::events::Interrupt>),
}

impl LiveRun {
    /// A new upstream run, the turn's `number`th, given the conversation before `conversation_before`.
    pub(super) fn new(
        turn: &TurnContext,
        number: u32,
        conversation_before: i64,
        resume: Option<Vec<Value>>,
    ) -> LiveRun {
        LiveRun { run_id: format!("{}-{number}", turn.turn_id()), conversation_before, resume, ..LiveRun::default() }
    }

    /// The same run from its start again: nothing of it is open or mapped any more, and it
    /// is a run again of a cut one.
    pub(super) fn restart(&mut self) {
        *self = LiveRun {
            run_id: std::mem::take(&mut self.run_id),
            conversation_before: self.conversation_before,
            resume: self.resume.take(),
            rerun: true,
            ..LiveRun::default()
        };
    }
}

/// The upstream's state as a client is shown it: its keys, with the gateway's `board` beside
/// them (an upstream's own `board` key gives way). A state that is no object has no room for
/// the board and is shown as the upstream set it.
fn beside_board(snapshot: Value, board: Vec<Value>) -> Value {
    match snapshot {
        Value::Object(mut keys) => {
            keys.insert("board".into(), serde_json::json!({ "notes": board }));
            Value::Object(keys)
        }
        other => other,
    }
}

/// How a run ends, read from its `RUN_FINISHED` as the upstream sent it.
pub(super) fn ending_of(finished: &str) -> Option<Ending> {
    match super::check::parse_upstream_event(finished).ok()? {
        Event::RunFinished { result, outcome, usage, .. } => Some(ending(result, outcome, usage)),
        _ => None,
    }
}

fn ending(result: Option<Value>, outcome: Option<RunOutcome>, usage: Option<Vec<TokenUsage>>) -> Ending {
    match outcome {
        Some(RunOutcome::Interrupt { interrupts }) => Ending::Interrupted(interrupts),
        Some(RunOutcome::Success { pending_tool_call_ids }) => {
            Ending::Finished { result, usage, pending: pending_tool_call_ids }
        }
        _ => Ending::Finished { result, usage, pending: Vec::new() },
    }
}

/// Re-serves checked upstream events under the gateway's ids.
pub(super) struct Relay<'a> {
    pub state: &'a mut Upstream,
    /// The names of the tools the client declared (and the agent admits).
    pub client_tools: &'a [String],
}

impl Relay<'_> {
    fn live(&mut self) -> &mut LiveRun {
        self.state.live.get_or_insert_with(LiveRun::default)
    }

    /// Relays one checked event under the gateway's ids; what a subagent says is attributed
    /// to the gateway's id of that subagent.
    pub(super) async fn forward(
        &mut self,
        turn: &mut TurnContext,
        mut event: Event,
    ) -> Result<Option<Ending>, AgentError> {
        let upstream_subagent = event.attribution_mut().and_then(Option::take);
        let subagent = upstream_subagent.map(|up| self.subagent_id(turn, &up, false));
        turn.attribute_to(subagent);
        let forwarded = self.forward_event(turn, event).await;
        turn.attribute_to(None);
        forwarded
    }

    /// The gateway's id of the upstream's subagent `upstream` (`<turn>:s<n>`): a new one for a
    /// subagent that starts (`fresh`: an upstream may name a later run's subagent alike).
    fn subagent_id(&mut self, turn: &mut TurnContext, upstream: &str, fresh: bool) -> String {
        if let (false, Some(id)) = (fresh, self.state.subagents.get(upstream)) {
            return id.clone();
        }
        let id = turn.subagent_id();
        self.state.subagents.insert(upstream.to_string(), id.clone());
        id
    }

    async fn forward_event(&mut self, turn: &mut TurnContext, event: Event) -> Result<Option<Ending>, AgentError> {
        match event {
            Event::SubagentStarted {
                subagent_run_id,
                name,
                description,
                parent_subagent_run_id,
                parent_tool_call_id,
                parent_message_id,
            } => {
                let parent_subagent_run_id = parent_subagent_run_id.map(|up| self.subagent_id(turn, &up, false));
                let id = self.subagent_id(turn, &subagent_run_id, true);
                let parent_tool_call_id = parent_tool_call_id.and_then(|up| self.state.calls.get(&up).cloned());
                let parent_message_id = parent_message_id.and_then(|up| self.live().said.get(&up).cloned());
                turn.subagent_start(Event::SubagentStarted {
                    subagent_run_id: id,
                    name,
                    description,
                    parent_subagent_run_id,
                    parent_tool_call_id,
                    parent_message_id,
                })
                .await?;
            }
            Event::SubagentFinished { subagent_run_id, result, outcome } => {
                let id = self.subagent_id(turn, &subagent_run_id, false);
                // A suspended subagent's `interruptIds` name the upstream's interrupts, which
                // get the gateway's ids only when its run ends: left out rather than wrong.
                let outcome = outcome.map(|outcome| match outcome {
                    SubagentOutcome::Suspended { .. } => SubagentOutcome::Suspended { interrupt_ids: None },
                    other => other,
                });
                turn.subagent_end(Event::SubagentFinished { subagent_run_id: id, result, outcome }).await?;
            }
            Event::SubagentError { subagent_run_id, message, code } => {
                let id = self.subagent_id(turn, &subagent_run_id, false);
                turn.subagent_end(Event::SubagentError { subagent_run_id: id, message, code }).await?;
            }
            Event::TextMessageStart { message_id, .. } => {
                let id = turn.text_start().await?;
                self.live().messages.insert(message_id.clone(), id.clone());
                self.live().said.insert(message_id.clone(), id.clone());
                self.state.upstream_ids.insert(id, message_id);
            }
            Event::TextMessageContent { message_id, delta, .. } => {
                if let (Some(id), false) = (self.live().messages.get(&message_id).cloned(), delta.is_empty()) {
                    self.live().answered = true;
                    turn.text_delta(&id, &delta).await?;
                }
            }
            Event::TextMessageEnd { message_id, .. } => {
                if let Some(id) = self.live().messages.remove(&message_id) {
                    turn.text_end(&id).await?;
                }
            }
            // Only on a resume: a framework that numbers its calls per run may use an id again
            // for a new call in a later run.
            Event::ToolCallStart { tool_call_id, .. }
                if self.live().resume.is_some() && self.state.calls.contains_key(&tool_call_id) =>
            {
                self.live().repeated_calls.push(tool_call_id);
            }
            Event::ToolCallArgs { tool_call_id, .. } | Event::ToolCallEnd { tool_call_id, .. }
                if self.live().repeated_calls.contains(&tool_call_id) => {}
            Event::ToolCallStart { tool_call_id, tool_call_name, parent_message_id, .. } => {
                let parent = self.parent_of(turn, parent_message_id);
                let id = turn.tool_call_open_in(&tool_call_name, parent, None).await?;
                if self.client_tools.contains(&tool_call_name) {
                    self.live().client_calls.push(id.clone());
                }
                self.live().answered = true;
                self.state.upstream_ids.insert(id.clone(), tool_call_id.clone());
                self.state.calls.insert(tool_call_id, id);
            }
            Event::ToolCallArgs { tool_call_id, delta, .. } => {
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    turn.tool_call_args(&id, &delta).await?;
                }
            }
            Event::ToolCallEnd { tool_call_id, .. } => {
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    turn.tool_call_close(&id).await?;
                }
            }
            Event::ToolCallResult { message_id, tool_call_id, content, .. } => {
                // A result for a call the gateway never relayed has nothing to attach to.
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    let result = turn.tool_result_content(&id, content).await?;
                    self.state.upstream_ids.insert(result, message_id);
                    self.live().answered = true;
                    // The upstream answered it itself: the client owes nothing.
                    self.live().client_calls.retain(|call| *call != id);
                }
            }
            Event::ReasoningStart { message_id, .. } => {
                let id = turn.reasoning_span_start().await?;
                self.live().spans.insert(message_id, id);
            }
            Event::ReasoningEnd { message_id, .. } => {
                if let Some(id) = self.live().spans.remove(&message_id) {
                    turn.reasoning_span_end(&id).await?;
                }
            }
            Event::ReasoningMessageStart { message_id, .. } => {
                let id = turn.reasoning_message_start().await?;
                self.live().thoughts.insert(message_id, id);
            }
            Event::ReasoningMessageContent { message_id, delta, .. } => {
                if let Some(id) = self.live().thoughts.get(&message_id).cloned() {
                    turn.reasoning_delta(&id, &delta).await?;
                }
            }
            Event::ReasoningMessageEnd { message_id, .. } => {
                if let Some(id) = self.live().thoughts.remove(&message_id) {
                    turn.reasoning_message_end(&id).await?;
                }
            }
            Event::ActivitySnapshot { message_id, activity_type, content, replace, .. } => {
                let id = match self.state.activities.get(&message_id) {
                    Some(id) => id.clone(),
                    None => {
                        let id = turn.activity_id();
                        self.state.activities.insert(message_id, id.clone());
                        id
                    }
                };
                self.live().answered = true;
                turn.emit(Event::ActivitySnapshot {
                    message_id: id,
                    activity_type,
                    content,
                    replace,
                    subagent_run_id: None,
                })
                .await?;
            }
            Event::ActivityDelta { message_id, activity_type, patch, .. } => {
                // A delta of an activity never shown has nothing to apply to (the client drops it too).
                if let Some(id) = self.state.activities.get(&message_id).cloned() {
                    turn.emit(Event::ActivityDelta { message_id: id, activity_type, patch, subagent_run_id: None })
                        .await?;
                }
            }
            Event::StepStarted { step_name, .. } => {
                let (open, most) = turn.open_step_room();
                if open >= most {
                    self.live().unshown_steps.push(step_name);
                } else {
                    turn.step_start(&step_name).await?;
                }
            }
            Event::StepFinished { step_name, .. } => {
                let live = self.live();
                match live.unshown_steps.iter().position(|s| *s == step_name) {
                    Some(index) => {
                        live.unshown_steps.remove(index);
                    }
                    None => turn.step_finish(&step_name).await?,
                }
            }
            Event::StateSnapshot { snapshot, .. } => {
                if self.state.state.as_ref() != Some(&snapshot) {
                    self.live().changed_state = true;
                }
                self.state.state = Some(snapshot.clone());
                let snapshot = beside_board(snapshot, turn.board().await?);
                turn.emit(Event::StateSnapshot { snapshot, subagent_run_id: None }).await?;
            }
            Event::StateDelta { delta, .. } => {
                if !delta.is_empty() {
                    self.live().changed_state = true;
                }
                self.remember_state_delta(&delta);
                // The client's `board` is the gateway's: a delta that would touch it (or replace
                // the whole state) is shown as the upstream's state it leads to, beside the board.
                let touches_board = |path: &str| path.is_empty() || path == "/board" || path.starts_with("/board/");
                let on_board =
                    delta.iter().any(|op| touches_board(&op.path) || op.from.as_deref().is_some_and(touches_board));
                match (on_board, self.state.state.clone()) {
                    (false, _) => turn.emit(Event::StateDelta { delta, subagent_run_id: None }).await?,
                    (true, Some(upstream)) => {
                        let snapshot = beside_board(upstream, turn.board().await?);
                        turn.emit(Event::StateSnapshot { snapshot, subagent_run_id: None }).await?;
                    }
                    (true, None) => {
                        let rest: Vec<_> = delta
                            .into_iter()
                            .filter(|op| !(touches_board(&op.path) || op.from.as_deref().is_some_and(touches_board)))
                            .collect();
                        if !rest.is_empty() {
                            turn.emit(Event::StateDelta { delta: rest, subagent_run_id: None }).await?;
                        }
                    }
                }
            }
            // The upstream's custom and raw events pass through as they are.
            event @ (Event::Custom { .. } | Event::Raw { .. }) => turn.emit(event).await?,
            Event::RunError { message, code, usage } => {
                // The upstream's tokens were spent though its run failed: they go on the
                // gateway's RUN_ERROR.
                for (n, spent) in usage.into_iter().flatten().enumerate() {
                    turn.report_usage(&format!("upstream/{n}"), spent);
                }
                let code = code.map(|c| format!(" ({c})")).unwrap_or_default();
                return Err(AgentError::Failed(format!("the upstream agent failed{code}: {message}")));
            }
            Event::RunFinished { result, outcome, usage, .. } => return Ok(Some(ending(result, outcome, usage))),
            // The gateway keeps the conversation itself (MESSAGES_SNAPSHOT). Encrypted reasoning
            // is for the upstream's own model and names upstream ids.
            _ => {}
        }
        Ok(None)
    }

    /// The gateway's message a relayed tool call belongs to: the message the upstream names
    /// (its text's, or one of its own words holding only calls, named once), else a message of
    /// the call's own — never the call's id, which is no message's.
    fn parent_of(&mut self, turn: &mut TurnContext, upstream_parent: Option<String>) -> String {
        let Some(upstream_parent) = upstream_parent else { return turn.message_id() };
        if let Some(id) = self.live().said.get(&upstream_parent) {
            return id.clone();
        }
        let id = turn.message_id();
        self.live().said.insert(upstream_parent.clone(), id.clone());
        self.state.upstream_ids.insert(id.clone(), upstream_parent);
        id
    }

    /// Keeps the upstream's own state up to date with its delta, to send it back on its next
    /// run. A delta that does not apply (the upstream patched state it never showed) leaves
    /// nothing to send rather than a guess.
    fn remember_state_delta(&mut self, delta: &[crate::protocol::events::PatchOp]) {
        let Some(state) = self.state.state.as_mut() else { return };
        let patch =
            serde_json::to_value(delta).ok().and_then(|ops| serde_json::from_value::<json_patch::Patch>(ops).ok());
        let applied = match patch {
            Some(patch) => json_patch::patch(state, &patch).is_ok(),
            None => false,
        };
        if !applied {
            self.state.state = None;
        }
    }
}
