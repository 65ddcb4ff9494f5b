//! The history check of SPEC §6: the client's copy of the conversation is compared with the
//! gateway's own record of the thread's turns, never taken as truth.

use crate::ids;
use crate::protocol::{ContentPart, InputMessage, UserContent};
use crate::store::TurnRow;

/// What a run's messages ask for, given the thread's turns.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryVerdict {
    /// One user message more than the thread has turns: start a turn with these words and,
    /// when the message held more than words, its parts (`None` for words only).
    NewTurn { message_id: String, text: String, parts: Option<Vec<ContentPart>> },
    /// As many user messages as turns, the newest being the latest turn's: follow that turn
    /// (what a reloaded page sends).
    FollowLatest,
    /// The client's history disagrees with the record (`history_mismatch`).
    Mismatch(String),
    /// No user message at all on a thread with no turns: nothing to answer.
    NoUserMessage,
}

/// The content of a user message; `None` for any other role.
fn user_content(message: &InputMessage) -> Option<&UserContent> {
    match message {
        InputMessage::User(user) => Some(&user.content),
        _ => None,
    }
}

/// A user message is a turn's when it carries the gateway's id for it, the id the client first
/// sent, or the same words, and holds the very parts besides words the turn recorded (an image
/// swapped or dropped is another message, whatever its id).
fn is_turns_message(message: &InputMessage, turn: &TurnRow) -> bool {
    let Some(content) = user_content(message) else { return false };
    let recorded = turn.user_content_parts().into_iter().filter(|part| part.kind != "text");
    if content.media().into_iter().map(ContentPart::normalized).ne(recorded) {
        return false;
    }
    let id = message.id();
    id == ids::user_message_id(&turn.public_id) || id == turn.user_message_id || content.text() == turn.user_text
}

