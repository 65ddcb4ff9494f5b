//! The `script` agent (SPEC §9.1): a deterministic list of steps from config, for demos, tests
//! and benchmarks. After each step it records a checkpoint, so a turn continues from any step.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::config::{CallSpec, ScriptAgentConfig, ScriptStep, ToolPolicy};
use crate::engine::interrupts::{confirmation_schema, question_schema, tool_call_schema, Deciders};
use crate::engine::turn::agent::Agent;
use crate::engine::turn::{new_interrupt_id, AgentError, AgentOutput, Checkpoint, InterruptSpec, NotePin, TurnContext};

/// Where the script stands while a step runs.
struct Position<'a> {
    index: usize,
    /// The last answer to a question, for `{answer}`.
    answer: &'a mut Option<String>,
    /// Set when the step is re-entered after the interrupts it opened were decided.
    waited: Option<&'a Checkpoint>,
    /// Set when the step is re-entered in the middle of its delegation.
    child: Option<crate::engine::turn::ChildCheckpoint>,
    /// Set when a client tool step is re-entered: the call whose result the client sent.
    client_call: Option<String>,
    /// Set by a step after which the script ends (a declined escalation).
    stop: bool,
}
use crate::protocol::Event;

#[derive(Debug, Clone)]
pub struct ScriptAgent {
    config: ScriptAgentConfig,
}

impl ScriptAgent {
    pub fn new(config: ScriptAgentConfig) -> ScriptAgent {
        ScriptAgent { config }
    }
}

#[async_trait]
impl Agent for ScriptAgent {
    async fn run(&self, turn: &mut TurnContext, from: Checkpoint) -> Result<AgentOutput, AgentError> {
        let mut answer = from.answer.clone();
        for (index, step) in self.config.steps.iter().enumerate().skip(from.step) {
            turn.check_cancelled()?;
            // Quick steps commit whole with the checkpoint after them; streaming steps commit
            // their closing event with it, so a finished step is never run twice.
            if !matches!(
                step,
                ScriptStep::Say { .. }
                    | ScriptStep::Burst { .. }
                    | ScriptStep::Tick { .. }
                    | ScriptStep::Wait { .. }
                    | ScriptStep::Delegate { .. }
            ) {
                turn.begin_step();
            }
            // Re-entering the step a turn waited in: its interrupts are decided now.
            let waited = (index == from.step && !from.awaiting.is_empty()).then_some(&from);
            let child = if index == from.step { from.child.as_deref().cloned() } else { None };
            let client_call = match step {
                ScriptStep::ClientTool { .. } if index == from.step => from.tool_calls.first().cloned(),
                _ => None,
            };
            let mut position = Position { index, answer: &mut answer, waited, child, client_call, stop: false };
            self.run_step(turn, step, &mut position).await?;
            // A script that stops records it has no step left, so a takeover does not go on.
            let stop = position.stop;
            let next = if stop { self.config.steps.len() } else { index + 1 };
            let checkpoint = Checkpoint { step: next, answer: answer.clone(), ..Checkpoint::default() };
            Box::pin(turn.commit_step(&checkpoint)).await?;
            if stop {
                break;
            }
        }
        Ok(AgentOutput::default())
    }
}

impl ScriptAgent {
    /// Runs one step. A turn waiting in a `wait` step holds only the sleep: the other steps'
    /// states are large, each live only while its step runs, so they are boxed.
    async fn run_step(
        &self,
        turn: &mut TurnContext,
        step: &ScriptStep,
        at: &mut Position<'_>,
    ) -> Result<(), AgentError> {
        match step {
            ScriptStep::Wait { wait_ms } => turn.sleep(Duration::from_millis(*wait_ms)).await,
            _ => Box::pin(self.run_busy_step(turn, step, at)).await,
        }
    }

