//! A person's action on generative UI as a turn's input (SPEC §3, §6). The history check reads
//! a conversation user message by user message; an action turn has none, so before the check
//! the client's copy is read into that shape: an action in the middleware's form (a
//! `log_a2ui_event` call and its result, as the gateway shows a recorded action turn and as a
//! CopilotKit runtime in front sends a new one) stands where a user message would, under the
//! assistant message's id; a recorded action turn whose input the copy left out (a client that
//! kept only the answers) gets it back before its answer; a new action brought as
//! `forwardedProps.a2uiAction` goes last. The check then treats an action like any user
//! message — recorded ones must say what the record says — and nothing else is loosened: an
//! assistant message that is not an action still has to be one the gateway recorded.
//! What stands for an action is a user message only inside the check; the turn records the
//! action itself (its `client_input`) beside its words.

use std::collections::HashMap;

use serde_json::Value;

use crate::engine::conversation::{self, Activity};
use crate::ids;
use crate::protocol::a2ui;
use crate::protocol::input::{InputMessage, UserContent, UserMessage};
use crate::protocol::RunAgentInput;
use crate::store::{Store, StoreError, TurnRow};

/// The client's copy as the history check reads it, and the actions in it by the id of the
/// message that stands for each.
pub struct ReadCopy {
    pub messages: Vec<InputMessage>,
    pub actions: HashMap<String, Value>,
    /// The id of the stand-in for an action brought in `forwardedProps`: a name of the check's
    /// own, not the client's, so the turn records none and shows the gateway's (`<turn>:in`).
    pub forwarded: Option<String>,
}

fn stand_in(id: String, words: String) -> InputMessage {
    InputMessage::User(UserMessage { id, content: UserContent::Text(words), name: None })
}

/// Reads the run's messages (and `forwardedProps`) into the shape the history check reads.
pub fn read(input: &RunAgentInput, turns: &[TurnRow]) -> ReadCopy {
    let given = &input.messages;
    let mut messages = Vec::with_capacity(given.len() + 1);
    let mut actions = HashMap::new();
    let mut at = 0;
    while at < given.len() {
        if let Some((action, words)) = a2ui::action_at(given, at) {
            let id = given[at].id().to_string();
            actions.insert(id.clone(), action);
            messages.push(stand_in(id, words));
            at += 2;
            continue;
        }
        let message = &given[at];
        if let InputMessage::Assistant(_) = message {
            // An answer of a recorded action turn whose input the copy does not hold.
            let turn = ids::turn_of_message_id(message.id()).and_then(|id| turns.iter().find(|t| t.public_id == id));
            if let Some((turn, action)) = turn.and_then(|t| Some((t, conversation::action_of(t)?))) {
                let held = messages.iter().rev().find(|m| matches!(m, InputMessage::User(_))).is_some_and(|m| {
                    m.id() == ids::user_message_id(&turn.public_id)
                        || m.id() == turn.user_message_id
                        || matches!(m, InputMessage::User(u) if u.content.text() == turn.user_text)
                });
                if !held {
                    let id = ids::user_message_id(&turn.public_id);
                    actions.insert(id.clone(), action);
                    messages.push(stand_in(id, turn.user_text.clone()));
                }
            }
        }
        messages.push(message.clone());
        at += 1;
    }
    // A click sent as the renderer sends it; a runtime in front already put it in the messages
    // (and leaves `forwardedProps` as it was), so it is taken once.
    let newest_is_action = messages.last().is_some_and(|m| actions.contains_key(m.id()));
    let mut forwarded = None;
    if let (Some(action), false) = (a2ui::forwarded_action(input.forwarded_props.as_ref()), newest_is_action) {
        let id = format!("{}:action", input.run_id);
        actions.insert(id.clone(), action.clone());
        messages.push(stand_in(id.clone(), a2ui::action_text(action)));
        forwarded = Some(id);
    }
    ReadCopy { messages, actions, forwarded }
}

/// Whether the branch that ends at turn `head` showed the surface an action names: an A2UI
/// surface activity that draws it, or an activity message under that id.
pub async fn surface_shown(store: &dyn Store, thread: i64, head: i64, action: &Value) -> Result<bool, StoreError> {
    let Some(surface) = a2ui::surface_of(action) else { return Ok(false) };
    let shown = conversation::load_branch(store, thread, head, Activity::Shown).await?;
    Ok(shown.iter().any(|message| match message {
        InputMessage::Activity(activity) => {
            activity.id == surface
                || (activity.activity_type == a2ui::SURFACE_ACTIVITY
                    && a2ui::surfaces_drawn(&activity.content).contains(&surface))
        }
        _ => false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(messages: Value, forwarded: Value) -> RunAgentInput {
        serde_json::from_value(json!({
            "threadId": "th", "runId": "r2", "messages": messages, "forwardedProps": forwarded
        }))
        .expect("input parses")
    }

    #[test]
    fn an_action_stands_where_a_user_message_would() {
        let action = json!({"name": "go", "surfaceId": "s1"});
        let pair = a2ui::as_messages("m-x", &action, "did go");
        let mut messages = vec![json!({"id": "u1", "role": "user", "content": "hi"})];
        messages.extend(pair.iter().map(|m| serde_json::to_value(m).expect("json")));
        let read = read(&input(Value::Array(messages), json!({"a2uiAction": {"userAction": action}})), &[]);
        assert_eq!(read.messages.len(), 2, "the forwarded copy of the same click is not taken twice");
        assert_eq!(read.messages[1].id(), "m-x");
        assert_eq!(read.actions.get("m-x"), Some(&action));

        let forwarded = read_forwarded();
        assert_eq!(forwarded.messages.last().map(InputMessage::id), Some("r2:action"));
    }

    fn read_forwarded() -> ReadCopy {
        let messages = json!([{"id": "u1", "role": "user", "content": "hi"}]);
        read(&input(messages, json!({"a2uiAction": {"userAction": {"name": "go", "surfaceId": "s1"}}})), &[])
    }

    #[test]
    fn an_assistant_message_that_is_no_action_is_left_as_it_is() {
        let messages = json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a", "role": "assistant", "toolCalls": [
                {"id": "c", "type": "function", "function": {"name": "other", "arguments": "{}"}}
            ]},
            {"id": "r", "role": "tool", "toolCallId": "c", "content": "x"}
        ]);
        let read = read(&input(messages, json!({})), &[]);
        assert_eq!(read.messages.len(), 3);
        assert!(read.actions.is_empty());
    }
}
