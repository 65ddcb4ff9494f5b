//! The AG-UI binary transport: an event as `@ag-ui/proto` 1.0.0 frames it, a 4-byte big-endian
//! length and then one protobuf `Event` (`proto/agui_events.proto`, compiled by `build.rs`).
//!
//! The log holds each event as JSON, shared by every stream that shows it; a binary stream
//! re-shapes that JSON into the schema's own JSON form (proto3's JSON mapping) and writes it
//! out as protobuf walking the schema's descriptors (`prost-reflect`), so the event's fields
//! are written down once, in the schema. It writes straight from the JSON rather than through a
//! `DynamicMessage` (less work per event; the tests check the two agree). The re-shaping is what
//! the official encoder does:
//! `type`, `timestamp`, `rawEvent` and `metadata` move into `baseEvent`; a message's or a tool
//! result's content parts go to `contentParts`; an outcome object is flattened beside its
//! type; JSON Patch operations are named in upper case.
//!
//! The gateway's event id rides in the event's `metadata` under [`EVENT_ID_KEY`] (the schema
//! has no field for it), so a client cut off continues with `Last-Event-ID` exactly as over SSE.

use std::sync::OnceLock;

use bytes::{BufMut, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
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
/// Nothing is appended when it fails.
pub fn put_frame(out: &mut BytesMut, id: &str, json: &[u8]) -> Result<(), ProtoError> {
    let event: Value = serde_json::from_slice(json).map_err(|_| ProtoError::NotAnEvent)?;
    let Value::Object(wire) = to_wire(event, id)? else { return Err(ProtoError::NotAnEvent) };
    let mut message = Vec::with_capacity(json.len());
    write_message(envelope()?, &wire, &mut message)?;
    let prefix = u32::try_from(message.len()).map_err(|_| ProtoError::Schema("an event of more than 4 GiB".into()))?;
    out.reserve(4 + message.len());
    out.put_u32(prefix);
    out.put_slice(&message);
    Ok(())
}

/// Writes the members of `json` that `descriptor` has fields for (by their JSON names), in the
/// order they come; members it has no field for are left out, as the JSON mapping ignores them.
fn write_message(
    descriptor: &MessageDescriptor,
    json: &Map<String, Value>,
    out: &mut Vec<u8>,
) -> Result<(), ProtoError> {
    for (name, value) in json {
        let Some(field) = descriptor.get_field_by_json_name(name) else { continue };
        write_field(&field, value, out).map_err(|error| match error {
            ProtoError::Schema(why) => ProtoError::Schema(format!("{name}: {why}")),
            other => other,
        })?;
    }
    Ok(())
}

fn write_field(field: &FieldDescriptor, value: &Value, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let number = field.number();
    if field.is_map() {
        let Value::Object(entries) = value else { return Ok(()) };
        let Kind::Message(entry) = field.kind() else { return Err(schema("a map without its entry")) };
        let value_field = entry.map_entry_value_field();
        for (key, value) in entries {
            let mut body = Vec::new();
            write_bytes(1, key.as_bytes(), &mut body);
            write_single(&value_field, value, &mut body)?;
            write_bytes(number, &body, out);
        }
        return Ok(());
    }
    if field.is_list() {
        let Value::Array(items) = value else { return Ok(()) };
        for item in items {
            write_single(field, item, out)?;
        }
        return Ok(());
    }
    if value.is_null() && !is_value(field) {
        return Ok(());
    }
    // Proto3 leaves a default scalar out unless the field tracks presence (`optional`).
    if !field.supports_presence() && is_default_scalar(value) {
        return Ok(());
    }
    write_single(field, value, out)
}

/// Writes one value of `field` (one element of a repeated field).
fn write_single(field: &FieldDescriptor, value: &Value, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let number = field.number();
    match field.kind() {
        Kind::String => {
            let Value::String(text) = value else { return Err(schema("not a string")) };
            write_bytes(number, text.as_bytes(), out);
        }
        Kind::Bool => {
            let Value::Bool(flag) = value else { return Err(schema("not a boolean")) };
            write_varint(number, u64::from(*flag), out);
        }
        Kind::Int64 | Kind::Int32 => {
            let number_value = match value {
                Value::Number(n) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
                Value::String(text) => text.parse().ok(),
                _ => None,
            };
            let Some(integer) = number_value else { return Err(schema("not an integer")) };
            write_varint(number, integer as u64, out);
        }
        Kind::Double => {
            let Some(float) = value.as_f64() else { return Err(schema("not a number")) };
            encode_key(number, WireType::SixtyFourBit, out);
            out.put_f64_le(float);
        }
        Kind::Enum(enumeration) => {
            let Value::String(name) = value else { return Err(schema("not an enum name")) };
            let Some(known) = enumeration.get_value_by_name(name) else {
                return Err(schema(&format!("no value {name}")));
            };
            write_varint(number, known.number() as u64, out);
        }
        Kind::Message(message) => {
            let mut body = Vec::new();
            match message.full_name() {
                "google.protobuf.Value" => write_json_value(value, &mut body),
                "google.protobuf.Struct" => {
                    let Value::Object(members) = value else { return Err(schema("not an object")) };
                    write_struct(members, &mut body);
                }
                _ => {
                    let Value::Object(members) = value else { return Err(schema("not an object")) };
                    write_message(&message, members, &mut body)?;
                }
            }
            write_bytes(number, &body, out);
        }
        other => return Err(schema(&format!("no field of kind {other:?} in the AG-UI schema"))),
    }
    Ok(())
}

/// `google.protobuf.Value`: null 1, number 2, string 3, bool 4, struct 5, list 6.
fn write_json_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => write_varint(1, 0, out),
        Value::Number(n) => {
            encode_key(2, WireType::SixtyFourBit, out);
            out.put_f64_le(n.as_f64().unwrap_or(0.0));
        }
        Value::String(text) => write_bytes(3, text.as_bytes(), out),
        Value::Bool(flag) => write_varint(4, u64::from(*flag), out),
        Value::Object(members) => {
            let mut body = Vec::new();
            write_struct(members, &mut body);
            write_bytes(5, &body, out);
        }
        Value::Array(items) => {
            let mut list = Vec::new();
            for item in items {
                let mut element = Vec::new();
                write_json_value(item, &mut element);
                write_bytes(1, &element, &mut list);
            }
            write_bytes(6, &list, out);
        }
    }
}

