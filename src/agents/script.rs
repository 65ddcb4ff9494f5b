//! The `script` agent (SPEC §9.1): a deterministic list of steps from config, for demos, tests
//! and benchmarks. After each step it records a checkpoint, so a turn continues from any step.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ScriptAgentConfig;
use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};
use crate::protocol::Event;

/// One step of a script. In config each is a table whose first key names the step, e.g.
/// `{ say = "Hello {input}" }` or `{ burst = 1000, bytes = 200 }`. `{input}` in any text is
/// replaced by the user's message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScriptStep {
    /// An assistant message, streamed in chunks.
    Say { say: String },
    /// A tool call with its arguments and a canned result.
    Tool {
        tool: String,
        #[serde(default = "empty_object")]
        args: Value,
        result: String,
    },
    /// A note pinned to the board.
    Note {
        note: String,
        #[serde(default = "default_note_kind")]
        kind: String,
        #[serde(default)]
        tags: Vec<String>,
    },
    /// A delegation marker: `STEP_STARTED` and `STEP_FINISHED` named `step`.
    Step { step: String },
    /// A pause (cancellable).
    Wait { wait_ms: u64 },
    /// The turn fails with this message (`RUN_ERROR` `failed`).
    Fail { fail: String },
    /// `tick` `CUSTOM` events named `gateway.tick`, one every `every_ms`, each carrying its
    /// number and the microsecond it was made (`{"n", "madeAtUs"}`), for latency measurements.
    Tick {
        tick: u64,
        #[serde(default = "default_tick_ms")]
        every_ms: u64,
    },
    /// One message of `burst` content events of `bytes` characters each, as fast as possible.
    Burst {
        burst: u64,
        #[serde(default = "default_burst_bytes")]
        bytes: usize,
    },
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn default_note_kind() -> String {
    "note".to_string()
}

fn default_tick_ms() -> u64 {
    100
}

fn default_burst_bytes() -> usize {
    64
}

#[derive(Debug, Clone)]
pub struct ScriptAgent {
    config: ScriptAgentConfig,
}

impl ScriptAgent {
    pub fn new(config: ScriptAgentConfig) -> ScriptAgent {
        ScriptAgent { config }
    }

    pub async fn run(&self, turn: &mut TurnContext, from: Checkpoint) -> Result<AgentOutput, AgentError> {
        let input = turn.user_text().to_string();
        for (index, step) in self.config.steps.iter().enumerate().skip(from.step) {
            turn.check_cancelled()?;
            // Quick steps commit whole with the checkpoint after them; streaming steps commit
            // their closing event with it, so a finished step is never run twice.
            if !matches!(
                step,
                ScriptStep::Say { .. } | ScriptStep::Burst { .. } | ScriptStep::Tick { .. } | ScriptStep::Wait { .. }
            ) {
                turn.begin_step();
            }
            self.run_step(turn, step, &input).await?;
            turn.commit_step(&Checkpoint { step: index + 1 }).await?;
        }
        Ok(AgentOutput::default())
    }

    async fn run_step(&self, turn: &mut TurnContext, step: &ScriptStep, input: &str) -> Result<(), AgentError> {
        match step {
            ScriptStep::Say { say } => self.say(turn, &say.replace("{input}", input)).await,
            ScriptStep::Tool { tool, args, result } => {
                let args = substitute(args, input);
                turn.tool_call(tool, &args.to_string(), &result.replace("{input}", input)).await.map(|_| ())
            }
            ScriptStep::Note { note, kind, tags } => {
                turn.pin_note(kind, tags, &note.replace("{input}", input)).await.map(|_| ())
            }
            ScriptStep::Step { step } => {
                turn.step_start(step).await?;
                turn.step_finish(step).await
            }
            ScriptStep::Wait { wait_ms } => turn.sleep(Duration::from_millis(*wait_ms)).await,
            ScriptStep::Fail { fail } => Err(AgentError::Failed(fail.replace("{input}", input))),
            ScriptStep::Tick { tick, every_ms } => {
                for n in 0..*tick {
                    if n > 0 {
                        turn.sleep(Duration::from_millis(*every_ms)).await?;
                    }
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
        assert_eq!(steps[2], ScriptStep::Note { note: "n".into(), kind: "note".into(), tags: vec!["a".into()] });
        assert_eq!(steps[6], ScriptStep::Burst { burst: 10, bytes: 64 });
    }

    #[test]
    fn input_is_substituted_in_nested_arguments() {
        let args = json!({"q": "{input}", "list": ["x {input}", 3]});
        assert_eq!(substitute(&args, "cats"), json!({"q": "cats", "list": ["x cats", 3]}));
    }
}