    async fn run_busy_step(
        &self,
        turn: &mut TurnContext,
        step: &ScriptStep,
        at: &mut Position<'_>,
    ) -> Result<(), AgentError> {
        let input = turn.user_text().to_string();
        let fill = |text: &str| text.replace("{input}", &input).replace("{answer}", at.answer.as_deref().unwrap_or(""));
        match step {
            ScriptStep::Say { say } => self.say(turn, &fill(say)).await,
            ScriptStep::Tool { tool, args, result, policy } => {
                let call = CallSpec { tool: tool.clone(), args: args.clone(), result: result.clone() };
                self.calls(turn, std::slice::from_ref(&call), policy, at).await
            }
            ScriptStep::Tools { tools, policy } => self.calls(turn, tools, policy, at).await,
            ScriptStep::Ask { ask, choices, deciders, ttl_secs } => match at.waited {
                None => {
                    let spec = InterruptSpec {
                        id: new_interrupt_id(),
                        reason: "input_required".into(),
                        message: fill(ask),
                        tool_call_id: None,
                        response_schema: question_schema(choices),
                        ttl_ms: *ttl_secs as i64 * 1000,
                        deciders: Deciders::from_config(deciders),
                        four_eyes: false,
                        details: None,
                        asks_because: None,
                        choices: choices.clone(),
                        refusal: None,
                    };
                    Err(turn.wait_for(vec![spec], Checkpoint { step: at.index, ..Checkpoint::default() }).await)
                }
                Some(waited) => {
                    let decision = the_one_decision(turn, waited, at.index, "question").await?;
                    *at.answer = decision["answer"].as_str().map(str::to_string);
                    Ok(())
                }
            },
            ScriptStep::Escalate { escalate, deciders, ttl_secs } => match at.waited {
                None => {
                    let spec = InterruptSpec {
                        id: new_interrupt_id(),
                        reason: "confirmation".into(),
                        message: fill(escalate),
                        tool_call_id: None,
                        response_schema: confirmation_schema(),
                        ttl_ms: *ttl_secs as i64 * 1000,
                        deciders: Deciders::from_config(deciders),
                        four_eyes: false,
                        details: None,
                        asks_because: None,
                        choices: Vec::new(),
                        refusal: None,
                    };
                    Err(turn.wait_for(vec![spec], Checkpoint { step: at.index, ..Checkpoint::default() }).await)
                }
                Some(waited) => {
                    let decision = the_one_decision(turn, waited, at.index, "escalation").await?;
                    *at.answer = decision["comment"].as_str().map(str::to_string);
                    // Declined, or expired (denied by the gateway): the turn goes no further.
                    at.stop = decision["approved"] != Value::Bool(true);
                    Ok(())
                }
            },
            ScriptStep::Note { note, kind, tags, labels, replaces } => {
                let pin = NotePin { kind, tags, text: &fill(note), labels, replaces: replaces.as_deref() };
                turn.pin_note(pin).await.map(|_| ())
            }
            ScriptStep::Step { step } => {
                turn.step_start(step).await?;
                turn.step_finish(step).await
            }
            ScriptStep::ClientTool { client_tool, args } => {
                if let Some(call) = at.client_call.take() {
                    // The client's result is in: it answers the step.
                    let results = turn.client_results().await?;
                    *at.answer = results.get(&call).map(|result| result.as_text());
                    return Ok(());
                }
                if !turn.client_tools().iter().any(|t| t.name == *client_tool) {
                    return Ok(());
                }
                let call = turn.tool_call_start(client_tool, &substitute(args, &input).to_string()).await?;
                let checkpoint = Checkpoint {
                    step: at.index,
                    answer: at.answer.clone(),
                    tool_calls: vec![call.clone()],
                    ..Checkpoint::default()
                };
                Err(turn.wait_for_client(vec![call], checkpoint).await)
            }
            ScriptStep::Delegate { delegate, input } => {
                let parent = Checkpoint { step: at.index, answer: at.answer.clone(), ..Checkpoint::default() };
                let ask = fill(input.as_deref().unwrap_or("{input}"));
                turn.delegate(delegate, ask, parent, at.child.take(), None).await
            }
            ScriptStep::Activity { activity, content, patch } => match (content, patch) {
                (Some(content), _) => {
                    let content = match substitute(&Value::Object(content.clone()), &input) {
                        Value::Object(content) => content,
                        _ => serde_json::Map::new(),
                    };
                    turn.activity_show(activity, content).await.map(|_| ())
                }
                (None, Some(patch)) => turn.activity_update_latest(activity, patch.clone()).await,
                (None, None) => Ok(()),
            },
            ScriptStep::Wait { wait_ms } => turn.sleep(Duration::from_millis(*wait_ms)).await,
            ScriptStep::Fail { fail } => Err(AgentError::Failed(fill(fail))),
            ScriptStep::Tick { tick, every_ms } => {
                for n in 0..*tick {
                    if n > 0 {
                        turn.sleep(Duration::from_millis(*every_ms)).await?;
                    }
                    // Not a decision but a measurement: the load tool reads it against its own
                    // (the machine's) clock, to the microsecond, for the latency of each tick.
                    let made_at_us = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_micros() as u64)
                        .unwrap_or(0);
                    turn.emit(Event::Custom {
                        name: "gateway.tick".into(),
                        value: serde_json::json!({ "n": n, "madeAtUs": made_at_us }),
                        subagent_run_id: None,
                    })
                    .await?;
                }
                Ok(())
            }
            ScriptStep::Burst { burst, bytes } => {
                let message = turn.text_start().await?;
                let delta = "x".repeat((*bytes).max(1));
                for n in 0..*burst {
                    if n == 0 {
                        // The first piece goes through text_delta, which leads with the AI label.
                        turn.text_delta(&message, &delta).await?;
                        continue;
                    }
                    turn.emit(Event::TextMessageContent {
                        message_id: message.clone(),
                        delta: delta.clone(),
                        subagent_run_id: None,
                    })
                    .await?;
                }
                turn.begin_step();
                turn.text_end(&message).await
            }
        }
    }

    /// Tool calls under a policy: run at once, or proposed and waited on until a person decides
    /// each (then run as approved, with edited arguments where allowed, or reported denied).
    async fn calls(
        &self,
        turn: &mut TurnContext,
        calls: &[CallSpec],
        policy: &ToolPolicy,
        at: &mut Position<'_>,
    ) -> Result<(), AgentError> {
        let input = turn.user_text().to_string();
        let fill = |text: &str| text.replace("{input}", &input).replace("{answer}", at.answer.as_deref().unwrap_or(""));
        if !policy.needs_approval() {
            for call in calls {
                turn.tool_call(&call.tool, &substitute(&call.args, &input).to_string(), &fill(&call.result)).await?;
            }
            return Ok(());
        }
        let Some(waited) = at.waited else {
            let mut specs = Vec::new();
            let mut ids = Vec::new();
            for call in calls {
                let args = substitute(&call.args, &input);
                let id = turn.tool_call_start(&call.tool, &args.to_string()).await?;
                specs.push(InterruptSpec {
                    id: new_interrupt_id(),
                    reason: "tool_call".into(),
                    message: format!("Allow the tool '{}' to run?", call.tool),
                    tool_call_id: Some(id.clone()),
                    response_schema: tool_call_schema(policy.allow_edit, policy.confirm.as_deref()),
                    ttl_ms: policy.ttl_secs as i64 * 1000,
                    deciders: Deciders::from_config(&policy.deciders),
                    four_eyes: policy.four_eyes,
                    details: Some(args),
                    asks_because: policy.approval_reason(),
                    choices: Vec::new(),
                    refusal: None,
                });
                ids.push(id);
            }
            let checkpoint = Checkpoint { step: at.index, tool_calls: ids, ..Checkpoint::default() };
            return Err(turn.wait_for(specs, checkpoint).await);
        };
        if waited.tool_calls.len() != calls.len() {
            return Err(AgentError::Failed(format!(
                "step {} proposed {} calls but its checkpoint names {}",
                at.index + 1,
                calls.len(),
                waited.tool_calls.len()
            )));
        }
        // Each call takes the decision on the interrupt opened for it, found by the call's id.
        let decided = turn.decisions(&waited.awaiting).await?;
        let decision_for = |id: &str| {
            decided.iter().find(|d| d.tool_call_id.as_deref() == Some(id)).map(|d| &d.decision).ok_or_else(|| {
                AgentError::Failed(format!("no decision answers the interrupt opened for the tool call {id}"))
            })
        };
        let decisions = waited.tool_calls.iter().map(|id| decision_for(id)).collect::<Result<Vec<_>, _>>()?;
        for ((call, id), decision) in calls.iter().zip(&waited.tool_calls).zip(decisions) {
            if decision["approved"] != Value::Bool(true) {
                let why = decision["comment"].as_str().map(|c| format!(": {c}")).unwrap_or_default();
                let denied = if decision["expired"] == Value::Bool(true) { "expired" } else { "denied" };
                turn.tool_result(id, &format!("not run: the call was {denied}{why}")).await?;
                continue;
            }
            match decision.get("editedArgs").filter(|edited| edited.is_object() && policy.allow_edit) {
                Some(edited) => {
                    // Shown as such: the proposed call is closed, the edited one runs.
                    turn.tool_result(id, "not run as proposed: a person edited the arguments").await?;
                    turn.tool_call(&call.tool, &edited.to_string(), &fill(&call.result)).await?;
                }
                None => turn.tool_result(id, &fill(&call.result)).await?,
            }
        }
        Ok(())
    }

    /// Streams `text` as one assistant message, `chunk_chars` characters per event.
    async fn say(&self, turn: &mut TurnContext, text: &str) -> Result<(), AgentError> {
        let message = turn.text_start().await?;
        let chars: Vec<char> = text.chars().collect();
        for (index, chunk) in chars.chunks(self.config.chunk_chars).enumerate() {
            if index > 0 && self.config.chunk_delay_ms > 0 {
                turn.sleep(Duration::from_millis(self.config.chunk_delay_ms)).await?;
            }
            turn.text_delta(&message, &chunk.iter().collect::<String>()).await?;
        }
        turn.begin_step();
        turn.text_end(&message).await
    }
}

