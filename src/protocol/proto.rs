//! The AG-UI binary transport: an event as `@ag-ui/proto` 1.0.0 frames it, a 4-byte big-endian
//! length and then one protobuf `Event` (`proto/agui_events.proto`, compiled by `build.rs`).
//!
//! The log holds each event as JSON, shared by every stream that shows it; a binary stream
//! re-shapes that JSON into the schema's own JSON form and lets the schema's descriptors
//! (`prost-reflect`, proto3's JSON mapping) fill and encode the message, so the event's fields
//! are written down once, in the schema. The re-shaping is what the official encoder does:
//! `type`, `timestamp`, `rawEvent` and `metadata` move into `baseEvent`; a message's or a tool
//! result's content parts go to `contentParts`; an outcome object is flattened beside its
//! type; JSON Patch operations are named in upper case.
//!
//! The gateway's event id rides in the event's `metadata` under [`EVENT_ID_KEY`] (the schema
//! has no field for it), so a client cut off continues with `Last-Event-ID` exactly as over SSE.

use std::sync::OnceLock;

use bytes::{BufMut, BytesMut};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::{Map, Value};

/// The binary transport's media type, on `Accept` and on the answer's `Content-Type`.
pub const MEDIA_TYPE: &str = "application/vnd.ag-ui.event+proto";

/// The key of an event's `metadata` that carries its gateway event id.
pub const EVENT_ID_KEY: &str = "eventId";

/// The descriptor set `build.rs` compiled from `proto/agui_events.proto`.
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/agui_events.bin"));

/// Why an event could not be framed.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("the event is not a JSON object with a type")]
    NotAnEvent,
    #[error("the binary schema has no event of type {0}")]
    UnknownType(String),
    #[error("the event does not fit the binary schema: {0}")]
    Schema(String),
}

/// The schema's `Event` envelope, loaded once.
fn envelope() -> Result<&'static MessageDescriptor, ProtoError> {
    static ENVELOPE: OnceLock<Result<MessageDescriptor, String>> = OnceLock::new();
    ENVELOPE
        .get_or_init(|| {
            let pool = DescriptorPool::decode(DESCRIPTORS).map_err(|error| error.to_string())?;
            pool.get_message_by_name("agui.wire.Event").ok_or_else(|| "no agui.wire.Event".to_string())
        })
        .as_ref()
        .map_err(|error| ProtoError::Schema(error.clone()))
}

/// Appends the frame of the event `json` (as the log holds it) with gateway id `id` to `out`.
pub fn put_frame(out: &mut BytesMut, id: &str, json: &[u8]) -> Result<(), ProtoError> {
    let event: Value = serde_json::from_slice(json).map_err(|_| ProtoError::NotAnEvent)?;
    let wire = to_wire(event, id)?;
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(envelope()?.clone(), wire, &options)
        .map_err(|error| ProtoError::Schema(error.to_string()))?;
    let length = message.encoded_len();
    let prefix = u32::try_from(length).map_err(|_| ProtoError::Schema("an event of more than 4 GiB".into()))?;
    out.reserve(4 + length);
    out.put_u32(prefix);
    message.encode(out).map_err(|error| ProtoError::Schema(error.to_string()))?;
    Ok(())
}

/// The envelope's arm for each event type the schema has.
fn arm(event_type: &str) -> Option<&'static str> {
    Some(match event_type {
        "TEXT_MESSAGE_START" => "textMessageStart",
        "TEXT_MESSAGE_CONTENT" => "textMessageContent",
        "TEXT_MESSAGE_END" => "textMessageEnd",
        "TEXT_MESSAGE_CHUNK" => "textMessageChunk",
        "TOOL_CALL_START" => "toolCallStart",
        "TOOL_CALL_ARGS" => "toolCallArgs",
        "TOOL_CALL_END" => "toolCallEnd",
        "TOOL_CALL_CHUNK" => "toolCallChunk",
        "TOOL_CALL_RESULT" => "toolCallResult",
        "STATE_SNAPSHOT" => "stateSnapshot",
        "STATE_DELTA" => "stateDelta",
        "MESSAGES_SNAPSHOT" => "messagesSnapshot",
        "ACTIVITY_SNAPSHOT" => "activitySnapshot",
        "ACTIVITY_DELTA" => "activityDelta",
        "RAW" => "raw",
        "CUSTOM" => "custom",
        "RUN_STARTED" => "runStarted",
        "RUN_FINISHED" => "runFinished",
        "RUN_ERROR" => "runError",
        "STEP_STARTED" => "stepStarted",
        "STEP_FINISHED" => "stepFinished",
        "REASONING_START" => "reasoningStart",
        "REASONING_MESSAGE_START" => "reasoningMessageStart",
        "REASONING_MESSAGE_CONTENT" => "reasoningMessageContent",
        "REASONING_MESSAGE_END" => "reasoningMessageEnd",
        "REASONING_MESSAGE_CHUNK" => "reasoningMessageChunk",
        "REASONING_END" => "reasoningEnd",
        "REASONING_ENCRYPTED_VALUE" => "reasoningEncryptedValue",
        "SUBAGENT_STARTED" => "subagentStarted",
        "SUBAGENT_FINISHED" => "subagentFinished",
        "SUBAGENT_ERROR" => "subagentError",
        _ => return None,
    })
}

