//! The gateway's own events in a turn's log, in one place: every `CUSTOM gateway.*` name, the
//! typed body each carries, which [`EventKind`] its row is stored under, and how a stream tells
//! the rows it must treat apart (state events, cards) from the rest.
//!
//! Why here: the log is read by the runner (a takeover, a resumed turn), by planning (what a
//! waiting turn waits for) and by every stream, so writers and readers must agree on one
//! spelling. The stored form is what it always was (`CUSTOM` with the body as its `value`), so
//! databases written before read the same.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::interrupts::Waiting;
use crate::protocol::events::Envelope;
use crate::protocol::Event;
use crate::store::EventKind;

/// A wait on interrupts, as logged; each caller sees it rendered (§5.2), never as is.
pub const WAITING_EVENT: &str = "gateway.waiting-event";
/// A wait for the results of client-declared tools, as logged; rendered as `RUN_FINISHED` with
/// `pendingToolCallIds` (§9.2).
pub const CLIENT_WAIT_EVENT: &str = "gateway.client-wait-event";
/// A decision (or client tool results), as logged; it opens the run that made it.
pub const RESUMED_EVENT: &str = "gateway.resumed-event";
/// A card: an answer that matched its agent's card schema (§3). Sent as stored, to callers who
/// may read content.
pub const CARD_EVENT: &str = "gateway.card";
/// What a cut answer said, withdrawn from the conversation because it is given again whole
/// (§4.6): rendered as the `MESSAGES_SNAPSHOT` without it.
pub const CUT_EVENT: &str = "gateway.cut";

/// Rendered for a caller who may decide none of a wait's interrupts: who decides them.
pub const WAITING_FOR_OTHERS: &str = "gateway.waiting";
/// Rendered at the start of a resume run: one per resume entry, its outcome.
pub const RESUME_OUTCOME: &str = "gateway.resume";
/// Rendered for a client before AG-UI 1.0 (§5.4): one per interrupt it may decide.
pub const ON_INTERRUPT: &str = "on_interrupt";

/// The body of a waiting event.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WaitingEvent {
    pub interrupts: Vec<Waiting>,
}

/// The body of a client-wait event: the tool calls whose results the client owes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientWaitEvent {
    #[serde(default, rename = "pendingToolCallIds")]
    pub pending_tool_call_ids: Vec<String>,
}

/// The body of a decision event: what this decision recorded, per interrupt.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ResumedEvent {
    pub decisions: Vec<Value>,
    /// Results of client-declared tools, by tool call id, when those are what the turn waited for.
    #[serde(default, rename = "toolResults", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tool_results: std::collections::BTreeMap<String, crate::protocol::events::ToolResultContent>,
    /// The thread's board when the decision was made: the snapshot a run starting here opens
    /// with, so the deltas after it apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<Vec<Value>>,
}

/// The body of a cut event: which messages and tool calls of the turn a crash (or a hand-over,
/// or an upstream that could not continue) cut, whose step is run again and says them anew.
/// Folded conversations leave them out; the log keeps them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CutEvent {
    /// Text messages cut off mid-answer (by the gateway's ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// Tool calls cut off before their arguments were whole.
    #[serde(default, rename = "toolCalls", skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// Everything the turn's log said from this event on (a run given again from its start:
    /// the cut run's messages, calls and results, the ended ones too).
    #[serde(default, rename = "fromSeq", skip_serializing_if = "Option::is_none")]
    pub from_seq: Option<i64>,
}

/// The body of a card event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CardEvent {
    /// The turn (or delegated child turn) whose answer it is.
    pub turn: String,
    pub card: Value,
}

/// A gateway event to log.
#[derive(Debug, Clone)]
pub enum GatewayEvent {
    Waiting(WaitingEvent),
    ClientWait(ClientWaitEvent),
    Resumed(ResumedEvent),
    Card(CardEvent),
    Cut(CutEvent),
}

