//! The conversation as AG-UI messages, folded from the thread's turns and their logs: what
//! `GET /v1/threads/{thread}/messages` returns and what a client loads after a reload. A user
//! message keeps the id its client gave it (so a client that restates the conversation, as a
//! `MESSAGES_SNAPSHOT` does, finds its own message again), or `<turn>:in` when an earlier turn
//! of the thread already used that id; answers have the gateway's ids (`<turn>:m<n>`).
//! A conversation is one branch of the thread's turns (§6): the current one unless a turn is
//! named.
//!
//! Activity (generative UI: `ACTIVITY_SNAPSHOT` / `ACTIVITY_DELTA`, SPEC §3) is folded into a
//! reader's view as `role: "activity"` messages, at the place its first snapshot took in the
//! log, holding its last state (later snapshots replace it unless `replace` is `false`, deltas
//! are applied as JSON Patch; a delta that does not apply is skipped, as the official client
//! skips it). An agent's view leaves activity out: it is what a person was shown, not what was
//! said, and AG-UI clients never send it back either.

use serde_json::Value;

use crate::ids;
use crate::protocol::events::{Envelope, PatchOp, ToolResultContent};
use crate::protocol::input::{
    ActivityMessage, AssistantMessage, FunctionCall, ToolCall, ToolMessage, UserContent, UserMessage,
};
use crate::protocol::{Event, InputMessage};
use crate::store::{branches, Store, StoreError, StoredEvent, TurnRow};

/// Whether a conversation holds the activity its turns showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// A reader's view with the content permission: activity messages at their place.
    Shown,
    /// What an agent is given, and any view without content: the conversation proper.
    Left,
}

impl Activity {
    /// Activity is content (§2.2): shown only to a caller who may read content.
    pub fn for_content(may_read_content: bool) -> Activity {
        if may_read_content {
            Activity::Shown
        } else {
            Activity::Left
        }
    }
}

/// The conversation of the thread's current branch.
pub async fn load(store: &dyn Store, thread: i64, activity: Activity) -> Result<Vec<InputMessage>, StoreError> {
    let turns = store.thread_turns(thread).await?;
    fold_branch(store, &branches::current(&turns), None, activity).await
}

/// The conversation of the branch that ends at turn `head` (a primary key).
pub async fn load_branch(
    store: &dyn Store,
    thread: i64,
    head: i64,
    activity: Activity,
) -> Result<Vec<InputMessage>, StoreError> {
    let turns = store.thread_turns(thread).await?;
    fold_branch(store, &branches::ending_at(&turns, head), None, activity).await
}

/// The conversation of the turns of `turn`'s branch before it: what its agent is given (no
/// activity).
pub async fn load_before(store: &dyn Store, thread: i64, turn: &str) -> Result<Vec<InputMessage>, StoreError> {
    let turns = store.thread_turns(thread).await?;
    let Some(head) = turns.iter().find(|t| t.public_id == turn) else { return Ok(Vec::new()) };
    let mut branch = branches::ending_at(&turns, head.pk);
    branch.pop();
    fold_branch(store, &branch, None, Activity::Left).await
}

/// The conversation as it stood just before event `before_seq` of turn `turn`: the earlier
/// turns of its branch whole, then the turn's user message and what its log says up to that
/// event. What a run that opens at that event restates (`MESSAGES_SNAPSHOT`): a pure function of
/// the log, so a reconnect renders it again exactly, and it never repeats what the run streams
/// after it.
pub async fn load_at(
    store: &dyn Store,
    thread: i64,
    turn: i64,
    before_seq: i64,
    activity: Activity,
) -> Result<Vec<InputMessage>, StoreError> {
    let turns = store.thread_turns(thread).await?;
    load_at_in(store, &turns, turn, before_seq, activity).await
}

/// [`load_at`] on the thread's turns as a caller read them already.
pub async fn load_at_in(
    store: &dyn Store,
    turns: &[TurnRow],
    turn: i64,
    before_seq: i64,
    activity: Activity,
) -> Result<Vec<InputMessage>, StoreError> {
    fold_branch(store, &branches::ending_at(turns, turn), Some(before_seq), activity).await
}

/// Folds a branch's turns; the last one's log only before `last_before_seq` when given.
async fn fold_branch(
    store: &dyn Store,
    branch: &[TurnRow],
    last_before_seq: Option<i64>,
    activity: Activity,
) -> Result<Vec<InputMessage>, StoreError> {
    let mut messages = Vec::new();
    for (place, row) in branch.iter().enumerate() {
        let before = last_before_seq.filter(|_| place + 1 == branch.len());
        // A log's first event is its seq 1: before it there is nothing to read (a new turn's
        // opening restates the turns before it alone).
        let mut events = match before {
            Some(before_seq) if before_seq <= 1 => Vec::new(),
            _ => super::log::read_log(store, row.pk).await?,
        };
        if let Some(before_seq) = before {
            events.retain(|event| event.seq < before_seq);
        }
        fold_turn(&mut messages, row, &events, activity);
    }
    Ok(messages)
}

