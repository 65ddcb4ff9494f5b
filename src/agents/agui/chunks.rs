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
    /// The agent's own lane.
    open: Option<OpenChunk>,
    /// Each subagent's lane (its `subagentRunId` → what is open in it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    lanes: std::collections::BTreeMap<String, OpenChunk>,
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
    /// chunk, after whatever it closes). Each lane — the agent's own, and each subagent's — holds
    /// one open chunked item, as in the client: a chunk goes to the lane it names, else to the
    /// lane whose open item it continues; an explicit event closes its own lane's; the run's
    /// events close every lane, and a subagent's end closes its lane.
    pub(super) fn expand(&mut self, event: Event) -> Result<Vec<Event>, String> {
        let is_chunk = matches!(
            event,
            Event::TextMessageChunk { .. } | Event::ToolCallChunk { .. } | Event::ReasoningMessageChunk { .. }
        );
        match &event {
            Event::RunStarted { .. }
            | Event::RunFinished { .. }
            | Event::RunError { .. }
            | Event::MessagesSnapshot { .. } => {
                let mut out: Vec<Event> = std::mem::take(&mut self.lanes)
                    .into_iter()
                    .filter_map(|(owner, open)| close_of(Some(open), Some(owner)))
                    .collect();
                out.extend(self.expand_in_lane(event)?);
                return Ok(out);
            }
            Event::SubagentFinished { subagent_run_id, .. } | Event::SubagentError { subagent_run_id, .. } => {
                let owner = subagent_run_id.clone();
                let mut out: Vec<Event> = close_of(self.lanes.remove(&owner), Some(owner)).into_iter().collect();
                out.push(event);
                return Ok(out);
            }
            _ => {}
        }
        let lane = match is_chunk {
            true => self.lane_of_chunk(&event)?,
            false => event.attribution().map(str::to_string),
        };
        let Some(owner) = lane else { return self.expand_in_lane(event) };
        // A subagent's lane: the same expansion, on its own open item, its events attributed.
        let mut own = ChunkExpander { open: self.lanes.remove(&owner), lanes: Default::default() };
        let mut out = own.expand_in_lane(event)?;
        if let Some(open) = own.open {
            self.lanes.insert(owner.clone(), open);
        }
        for produced in &mut out {
            if let Some(tag @ None) = produced.attribution_mut() {
                *tag = Some(owner.clone());
            }
        }
        Ok(out)
    }

    /// The lane a chunk goes to: the one it names, else the one whose open item of its kind
    /// has its id, else the agent's own when that has one open, else the only lane that has.
    fn lane_of_chunk(&self, chunk: &Event) -> Result<Option<String>, String> {
        let (kind, id) = match chunk {
            Event::TextMessageChunk { message_id, .. } => ("text", message_id),
            Event::ToolCallChunk { tool_call_id, .. } => ("tool", tool_call_id),
            Event::ReasoningMessageChunk { message_id, .. } => ("reasoning", message_id),
            _ => return Ok(None),
        };
        let tag = chunk.attribution().map(str::to_string);
        let same_kind = |open: &OpenChunk| open.kind() == kind;
        if let Some(id) = id {
            let open_in = std::iter::once((None, self.open.as_ref()))
                .chain(self.lanes.iter().map(|(owner, open)| (Some(owner.clone()), Some(open))))
                .find(|(_, open)| open.is_some_and(|open| same_kind(open) && open.id() == id));
            if let Some((owner, _)) = open_in {
                if tag.is_some() && tag != owner {
                    return Err(format!("sent a chunk of '{id}' attributed to another subagent than its stream's"));
                }
                return Ok(owner);
            }
            return Ok(tag);
        }
        if tag.is_some() || self.open.as_ref().is_some_and(same_kind) {
            return Ok(tag);
        }
        let open: Vec<&String> =
            self.lanes.iter().filter(|(_, open)| same_kind(open)).map(|(owner, _)| owner).collect();
        match open.as_slice() {
            [one] => Ok(Some((*one).clone())),
            [] => Ok(None),
            _ => {
                Err("sent a chunk naming neither its id nor its subagent while several subagents have one open".into())
            }
        }
    }

    fn expand_in_lane(&mut self, event: Event) -> Result<Vec<Event>, String> {
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
        close_of(self.open.take(), None)
    }
}

/// The end of `open`, attributed to `owner`.
fn close_of(open: Option<OpenChunk>, owner: Option<String>) -> Option<Event> {
    Some(match open? {
        OpenChunk::Text { id, .. } => Event::TextMessageEnd { message_id: id, subagent_run_id: owner },
        OpenChunk::ToolCall { id, .. } => Event::ToolCallEnd { tool_call_id: id, subagent_run_id: owner },
        OpenChunk::Reasoning { id } => Event::ReasoningMessageEnd { message_id: id, subagent_run_id: owner },
    })
}

impl OpenChunk {
    fn kind(&self) -> &'static str {
        match self {
            OpenChunk::Text { .. } => "text",
            OpenChunk::ToolCall { .. } => "tool",
            OpenChunk::Reasoning { .. } => "reasoning",
        }
    }

    fn id(&self) -> &str {
        match self {
            OpenChunk::Text { id, .. } | OpenChunk::ToolCall { id, .. } | OpenChunk::Reasoning { id } => id,
        }
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

    #[test]
    fn each_subagent_chunks_in_its_own_lane() {
        let mut chunks = ChunkExpander::default();
        let mut all = Vec::new();
        for value in [
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "a", "delta": "x", "subagentRunId": "s1"}),
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "b", "delta": "y", "subagentRunId": "s2"}),
            // Continues s1's message by its id; an explicit event of s2 ends only s2's.
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "a", "delta": "z"}),
            json!({"type": "STEP_STARTED", "stepName": "st", "subagentRunId": "s2"}),
            json!({"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"}),
        ] {
            all.extend(chunks.expand(event(value)).expect("expands"));
        }
        let seen: Vec<(String, Option<String>)> =
            all.iter().map(|e| (super::super::check::event_name(e), e.attribution().map(str::to_string))).collect();
        let s = |id: &str| Some(id.to_string());
        assert_eq!(
            seen,
            [
                ("TEXT_MESSAGE_START".to_string(), s("s1")),
                ("TEXT_MESSAGE_CONTENT".to_string(), s("s1")),
                ("TEXT_MESSAGE_START".to_string(), s("s2")),
                ("TEXT_MESSAGE_CONTENT".to_string(), s("s2")),
                ("TEXT_MESSAGE_CONTENT".to_string(), s("s1")),
                ("TEXT_MESSAGE_END".to_string(), s("s2")),
                ("STEP_STARTED".to_string(), s("s2")),
                ("TEXT_MESSAGE_END".to_string(), s("s1")),
                ("SUBAGENT_FINISHED".to_string(), None),
            ]
        );
        assert_eq!(chunks, ChunkExpander::default(), "nothing left open");
    }
}