impl GatewayEvent {
    pub fn name(&self) -> &'static str {
        match self {
            GatewayEvent::Waiting(_) => WAITING_EVENT,
            GatewayEvent::ClientWait(_) => CLIENT_WAIT_EVENT,
            GatewayEvent::Resumed(_) => RESUMED_EVENT,
            GatewayEvent::Card(_) => CARD_EVENT,
            GatewayEvent::Cut(_) => CUT_EVENT,
        }
    }

    /// The AG-UI event it is logged as: `CUSTOM`, with the body as its `value`.
    pub fn into_event(self) -> Result<Event, serde_json::Error> {
        let name = self.name().to_string();
        let value = match self {
            GatewayEvent::Waiting(body) => serde_json::to_value(body)?,
            GatewayEvent::ClientWait(body) => serde_json::to_value(body)?,
            GatewayEvent::Resumed(body) => serde_json::to_value(body)?,
            GatewayEvent::Card(body) => serde_json::to_value(body)?,
            GatewayEvent::Cut(body) => serde_json::to_value(body)?,
        };
        Ok(Event::Custom { name, value, subagent_run_id: None })
    }
}

/// The kind a log row of an event an agent's turn says is stored under. (Decision events are
/// written by the engine with [`EventKind::Resumed`] directly.)
pub fn kind_of(event: &Event) -> EventKind {
    match event {
        Event::RunStarted { .. } => EventKind::RunStarted,
        Event::RunFinished { .. } => EventKind::RunFinished,
        Event::RunError { .. } => EventKind::RunError,
        Event::StateSnapshot { .. } => EventKind::StateSnapshot,
        Event::Custom { name, .. } if name == WAITING_EVENT => EventKind::Waiting,
        Event::Custom { name, .. } if name == CLIENT_WAIT_EVENT => EventKind::ClientWait,
        _ => EventKind::Plain,
    }
}

/// Why a stored gateway event's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the event does not parse: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the event is not a CUSTOM event")]
    NotCustom,
}

/// The typed body of a stored gateway event (the `value` of its `CUSTOM`).
pub fn body_of<T: DeserializeOwned>(stored: &[u8]) -> Result<T, BodyError> {
    let envelope: Envelope = serde_json::from_slice(stored)?;
    match envelope.event {
        Event::Custom { value, .. } => Ok(serde_json::from_value(value)?),
        _ => Err(BodyError::NotCustom),
    }
}

/// What a [`EventKind::Plain`] row holds, where a stream treats it apart from the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainEvent {
    /// A `STATE_DELTA`: the board as the caller may see it (§7).
    StateDelta,
    /// A card: content (§3).
    Card,
    /// A `REASONING_*` event: the agent's thinking, content like its text.
    Reasoning,
    /// An `ACTIVITY_*` event (relayed from an upstream): content too.
    Activity,
    /// A cut event: what a cut answer said is withdrawn (rendered as a `MESSAGES_SNAPSHOT`).
    Cut,
    /// Anything else: sent as stored.
    Other,
}

/// Tells a plain row's event by its `type` (and a `CUSTOM`'s `name`), wherever they stand in
/// the body. Every stream asks this of every event it sends, so the body the gateway writes
/// (`{"type":"…",` first) is told by its first bytes alone; a `CUSTOM`, or a body in any other
/// shape, takes a typed read of the two fields, the rest skipped.
pub fn classify_plain(stored: &[u8]) -> PlainEvent {
    const HEAD: &[u8] = br#"{"type":""#;
    if let Some(rest) = stored.strip_prefix(HEAD) {
        if let Some(end) = memchr::memchr2(b'"', b'\\', rest) {
            let kind = &rest[..end];
            if rest[end] == b'"' && kind != b"CUSTOM" {
                return classify_kind(kind);
            }
        }
    }
    classify_plain_anywhere(stored)
}

/// The class of a plain event of `type` `kind` other than `CUSTOM`.
fn classify_kind(kind: &[u8]) -> PlainEvent {
    match kind {
        b"STATE_DELTA" => PlainEvent::StateDelta,
        kind if kind.starts_with(b"REASONING_") => PlainEvent::Reasoning,
        kind if kind.starts_with(b"ACTIVITY_") => PlainEvent::Activity,
        _ => PlainEvent::Other,
    }
}