/// The JSON event `event` in the schema's JSON form, its id in its metadata.
fn to_wire(event: Value, id: &str) -> Result<Value, ProtoError> {
    let Value::Object(mut fields) = event else { return Err(ProtoError::NotAnEvent) };
    let Some(Value::String(event_type)) = fields.remove("type") else { return Err(ProtoError::NotAnEvent) };
    let arm = arm(&event_type).ok_or_else(|| ProtoError::UnknownType(event_type.clone()))?;
    let mut base = Map::new();
    for key in ["timestamp", "rawEvent"] {
        if let Some(value) = fields.remove(key) {
            base.insert(key.into(), value);
        }
    }
    let mut metadata = match fields.remove("metadata") {
        Some(Value::Object(metadata)) => metadata,
        _ => Map::new(),
    };
    metadata.insert(EVENT_ID_KEY.into(), Value::String(id.into()));
    base.insert("metadata".into(), Value::Object(metadata));
    match event_type.as_str() {
        "RUN_FINISHED" | "SUBAGENT_FINISHED" => flatten_outcome(&mut fields),
        "STATE_DELTA" => name_patch_ops(fields.get_mut("delta")),
        "ACTIVITY_DELTA" => name_patch_ops(fields.get_mut("patch")),
        "MESSAGES_SNAPSHOT" => wire_messages(fields.get_mut("messages")),
        "TOOL_CALL_RESULT" => parts_to_wire(&mut fields),
        "RUN_STARTED" => {
            if let Some(Value::Object(input)) = fields.get_mut("input") {
                wire_messages(input.get_mut("messages"));
            }
        }
        _ => {}
    }
    base.insert("type".into(), Value::String(event_type));
    fields.insert("baseEvent".into(), Value::Object(base));
    let mut envelope = Map::new();
    envelope.insert(arm.into(), Value::Object(fields));
    Ok(Value::Object(envelope))
}

/// `outcome: {type, …members}` as the schema has it: the type in `outcome`, the members beside.
fn flatten_outcome(fields: &mut Map<String, Value>) {
    if let Some(Value::Object(mut outcome)) = fields.remove("outcome") {
        if let Some(kind) = outcome.remove("type") {
            fields.insert("outcome".into(), kind);
        }
        for (key, value) in outcome {
            fields.insert(key, value);
        }
    }
}

/// JSON Patch operations named as the schema's enum names them (`add` → `ADD`).
fn name_patch_ops(operations: Option<&mut Value>) {
    let Some(Value::Array(operations)) = operations else { return };
    for operation in operations {
        if let Some(Value::String(op)) = operation.get_mut("op") {
            *op = op.to_ascii_uppercase();
        }
    }
}

fn wire_messages(messages: Option<&mut Value>) {
    let Some(Value::Array(messages)) = messages else { return };
    for message in messages {
        let Value::Object(fields) = message else { continue };
        if fields.get("role").and_then(Value::as_str) == Some("activity") {
            if let Some(content) = fields.remove("content") {
                fields.insert("activityContent".into(), content);
            }
        } else {
            parts_to_wire(fields);
        }
    }
}

/// Content made of parts moves to `contentParts`; text content stays in `content`.
fn parts_to_wire(fields: &mut Map<String, Value>) {
    if !matches!(fields.get("content"), Some(Value::Array(_))) {
        return;
    }
    let Some(Value::Array(parts)) = fields.remove("content") else { return };
    let parts = parts.into_iter().filter_map(part_to_wire).collect();
    fields.insert("contentParts".into(), Value::Array(parts));
}

