//! The 31 AG-UI 1.0 event types, serialised exactly as `@ag-ui/core` 1.0 validates them.
//!
//! An [`Event`] is the payload; [`Envelope`] adds the base optionals every event may carry
//! (`timestamp`, `rawEvent`, `metadata`). Absent optionals are skipped, never written as `null`:
//! the official client treats `null` in an optional field as a fatal schema error.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::input::{InputMessage, RunAgentInput};

/// One AG-UI event with the base optionals every event may carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    #[serde(flatten)]
    pub event: Event,
    /// Milliseconds since the epoch; an integer on the wire (a float is fatal to the client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_event: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Envelope {
    pub fn new(event: Event, timestamp: i64) -> Self {
        Envelope { event, timestamp: Some(timestamp), raw_event: None, metadata: None }
    }
}

/// Roles a text message may take on the wire (`tool` is not one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextRole {
    Developer,
    System,
    Assistant,
    User,
}

/// A JSON Patch operation (RFC 6902) as AG-UI carries it in `STATE_DELTA` and `ACTIVITY_DELTA`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchOp {
    pub op: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Required for add, replace and test; may itself be `null` there: a `null` read is
    /// `Some(Value::Null)` (written back as `null`), an absent one `None`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// A field that is there, even as `null` (serde's own `Option` reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// How a run ended, on `RUN_FINISHED`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunOutcome {
    #[serde(rename_all = "camelCase")]
    Success {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending_tool_call_ids: Vec<String>,
    },
    /// At least one interrupt: an empty list is fatal to the client.
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

/// Something a run waits for, shown to the client on `RUN_FINISHED`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    pub id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// ISO 8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// Token usage for one (provider, model). Absent is not zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
}

/// How a subagent finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SubagentOutcome {
    Success,
    #[serde(rename_all = "camelCase")]
    Suspended {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interrupt_ids: Option<Vec<String>>,
    },
}

/// The content of a tool result: text or content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    Text(String),
    Parts(Vec<Value>),
}

impl ToolResultContent {
    /// The content as a client sent it in a `role: "tool"` message: text, or parts (any other
    /// JSON is kept as its text).
    pub fn from_message(content: &Value) -> ToolResultContent {
        match content {
            Value::String(text) => ToolResultContent::Text(text.clone()),
            Value::Array(parts) => ToolResultContent::Parts(parts.clone()),
            other => ToolResultContent::Text(other.to_string()),
        }
    }

    /// The content as a message's `content`: a string, or the parts.
    pub fn to_value(&self) -> Value {
        match self {
            ToolResultContent::Text(text) => Value::String(text.clone()),
            ToolResultContent::Parts(parts) => Value::Array(parts.clone()),
        }
    }

    /// The content for a reader of text (a model, a script's `{answer}`): the text, or the
    /// text parts joined when every part is text; otherwise the parts as JSON.
    pub fn as_text(&self) -> String {
        match self {
            ToolResultContent::Text(text) => text.clone(),
            ToolResultContent::Parts(parts) => {
                let texts: Option<Vec<&str>> = parts
                    .iter()
                    .map(|part| (part["type"] == "text").then(|| part["text"].as_str()).flatten())
                    .collect();
                texts.map_or_else(|| Value::Array(parts.clone()).to_string(), |texts| texts.concat())
            }
        }
    }
}