/// `google.protobuf.Struct`: `map<string, Value> fields = 1`.
fn write_struct(members: &Map<String, Value>, out: &mut Vec<u8>) {
    for (key, value) in members {
        let mut entry = Vec::new();
        write_bytes(1, key.as_bytes(), &mut entry);
        let mut body = Vec::new();
        write_json_value(value, &mut body);
        write_bytes(2, &body, &mut entry);
        write_bytes(1, &entry, out);
    }
}

fn is_value(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Message(message) if message.full_name() == "google.protobuf.Value")
}

fn is_default_scalar(value: &Value) -> bool {
    match value {
        Value::String(text) => text.is_empty(),
        Value::Bool(flag) => !flag,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn write_bytes(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    out.reserve(encoded_len_varint(bytes.len() as u64) + bytes.len());
    encode_varint(bytes.len() as u64, out);
    out.put_slice(bytes);
}

fn write_varint(number: u32, value: u64, out: &mut Vec<u8>) {
    encode_key(number, WireType::Varint, out);
    encode_varint(value, out);
}

fn schema(why: &str) -> ProtoError {
    ProtoError::Schema(why.to_string())
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
    use prost_reflect::{DeserializeOptions, DynamicMessage};
    use serde_json::json;

    fn frame(event: Value, id: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_frame(&mut out, id, &serde_json::to_vec(&event).expect("json")).expect("framed");
        out.to_vec()
    }

    /// The frame decoded by the schema's own reflection, as JSON; it must equal what the
    /// reflective encoder (`DynamicMessage` filled from the same JSON) makes of the event.
    fn decoded(frame: &[u8]) -> Value {
        let length = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(length + 4, frame.len(), "one whole frame");
        let message = DynamicMessage::decode(envelope().expect("schema").clone(), &frame[4..]).expect("decodes");
        serde_json::to_value(&message).expect("json")
    }

    fn reflected(event: &Value, id: &str) -> Value {
        let wire = to_wire(event.clone(), id).expect("reshaped");
        let options = DeserializeOptions::new().deny_unknown_fields(false);
        let message = DynamicMessage::deserialize_with_options(envelope().expect("schema").clone(), wire, &options)
            .expect("fills");
        serde_json::to_value(&message).expect("json")
    }

    #[test]
    fn the_direct_writer_agrees_with_the_schemas_reflection() {
        let events = [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r", "protocolVersion": "1.0", "timestamp": 1796299782279_i64,
                   "input": {"threadId": "t", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "hi"}],
                             "tools": [{"name": "f", "description": "d", "parameters": {"type": "object"}}],
                             "context": [], "state": {"n": 1.5, "ok": true, "list": [null, "x"]}, "forwardedProps": {}}}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hé ✓", "metadata": {"upstream": {"k": [1, 2]}}}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "r", "toolCallId": "c", "role": "tool",
                   "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}}]}),
            json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/board/notes/-", "value": {"note": "n"}}, {"op": "remove", "path": "/x"}]}),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                   "outcome": {"type": "interrupt", "interrupts": [{"id": "i", "reason": "tool_call", "toolCallId": "c",
                               "responseSchema": {"type": "object"}, "expiresAt": "2026-12-03T00:00:00.000Z"}]},
                   "usage": [{"provider": "openai", "model": "m", "inputTokens": 12, "outputTokens": 0, "totalTokens": 12}]}),
            json!({"type": "RUN_ERROR", "message": "boom", "code": "failed", "rawEvent": {"gateway": {"n": 1}}}),
            json!({"type": "CUSTOM", "name": "gateway.resume", "value": null}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "card", "content": {"title": "t"}, "replace": false}),
        ];
        for event in events {
            let bytes = frame(event.clone(), "t1.7");
            assert_eq!(decoded(&bytes), reflected(&event, "t1.7"), "{event}");
        }
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