/// [`classify_plain`] for a body in any shape: a typed read of `type` and `name`.
fn classify_plain_anywhere(stored: &[u8]) -> PlainEvent {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
        #[serde(default, borrow)]
        name: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_slice::<Head>(stored) {
        Ok(head) if head.kind == "CUSTOM" && head.name.as_deref() == Some(CARD_EVENT) => PlainEvent::Card,
        Ok(head) if head.kind == "CUSTOM" && head.name.as_deref() == Some(CUT_EVENT) => PlainEvent::Cut,
        Ok(head) if head.kind == "CUSTOM" => PlainEvent::Other,
        Ok(head) => classify_kind(head.kind.as_bytes()),
        Err(_) => PlainEvent::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::events::Envelope;

    fn stored(event: Event) -> Vec<u8> {
        serde_json::to_vec(&Envelope::new(event, 1_700_000_000_000)).expect("encodes")
    }

    #[test]
    fn gateway_events_are_stored_as_before() {
        let card = GatewayEvent::Card(CardEvent { turn: "t1".into(), card: serde_json::json!({"a": 1}) });
        let legacy = Event::Custom {
            name: "gateway.card".into(),
            value: serde_json::json!({ "turn": "t1", "card": {"a": 1} }),
            subagent_run_id: None,
        };
        assert_eq!(stored(card.into_event().expect("event")), stored(legacy));
        let wait = GatewayEvent::ClientWait(ClientWaitEvent { pending_tool_call_ids: vec!["c1".into()] });
        let legacy = Event::Custom {
            name: "gateway.client-wait-event".into(),
            value: serde_json::json!({ "pendingToolCallIds": ["c1"] }),
            subagent_run_id: None,
        };
        assert_eq!(stored(wait.into_event().expect("event")), stored(legacy));
    }

    #[test]
    fn plain_rows_are_told_apart_by_their_fields_not_their_order() {
        assert_eq!(classify_plain(br#"{"type":"STATE_DELTA","delta":[]}"#), PlainEvent::StateDelta);
        assert_eq!(classify_plain(br#"{"delta":[],"timestamp":1,"type":"STATE_DELTA"}"#), PlainEvent::StateDelta);
        assert_eq!(classify_plain(br#"{"value":{},"name":"gateway.card","type":"CUSTOM"}"#), PlainEvent::Card);
        assert_eq!(classify_plain(br#"{"type":"CUSTOM","name":"gateway.tick","value":{}}"#), PlainEvent::Other);
        assert_eq!(
            classify_plain(br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#),
            PlainEvent::Other
        );
        assert_eq!(classify_plain(b"not json"), PlainEvent::Other);
        assert_eq!(classify_plain(br#"{"type":"STATE_\u0044ELTA","delta":[]}"#), PlainEvent::StateDelta);
        // Told by the first bytes or by a full read, a body gets the same answer.
        for body in [
            &br#"{"type":"STATE_DELTA","delta":[]}"#[..],
            br#"{"type":"CUSTOM","name":"gateway.card","value":{}}"#,
            br#"{"type":"CUSTOM","value":{},"name":"gateway.card"}"#,
            br#"{"type":"ACTIVITY_DELTA","messageId":"a"}"#,
            br#"{"type":"REASONING_END","messageId":"r"}"#,
            br#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
            br#"{"type":"STATE_\u0044ELTA","delta":[]}"#,
            br#"{"type":"STATE_DELTA"#,
        ] {
            assert_eq!(classify_plain(body), classify_plain_anywhere(body), "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(classify_plain(br#"{"type":"REASONING_START","messageId":"r"}"#), PlainEvent::Reasoning);
        assert_eq!(
            classify_plain(br#"{"messageId":"r","delta":"x","type":"REASONING_MESSAGE_CONTENT"}"#),
            PlainEvent::Reasoning
        );
        assert_eq!(
            classify_plain(br#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"x","content":{}}"#),
            PlainEvent::Activity
        );
    }

    #[test]
    fn a_stored_body_reads_back_typed() {
        let body = stored(
            GatewayEvent::ClientWait(ClientWaitEvent { pending_tool_call_ids: vec!["c1".into(), "c2".into()] })
                .into_event()
                .expect("event"),
        );
        let read: ClientWaitEvent = body_of(&body).expect("reads");
        assert_eq!(read.pending_tool_call_ids, vec!["c1", "c2"]);
        assert!(body_of::<ClientWaitEvent>(br#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).is_err());
    }
}