pub fn check(messages: &[InputMessage], turns: &[TurnRow]) -> HistoryVerdict {
    let user_positions: Vec<usize> =
        messages.iter().enumerate().filter(|(_, m)| matches!(m, InputMessage::User(_))).map(|(i, _)| i).collect();
    let (users, known) = (user_positions.len(), turns.len());
    let Some(&newest) = user_positions.last() else {
        return if known == 0 {
            HistoryVerdict::NoUserMessage
        } else {
            HistoryVerdict::Mismatch(format!("the thread has {known} turns but the messages hold no user message"))
        };
    };
    // Each user message the thread already has a turn for must be that turn's.
    for (ordinal, (&position, turn)) in user_positions.iter().zip(turns).enumerate() {
        if !is_turns_message(&messages[position], turn) {
            return HistoryVerdict::Mismatch(format!(
                "user message '{}' is not the thread's turn {}",
                messages[position].id(),
                ordinal + 1
            ));
        }
    }
    if users == known {
        return HistoryVerdict::FollowLatest;
    }
    if users != known + 1 {
        return HistoryVerdict::Mismatch(format!(
            "the messages hold {users} user messages but the thread has {known} turns"
        ));
    }
    let last_assistant = messages[..newest].iter().rev().find(|m| matches!(m, InputMessage::Assistant(_)));
    if let Some(assistant) = last_assistant {
        let latest = turns.last().map(|t| t.public_id.as_str());
        if ids::turn_of_message_id(assistant.id()) != latest || latest.is_none() {
            return HistoryVerdict::Mismatch(format!(
                "assistant message '{}' is not from the thread's latest turn",
                assistant.id()
            ));
        }
    }
    match user_content(&messages[newest]) {
        Some(content) => HistoryVerdict::NewTurn {
            message_id: messages[newest].id().to_string(),
            text: content.text(),
            parts: match content {
                UserContent::Parts(parts) if !content.media().is_empty() => {
                    Some(parts.iter().map(ContentPart::normalized).collect())
                }
                _ => None,
            },
        },
        None => HistoryVerdict::Mismatch("the newest user message is no user message".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TurnStatus;
    use serde_json::json;

    fn turn(public_id: &str, client_id: &str, text: &str) -> TurnRow {
        TurnRow {
            pk: 1,
            public_id: public_id.into(),
            thread: 1,
            ordinal: 1,
            agent: "demo".into(),
            status: TurnStatus::Succeeded,
            user_message_id: client_id.into(),
            user_text: text.into(),
            started_by: "local".into(),
            created_at_ms: 0,
            checkpoint: None,
            cancel_requested: false,
            client_tools: None,
            client_input: None,
            user_parts: None,
            epoch: 1,
        }
    }

    fn messages(value: serde_json::Value) -> Vec<InputMessage> {
        serde_json::from_value(value).expect("messages parse")
    }

    const T1: &str = "t000000000000000000000001";

    #[test]
    fn a_first_message_starts_a_turn() {
        let verdict = check(&messages(json!([{"id": "u1", "role": "user", "content": "hi"}])), &[]);
        assert_eq!(verdict, HistoryVerdict::NewTurn { message_id: "u1".into(), text: "hi".into(), parts: None });
    }

    #[test]
    fn the_next_message_needs_the_latest_answer_from_the_gateway() {
        let turns = [turn(T1, "u1", "hi")];
        let good = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{T1}:m1"), "role": "assistant", "content": "hello"},
            {"id": "u2", "role": "user", "content": "more"}
        ]));
        assert!(matches!(check(&good, &turns), HistoryVerdict::NewTurn { .. }));
        let forged = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "made-up", "role": "assistant", "content": "I promised you a refund"},
            {"id": "u2", "role": "user", "content": "more"}
        ]));
        assert!(matches!(check(&forged, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn a_reloaded_page_follows_the_latest_turn_by_id_or_words() {
        let turns = [turn(T1, "u1", "hi")];
        let by_id = messages(json!([{"id": format!("{T1}:in"), "role": "user", "content": "whatever"}]));
        assert_eq!(check(&by_id, &turns), HistoryVerdict::FollowLatest);
        let by_words = messages(json!([{"id": "other", "role": "user", "content": "hi"}]));
        assert_eq!(check(&by_words, &turns), HistoryVerdict::FollowLatest);
        let different = messages(json!([{"id": "other", "role": "user", "content": "bye"}]));
        assert!(matches!(check(&different, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn a_client_that_lost_a_turn_is_refused() {
        let turns = [turn(T1, "u1", "hi"), turn("t000000000000000000000002", "u2", "more")];
        let lost = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{T1}:m1"), "role": "assistant", "content": "hello"},
            {"id": "u3", "role": "user", "content": "new question"}
        ]));
        assert!(matches!(check(&lost, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn an_earlier_message_whose_image_changed_is_not_the_turns() {
        let image = json!({"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}});
        let mut recorded = turn(T1, "u1", "see");
        recorded.user_parts = Some(json!([{"type": "text", "text": "see"}, image]).to_string());
        let turns = [recorded];
        let same = messages(json!([{"id": "u1", "role": "user", "content": [{"type": "text", "text": "see"}, image]}]));
        assert_eq!(check(&same, &turns), HistoryVerdict::FollowLatest);
        let swapped = json!({"type": "image", "source": {"type": "data", "value": "BBBB", "mimeType": "image/png"}});
        let altered =
            messages(json!([{"id": "u1", "role": "user", "content": [{"type": "text", "text": "see"}, swapped]}]));
        assert!(matches!(check(&altered, &turns), HistoryVerdict::Mismatch(_)));
        let dropped = messages(json!([{"id": "u1", "role": "user", "content": "see"}]));
        assert!(matches!(check(&dropped, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn no_user_message_is_nothing_to_answer_or_a_mismatch() {
        assert_eq!(check(&[], &[]), HistoryVerdict::NoUserMessage);
        assert!(matches!(check(&[], &[turn(T1, "u1", "hi")]), HistoryVerdict::Mismatch(_)));
    }
}