/// Replaces `{input}` in every string of a JSON value.
fn substitute(value: &Value, input: &str) -> Value {
    match value {
        Value::String(text) => Value::String(text.replace("{input}", input)),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, input)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), substitute(v, input))).collect()),
        other => other.clone(),
    }
}

/// The decision on the one interrupt a step (`what`: a question, an escalation) opened, once
/// the turn goes on.
async fn the_one_decision(
    turn: &mut TurnContext,
    waited: &Checkpoint,
    index: usize,
    what: &str,
) -> Result<Value, AgentError> {
    let [asked] = waited.awaiting.as_slice() else {
        return Err(AgentError::Failed(format!(
            "step {} opened one {what} but its checkpoint waits on {} interrupts",
            index + 1,
            waited.awaiting.len()
        )));
    };
    let decided = turn.decisions(std::slice::from_ref(asked)).await?;
    decided
        .into_iter()
        .find(|d| d.interrupt_id == *asked)
        .map(|d| d.decision)
        .ok_or_else(|| AgentError::Failed(format!("no decision answers the {what}'s interrupt {asked}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_parse_from_their_first_key() {
        let steps: Vec<ScriptStep> = serde_json::from_value(json!([
            {"say": "hi {input}"},
            {"tool": "lookup", "args": {"q": "{input}"}, "result": "ok"},
            {"note": "n", "tags": ["a"]},
            {"step": "s"},
            {"wait_ms": 5},
            {"fail": "boom"},
            {"burst": 10},
            {"tick": 3, "every_ms": 50}
        ]))
        .expect("parses");
        assert_eq!(steps[0], ScriptStep::Say { say: "hi {input}".into() });
        assert_eq!(
            steps[2],
            ScriptStep::Note {
                note: "n".into(),
                kind: "note".into(),
                tags: vec!["a".into()],
                labels: vec![],
                replaces: None
            }
        );
        assert_eq!(steps[6], ScriptStep::Burst { burst: 10, bytes: 64 });
    }

    #[test]
    fn input_is_substituted_in_nested_arguments() {
        let args = json!({"q": "{input}", "list": ["x {input}", 3]});
        assert_eq!(substitute(&args, "cats"), json!({"q": "cats", "list": ["x cats", 3]}));
    }
}