/// One 1.0 content part as the schema's `InputContent`. A part of a kind the schema has no arm
/// for is left out, as the official encoder leaves it out.
fn part_to_wire(part: Value) -> Option<Value> {
    let Value::Object(mut part) = part else { return None };
    let Some(Value::String(kind)) = part.remove("type") else { return None };
    let wire = match kind.as_str() {
        "text" => part,
        "image" | "audio" | "video" | "document" => {
            if let Some(source) = part.remove("source") {
                part.insert("source".into(), source_to_wire(source)?);
            }
            part
        }
        // The 0.x `binary` part travels as a document marked as such, as the official encoder
        // sends it.
        "binary" => return binary_to_wire(part),
        _ => return None,
    };
    let mut arm = Map::new();
    arm.insert(kind, Value::Object(wire));
    Some(Value::Object(arm))
}

fn source_to_wire(source: Value) -> Option<Value> {
    let Value::Object(mut source) = source else { return None };
    let Some(Value::String(kind)) = source.remove("type") else { return None };
    if !matches!(kind.as_str(), "data" | "url" | "file") {
        return None;
    }
    let mut arm = Map::new();
    arm.insert(kind, Value::Object(source));
    Some(Value::Object(arm))
}

fn binary_to_wire(part: Map<String, Value>) -> Option<Value> {
    let mime_type = part.get("mimeType").cloned().unwrap_or(Value::Null);
    let (kind, value) = if let Some(data) = part.get("data") {
        ("data", data.clone())
    } else if let Some(url) = part.get("url").or_else(|| part.get("id")) {
        ("url", url.clone())
    } else {
        return None;
    };
    let mut metadata = Map::new();
    metadata.insert("legacyBinary".into(), Value::Bool(true));
    for key in ["filename", "id"] {
        if let Some(value) = part.get(key) {
            metadata.insert(key.into(), value.clone());
        }
    }
    Some(serde_json::json!({
        "document": {
            "source": { kind: { "value": value, "mimeType": mime_type } },
            "metadata": metadata,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(event: Value, id: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_frame(&mut out, id, &serde_json::to_vec(&event).expect("json")).expect("framed");
        out.to_vec()
    }

    fn decoded(frame: &[u8]) -> Value {
        let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(length + 4, frame.len(), "one whole frame");
        let message = DynamicMessage::decode(envelope().expect("schema").clone(), &frame[4..]).expect("decodes");
        serde_json::to_value(&message).expect("json")
    }

    #[test]
    fn a_frame_is_a_length_and_an_envelope_with_the_event_id_in_metadata() {
        let bytes = frame(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi"}), "t1.3");
        let wire = decoded(&bytes);
        assert_eq!(wire["textMessageContent"]["messageId"], "m1");
        assert_eq!(wire["textMessageContent"]["delta"], "hi");
        assert_eq!(wire["textMessageContent"]["baseEvent"]["type"], "TEXT_MESSAGE_CONTENT");
        assert_eq!(wire["textMessageContent"]["baseEvent"]["metadata"]["eventId"], "t1.3");
    }

    #[test]
    fn outcomes_patches_and_parts_take_the_schemas_shape() {
        let finished = decoded(&frame(
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                   "outcome": {"type": "success", "pendingToolCallIds": ["c1"]}}),
            "t1.9",
        ));
        assert_eq!(finished["runFinished"]["outcome"], "success");
        assert_eq!(finished["runFinished"]["pendingToolCallIds"], json!(["c1"]));
        let delta = decoded(&frame(
            json!({"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/a", "value": 1}]}),
            "t1.4",
        ));
        assert_eq!(delta["stateDelta"]["delta"][0]["op"], "REPLACE");
        let snapshot = decoded(&frame(
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [
                {"id": "u1", "role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "url", "value": "https://example.test/a.png"}}]},
                {"id": "a1", "role": "assistant", "content": "a cat"}]}),
            "t1.2",
        ));
        let messages = &snapshot["messagesSnapshot"]["messages"];
        assert_eq!(messages[0]["contentParts"][0]["text"]["text"], "look");
        assert_eq!(messages[0]["contentParts"][1]["image"]["source"]["url"]["value"], "https://example.test/a.png");
        assert_eq!(messages[1]["content"], "a cat");
    }

    #[test]
    fn an_event_the_schema_does_not_have_is_refused_not_misframed() {
        let mut out = BytesMut::new();
        let unknown = serde_json::to_vec(&json!({"type": "SOMETHING_NEW"})).expect("json");
        assert!(matches!(put_frame(&mut out, "t1.1", &unknown), Err(ProtoError::UnknownType(_))));
        assert!(matches!(put_frame(&mut out, "t1.1", b"[1]"), Err(ProtoError::NotAnEvent)));
        assert!(out.is_empty(), "nothing half-written");
    }
}
