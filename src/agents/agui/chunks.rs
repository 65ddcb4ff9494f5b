//! Chunk events (`TEXT_MESSAGE_CHUNK`, `TOOL_CALL_CHUNK`, `REASONING_MESSAGE_CHUNK`) expanded
//! into the explicit start / content / end events, as the official client expands them before
//! it verifies a stream: the first chunk of a message names it (a tool call's also names the
//! tool), later chunks may leave the id out, and the open chunked message or call is closed by a
//! chunk of another id or by any explicit text, tool, step, state, custom or reasoning event, and
//! by the run's end. `RAW`, `ACTIVITY_*`, `REASONING_ENCRYPTED_VALUE` and `SUBAGENT_STARTED`
//! close nothing. What comes out is checked and relayed like any explicit event, so a chunk
//! followed by an explicit event of the same id fails as it does in the client.

use serde::{Deserialize, Serialize};

use crate::protocol::events::TextRole;
use crate::protocol::Event;

/// The one chunked message or tool call open, if any (kept in the turn's checkpoint with the
/// rest of a live upstream run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ChunkExpander {
    open: Option<OpenChunk>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum OpenChunk {
    Text { id: String, role: Option<TextRole> },
    ToolCall { id: String, name: String },
    Reasoning { id: String },
}

impl ChunkExpander {
    /// The explicit events that `event` stands for, in order (the event itself when it is not a
    /// chunk, after whatever it closes).
    pub(super) fn expand(&mut self, event: Event) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        match event {
            Event::TextMessageChunk { message_id, role, delta, name, .. } => {
                let id = match (&self.open, message_id) {
                    (Some(OpenChunk::Text { id, role: opened }), given) if given.as_ref().is_none_or(|g| g == id) => {
                        if role.is_some() && role != *opened {
                            return Err(format!("sent TEXT_MESSAGE_CHUNK for '{id}' with another role"));
                        }
                        id.clone()
                    }
                    (_, Some(id)) => {
                        out.extend(self.close());
                        let role = role.or(Some(TextRole::Assistant));
                        out.push(Event::TextMessageStart { message_id: id.clone(), role, name, subagent_run_id: None });
                        self.open = Some(OpenChunk::Text { id: id.clone(), role });
                        id
                    }
                    (_, None) => return Err("sent a first TEXT_MESSAGE_CHUNK without a messageId".into()),
                };
                if let Some(delta) = delta.filter(|d| !d.is_empty()) {
                    out.push(Event::TextMessageContent { message_id: id, delta, subagent_run_id: None });
                }
            }
            Event::ToolCallChunk { tool_call_id, tool_call_name, parent_message_id, delta, .. } => {
                let id = match (&self.open, tool_call_id) {
                    (Some(OpenChunk::ToolCall { id, name }), given) if given.as_ref().is_none_or(|g| g == id) => {
                        if tool_call_name.as_ref().is_some_and(|n| n != name) {
                            return Err(format!("sent TOOL_CALL_CHUNK for '{id}' with another toolCallName"));
                        }
                        id.clone()
                    }
                    (_, Some(id)) => {
                        let Some(name) = tool_call_name else {
                            return Err(format!("sent a first TOOL_CALL_CHUNK for '{id}' without a toolCallName"));
                        };
                        out.extend(self.close());
                        out.push(Event::ToolCallStart {
                            tool_call_id: id.clone(),
                            tool_call_name: name.clone(),
                            parent_message_id,
                            subagent_run_id: None,
                        });
                        self.open = Some(OpenChunk::ToolCall { id: id.clone(), name });
                        id
                    }
                    (_, None) => return Err("sent a first TOOL_CALL_CHUNK without a toolCallId".into()),
                };
                if let Some(delta) = delta.filter(|d| !d.is_empty()) {
                    out.push(Event::ToolCallArgs { tool_call_id: id, delta, subagent_run_id: None });
                }
            }
            Event::ReasoningMessageChunk { message_id, delta, .. } => {
                let id = match (&self.open, message_id) {
                    (Some(OpenChunk::Reasoning { id }), given) if given.as_ref().is_none_or(|g| g == id) => id.clone(),
                    (_, Some(id)) => {
                        out.extend(self.close());
                        out.push(Event::ReasoningMessageStart {
                            message_id: id.clone(),
                            role: "reasoning".into(),
                            subagent_run_id: None,
                        });
                        self.open = Some(OpenChunk::Reasoning { id: id.clone() });
                        id
                    }
                    (_, None) => return Err("sent a first REASONING_MESSAGE_CHUNK without a messageId".into()),
                };
                if let Some(delta) = delta.filter(|d| !d.is_empty()) {
                    out.push(Event::ReasoningMessageContent { message_id: id, delta, subagent_run_id: None });
                }
            }
            event @ (Event::Raw { .. }
            | Event::ActivitySnapshot { .. }
            | Event::ActivityDelta { .. }
            | Event::ReasoningEncryptedValue { .. }
            | Event::SubagentStarted { .. }) => out.push(event),
            event => {
                out.extend(self.close());
                out.push(event);
            }
        }
        Ok(out)
    }

    /// The end of the open chunked message or call, if one is open.
    fn close(&mut self) -> Option<Event> {
        Some(match self.open.take()? {
            OpenChunk::Text { id, .. } => Event::TextMessageEnd { message_id: id, subagent_run_id: None },
            OpenChunk::ToolCall { id, .. } => Event::ToolCallEnd { tool_call_id: id, subagent_run_id: None },
            OpenChunk::Reasoning { id } => Event::ReasoningMessageEnd { message_id: id, subagent_run_id: None },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn event(value: Value) -> Event {
        serde_json::from_value::<crate::protocol::events::Envelope>(value).expect("event").event
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        events.iter().map(super::super::check::event_name).collect()
    }

    #[test]
    fn chunks_open_continue_and_close_as_the_client_expands_them() {
        let mut chunks = ChunkExpander::default();
        let mut all = Vec::new();
        for value in [
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "Hel"}),
            json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "lo"}),
            json!({"type": "RAW", "event": {}}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "lookup", "delta": "{\"q\":"}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "delta": "1}"}),
            json!({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r1", "delta": "hm"}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}),
        ] {
            all.extend(chunks.expand(event(value)).expect("expands"));
        }
        assert_eq!(
            kinds(&all),
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "RAW",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "RUN_FINISHED",
            ]
        );
        assert_eq!(chunks, ChunkExpander::default(), "nothing left open");
    }

    #[test]
    fn a_first_chunk_must_name_what_it_opens() {
        for bad in [
            json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "x"}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "delta": "x"}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallName": "f", "delta": "x"}),
            json!({"type": "REASONING_MESSAGE_CHUNK", "delta": "x"}),
        ] {
            assert!(ChunkExpander::default().expand(event(bad.clone())).is_err(), "{bad}");
        }
        let mut chunks = ChunkExpander::default();
        chunks.expand(event(json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f"}))).expect("ok");
        let renamed = json!({"type": "TOOL_CALL_CHUNK", "toolCallName": "g", "delta": "x"});
        assert!(chunks.expand(event(renamed)).is_err(), "another name for the open call");
    }

    #[test]
    fn an_explicit_event_closes_the_open_chunk_first() {
        let mut chunks = ChunkExpander::default();
        chunks.expand(event(json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "a"}))).expect("ok");
        let out = chunks.expand(event(json!({"type": "STEP_STARTED", "stepName": "s"}))).expect("ok");
        assert_eq!(kinds(&out), ["TEXT_MESSAGE_END", "STEP_STARTED"]);
        // The same id again after the close is a new message, as in the client.
        let again = chunks.expand(event(json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1"}))).expect("ok");
        assert_eq!(kinds(&again), ["TEXT_MESSAGE_START"]);
    }
}