/// The person's action a turn started with (SPEC §3), when it started with one rather than a
/// user message: kept with the turn's client input.
pub fn action_of(turn: &TurnRow) -> Option<Value> {
    let input: super::turn::ClientInput = serde_json::from_str(turn.client_input.as_deref()?).ok()?;
    input.action
}

/// Appends one turn's messages: the user's (or the action it started with), then what the log says the agent answered (and,
/// when shown, the activity it showed; an earlier turn's activity it updated is updated where
/// it stands).
pub fn fold_turn(messages: &mut Vec<InputMessage>, turn: &TurnRow, events: &[StoredEvent], activity: Activity) {
    let client_id = &turn.user_message_id;
    let id = if client_id.is_empty() || messages.iter().any(|m| m.id() == client_id) {
        ids::user_message_id(&turn.public_id)
    } else {
        client_id.clone()
    };
    if let Some(action) = action_of(turn) {
        // A person's action: shown as the A2UI middleware puts it in a conversation, so an
        // agent reads it (and a client holds it) as it would without the gateway.
        messages.extend(crate::protocol::a2ui::as_messages(&id, &action, &turn.user_text));
    } else {
        messages.push(InputMessage::User(UserMessage {
            id,
            // A message with parts besides words is shown with them, as the client sent it.
            content: match turn.user_content_parts() {
                parts if parts.is_empty() => UserContent::Text(turn.user_text.clone()),
                parts => UserContent::Parts(parts),
            },
            name: None,
        }));
    }
    // Where each message and tool call of this turn began, for a cut event (§4.6) that
    // withdraws what a run said from a point on; kept only when the log holds one.
    let mut born: Option<Vec<(String, i64)>> = events.iter().any(is_cut).then(Vec::new);
    for stored in events {
        let Ok(envelope) = serde_json::from_slice::<Envelope>(&stored.body) else {
            continue;
        };
        if let Some(born) = born.as_mut() {
            if let Some(id) = begun_by(&envelope.event) {
                born.push((id.to_string(), stored.seq));
            }
        }
        match envelope.event {
            Event::Custom { name, value, .. } if name == super::log::events::CUT_EVENT => {
                let Ok(cut) = serde_json::from_value::<super::log::events::CutEvent>(value) else { continue };
                let mut withdrawn: std::collections::HashSet<String> =
                    cut.messages.into_iter().chain(cut.tool_calls).collect();
                if let (Some(from_seq), Some(born)) = (cut.from_seq, born.as_ref()) {
                    withdrawn.extend(born.iter().filter(|(_, seq)| *seq >= from_seq).map(|(id, _)| id.clone()));
                }
                withdraw(messages, &withdrawn);
            }
            Event::TextMessageStart { message_id, .. } => {
                messages.push(InputMessage::Assistant(AssistantMessage {
                    id: message_id,
                    content: Some(String::new()),
                    tool_calls: None,
                    name: None,
                }));
            }
            Event::TextMessageContent { message_id, delta, .. } => {
                if let Some(InputMessage::Assistant(message)) = find(messages, &message_id) {
                    message.content.get_or_insert_with(String::new).push_str(&delta);
                }
            }
            Event::ToolCallStart { tool_call_id, tool_call_name, parent_message_id, .. } => {
                let call = ToolCall {
                    id: tool_call_id.clone(),
                    kind: "function".into(),
                    function: FunctionCall { name: tool_call_name, arguments: String::new() },
                };
                let parent = parent_message_id.as_deref().unwrap_or(&tool_call_id).to_string();
                match find(messages, &parent) {
                    Some(InputMessage::Assistant(message)) => {
                        message.tool_calls.get_or_insert_with(Vec::new).push(call)
                    }
                    _ => messages.push(InputMessage::Assistant(AssistantMessage {
                        id: parent,
                        content: None,
                        tool_calls: Some(vec![call]),
                        name: None,
                    })),
                }
            }
            Event::ToolCallArgs { tool_call_id, delta, .. } => {
                let call = messages.iter_mut().rev().find_map(|m| match m {
                    InputMessage::Assistant(a) => a.tool_calls.as_mut()?.iter_mut().find(|c| c.id == tool_call_id),
                    _ => None,
                });
                if let Some(call) = call {
                    call.function.arguments.push_str(&delta);
                }
            }
            Event::ToolCallResult { message_id, tool_call_id, content, .. } => {
                // A client's result recorded at its decision (below) is not repeated.
                if has_result(messages, &tool_call_id) {
                    continue;
                }
                let content = content.to_value();
                messages.push(InputMessage::Tool(ToolMessage { id: message_id, content, tool_call_id, error: None }));
            }
            // The results a client sent for its (frontend) tool calls, where the turn went on.
            Event::Custom { name, value, .. } if name == super::log::events::RESUMED_EVENT => {
                let results: std::collections::BTreeMap<String, ToolResultContent> =
                    serde_json::from_value(value["toolResults"].clone()).unwrap_or_default();
                for (tool_call_id, content) in results {
                    if !has_result(messages, &tool_call_id) {
                        messages.push(InputMessage::Tool(ToolMessage {
                            id: format!("{tool_call_id}:result"),
                            content: content.to_value(),
                            tool_call_id,
                            error: None,
                        }));
                    }
                }
            }
            Event::ActivitySnapshot { message_id, activity_type, content, replace, .. }
                if activity == Activity::Shown =>
            {
                show_activity(messages, message_id, activity_type, content, replace.unwrap_or(true))
            }
            Event::ActivityDelta { message_id, activity_type, patch, .. } if activity == Activity::Shown => {
                update_activity(messages, &message_id, activity_type, &patch)
            }
            _ => {}
        }
    }
}