/// Every AG-UI 1.0 event. `subagentRunId` is carried by the events that may have it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Event {
    #[serde(rename_all = "camelCase")]
    RunStarted {
        thread_id: String,
        run_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol_version: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Box<RunAgentInput>>,
    },
    #[serde(rename_all = "camelCase")]
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<RunOutcome>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Vec<TokenUsage>>,
    },
    #[serde(rename_all = "camelCase")]
    RunError {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Vec<TokenUsage>>,
    },
    #[serde(rename_all = "camelCase")]
    StepStarted {
        step_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StepFinished {
        step_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageStart {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<TextRole>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageContent {
        message_id: String,
        delta: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageEnd {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageChunk {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<TextRole>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delta: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd {
        tool_call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallChunk {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delta: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: ToolResultContent,
        /// Only `"tool"` is allowed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StateSnapshot {
        snapshot: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StateDelta {
        delta: Vec<PatchOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    MessagesSnapshot {
        messages: Vec<InputMessage>,
    },
    #[serde(rename_all = "camelCase")]
    ActivitySnapshot {
        message_id: String,
        activity_type: String,
        content: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replace: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ActivityDelta {
        message_id: String,
        activity_type: String,
        patch: Vec<PatchOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningStart {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningEnd {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    /// `role` is required and always `"reasoning"`.
    #[serde(rename_all = "camelCase")]
    ReasoningMessageStart {
        message_id: String,
        role: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageContent {
        message_id: String,
        delta: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageEnd {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningMessageChunk {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delta: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ReasoningEncryptedValue {
        /// `tool-call` or `message`.
        subtype: String,
        entity_id: String,
        encrypted_value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    SubagentStarted {
        subagent_run_id: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_subagent_run_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_tool_call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    SubagentFinished {
        subagent_run_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<SubagentOutcome>,
    },
    #[serde(rename_all = "camelCase")]
    SubagentError {
        subagent_run_id: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Custom {
        name: String,
        /// Required; may be `null`.
        value: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Raw {
        event: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subagent_run_id: Option<String>,
    },
}

/// The events that may carry a `subagentRunId` (not the run's own events, `MESSAGES_SNAPSHOT`,
/// nor `SUBAGENT_*`, whose id names the subagent), as one pattern binding the field to `$id`:
/// the list both accessors match, kept once.
macro_rules! attributed_event {
    ($id:ident) => {
        Event::StepStarted { subagent_run_id: $id, .. }
            | Event::StepFinished { subagent_run_id: $id, .. }
            | Event::TextMessageStart { subagent_run_id: $id, .. }
            | Event::TextMessageContent { subagent_run_id: $id, .. }
            | Event::TextMessageEnd { subagent_run_id: $id, .. }
            | Event::TextMessageChunk { subagent_run_id: $id, .. }
            | Event::ToolCallStart { subagent_run_id: $id, .. }
            | Event::ToolCallArgs { subagent_run_id: $id, .. }
            | Event::ToolCallEnd { subagent_run_id: $id, .. }
            | Event::ToolCallChunk { subagent_run_id: $id, .. }
            | Event::ToolCallResult { subagent_run_id: $id, .. }
            | Event::StateSnapshot { subagent_run_id: $id, .. }
            | Event::StateDelta { subagent_run_id: $id, .. }
            | Event::ActivitySnapshot { subagent_run_id: $id, .. }
            | Event::ActivityDelta { subagent_run_id: $id, .. }
            | Event::ReasoningStart { subagent_run_id: $id, .. }
            | Event::ReasoningEnd { subagent_run_id: $id, .. }
            | Event::ReasoningMessageStart { subagent_run_id: $id, .. }
            | Event::ReasoningMessageContent { subagent_run_id: $id, .. }
            | Event::ReasoningMessageEnd { subagent_run_id: $id, .. }
            | Event::ReasoningMessageChunk { subagent_run_id: $id, .. }
            | Event::ReasoningEncryptedValue { subagent_run_id: $id, .. }
            | Event::Custom { subagent_run_id: $id, .. }
            | Event::Raw { subagent_run_id: $id, .. }
    };
}

impl Event {
    /// The event's `subagentRunId` attribution, for the events that may carry one
    /// ([`attributed_event`]).
    pub fn attribution_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            attributed_event!(id) => Some(id),
            _ => None,
        }
    }

    /// The subagent the event is attributed to, if any.
    pub fn attribution(&self) -> Option<&str> {
        match self {
            attributed_event!(id) => id.as_deref(),
            _ => None,
        }
    }

    /// The terminal events end a run: nothing of that run follows them.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Event::RunFinished { .. } | Event::RunError { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_result_reads_as_text_when_every_part_is_text() {
        let text = ToolResultContent::from_message(&json!("done"));
        assert_eq!(text, ToolResultContent::Text("done".into()));
        let parts = json!([{ "type": "text", "text": "painted " }, { "type": "text", "text": "blue" }]);
        let content = ToolResultContent::from_message(&parts);
        assert_eq!((content.as_text(), content.to_value()), ("painted blue".to_string(), parts));
        let picture = json!([{ "type": "image", "source": { "type": "url", "value": "https://x.example/a.png" } }]);
        assert_eq!(
            ToolResultContent::from_message(&picture).as_text(),
            picture.to_string(),
            "not text: the parts as JSON"
        );
        assert_eq!(ToolResultContent::from_message(&json!(7)), ToolResultContent::Text("7".into()));
    }

    #[test]
    fn a_patch_value_of_null_is_kept_and_an_absent_one_stays_absent() {
        let null: PatchOp = serde_json::from_str(r#"{"op":"add","path":"/x","value":null}"#).expect("parses");
        assert_eq!(null.value, Some(Value::Null));
        assert_eq!(serde_json::to_string(&null).expect("encodes"), r#"{"op":"add","path":"/x","value":null}"#);
        let absent: PatchOp = serde_json::from_str(r#"{"op":"remove","path":"/x"}"#).expect("parses");
        assert_eq!(absent.value, None);
        assert_eq!(serde_json::to_string(&absent).expect("encodes"), r#"{"op":"remove","path":"/x"}"#);
    }

    #[test]
    fn optional_fields_are_omitted_not_null() {
        let ev = Envelope::new(
            Event::TextMessageStart {
                message_id: "m1".into(),
                role: Some(TextRole::Assistant),
                name: None,
                subagent_run_id: None,
            },
            1_700_000_000_123,
        );
        let text = serde_json::to_string(&ev).expect("serialises");
        assert_eq!(
            text,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant","timestamp":1700000000123}"#
        );
    }

    #[test]
    fn outcomes_serialise_as_the_client_expects() {
        let finished = Event::RunFinished {
            thread_id: "t".into(),
            run_id: "r".into(),
            result: None,
            outcome: Some(RunOutcome::Success { pending_tool_call_ids: vec![] }),
            usage: None,
        };
        assert_eq!(
            serde_json::to_value(&finished).expect("serialises"),
            json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success"}})
        );
        let cancelled = RunOutcome::Cancelled;
        assert_eq!(serde_json::to_value(cancelled).expect("serialises"), json!({"type":"cancelled"}));
    }

    #[test]
    fn every_event_round_trips() {
        let samples = [
            json!({"type":"STEP_STARTED","stepName":"s"}),
            json!({"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":"ok","role":"tool"}),
            json!({"type":"STATE_DELTA","delta":[{"op":"add","path":"/board/notes/-","value":{"id":"1"}}]}),
            json!({"type":"REASONING_MESSAGE_START","messageId":"m","role":"reasoning"}),
            json!({"type":"SUBAGENT_FINISHED","subagentRunId":"s","outcome":{"type":"suspended","interruptIds":["i"]}}),
            json!({"type":"CUSTOM","name":"x","value":null}),
            json!({"type":"RAW","event":{"a":1},"source":"up"}),
            json!({"type":"ACTIVITY_SNAPSHOT","messageId":"m","activityType":"plan","content":{}}),
        ];
        for sample in samples {
            let ev: Event = serde_json::from_value(sample.clone()).expect("parses");
            assert_eq!(serde_json::to_value(&ev).expect("serialises"), sample);
        }
    }
}