/// An `ACTIVITY_SNAPSHOT` as the official client applies it: a new message at the end; an
/// existing one (of any role) replaced, unless `replace` is `false`.
fn show_activity(
    messages: &mut Vec<InputMessage>,
    id: String,
    activity_type: String,
    content: serde_json::Map<String, Value>,
    replace: bool,
) {
    let message = InputMessage::Activity(ActivityMessage { id, activity_type, content });
    match messages.iter().position(|m| m.id() == message.id()) {
        None => messages.push(message),
        Some(place) if replace => messages[place] = message,
        Some(_) => {}
    }
}

/// An `ACTIVITY_DELTA` as the official client applies it: the patch on the activity's content,
/// whole or not at all; a delta of no activity message changes nothing.
fn update_activity(messages: &mut [InputMessage], id: &str, activity_type: String, patch: &[PatchOp]) {
    let Some(InputMessage::Activity(message)) = find(messages, id) else { return };
    let Ok(patch) = serde_json::to_value(patch).and_then(serde_json::from_value::<json_patch::Patch>) else {
        return;
    };
    let mut content = Value::Object(message.content.clone());
    if json_patch::patch(&mut content, &patch).is_err() {
        return;
    }
    if let Value::Object(content) = content {
        message.content = content;
        message.activity_type = activity_type;
    }
}

/// Whether a stored event is a cut event (told by its bytes: most logs hold none).
fn is_cut(stored: &StoredEvent) -> bool {
    stored.kind == crate::store::EventKind::Plain
        && memchr::memmem::find(&stored.body, super::log::events::CUT_EVENT.as_bytes()).is_some()
}

/// The message or tool call an event begins, by the id a cut event names it by.
fn begun_by(event: &Event) -> Option<&str> {
    match event {
        Event::TextMessageStart { message_id, .. }
        | Event::ToolCallResult { message_id, .. }
        | Event::ActivitySnapshot { message_id, .. } => Some(message_id),
        Event::ToolCallStart { tool_call_id, .. } => Some(tool_call_id),
        _ => None,
    }
}

/// Leaves out of the conversation the messages and tool calls a cut withdrew (with the results
/// of those calls); a message left with neither words nor calls goes too.
fn withdraw(messages: &mut Vec<InputMessage>, withdrawn: &std::collections::HashSet<String>) {
    if withdrawn.is_empty() {
        return;
    }
    messages.retain_mut(|message| match message {
        InputMessage::User(_) => true,
        InputMessage::Tool(tool) => !withdrawn.contains(&tool.id) && !withdrawn.contains(&tool.tool_call_id),
        InputMessage::Assistant(assistant) => {
            let mut touched = withdrawn.contains(&assistant.id);
            if touched {
                assistant.content = None;
            }
            if let Some(calls) = assistant.tool_calls.as_mut() {
                let before = calls.len();
                calls.retain(|call| !withdrawn.contains(&call.id));
                touched |= calls.len() != before;
                if calls.is_empty() {
                    assistant.tool_calls = None;
                }
            }
            !touched || assistant.content.as_deref().is_some_and(|c| !c.is_empty()) || assistant.tool_calls.is_some()
        }
        other => !withdrawn.contains(other.id()),
    });
}

fn has_result(messages: &[InputMessage], tool_call_id: &str) -> bool {
    messages.iter().any(|m| matches!(m, InputMessage::Tool(tool) if tool.tool_call_id == tool_call_id))
}

fn find<'a>(messages: &'a mut [InputMessage], id: &str) -> Option<&'a mut InputMessage> {
    messages.iter_mut().rev().find(|m| m.id() == id)
}
