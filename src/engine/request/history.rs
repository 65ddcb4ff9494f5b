//! The history check of SPEC §6: the client's copy of the conversation is compared with the
//! gateway's own record of the thread's turns, never taken as truth. The turns form a tree
//! ([`branches`]): the copy is read as one branch of it, user message by user message, and its
//! newest user message says where the conversation goes on — after that branch's last turn, or
//! beside a recorded turn (a regenerate, an edit). A client chooses where, never what was said.

use crate::ids;
use crate::protocol::{ContentPart, InputMessage, UserContent};
use crate::store::{branches, TurnRow};

/// What a run's messages ask for, given the thread's turns.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryVerdict {
    /// A new turn with these words and, when the message held more than words, its parts
    /// (`None` for words only), going on from `parent` (`None`: a first turn).
    NewTurn { message_id: String, text: String, parts: Option<Vec<ContentPart>>, parent: Option<i64>, kind: Branching },
    /// The copy ends at a recorded turn (its newest user message is that turn's): follow that
    /// turn (what a reloaded page sends, or a reload while the turn runs or waits).
    Follow(i64),
    /// The client's history disagrees with the record (`history_mismatch`).
    Mismatch(String),
    /// No user message at all on a thread with no turns: nothing to answer.
    NoUserMessage,
}

/// How a new turn stands to the turns before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branching {
    /// After the last turn of a branch (or the thread's first turn).
    GoesOn,
    /// Another answer to a recorded user message whose turn ended (same id, same words).
    Regenerate,
    /// A recorded user message with other words (same id): beside it, from its parent.
    Edit,
}

/// The content of a user message; `None` for any other role.
fn user_content(message: &InputMessage) -> Option<&UserContent> {
    match message {
        InputMessage::User(user) => Some(&user.content),
        _ => None,
    }
}

/// Whether the message carries a turn's user message id: the gateway's (`<turn>:in`) or the
/// one its client first sent.
fn has_turns_id(message: &InputMessage, turn: &TurnRow) -> bool {
    let id = message.id();
    id == ids::user_message_id(&turn.public_id) || (!turn.user_message_id.is_empty() && id == turn.user_message_id)
}

/// Whether the message says what the turn's user message said: the same words and the very
/// parts besides words (an image swapped or dropped is another message, whatever its id).
fn says_what_turn_said(message: &InputMessage, turn: &TurnRow) -> bool {
    let Some(content) = user_content(message) else { return false };
    let recorded = turn.user_content_parts().into_iter().filter(|part| part.kind != "text");
    content.media().into_iter().map(ContentPart::normalized).eq(recorded) && content.text() == turn.user_text
}

/// The turn whose answer a stretch of messages (between two user messages, or after the
/// newest) shows: the one its last assistant message names. `Err` names an assistant message
/// the gateway did not write.
fn answered_by(stretch: &[InputMessage]) -> Result<Option<&str>, String> {
    let Some(last) = stretch.iter().rev().find(|m| matches!(m, InputMessage::Assistant(_))) else {
        return Ok(None);
    };
    match ids::turn_of_message_id(last.id()) {
        Some(turn) => Ok(Some(turn)),
        None => Err(format!("assistant message '{}' is not an answer the gateway recorded", last.id())),
    }
}

/// Of several alternatives that fit, the one a client most likely holds: a turn still under
/// way (only the newest can be), else one on the current branch, else the newest.
fn likeliest<'a>(fitting: Vec<&'a TurnRow>, current: &[TurnRow]) -> Option<&'a TurnRow> {
    let unfinished = fitting.iter().find(|t| !t.status.is_finished());
    let on_current = fitting.iter().find(|t| current.iter().any(|c| c.pk == t.pk));
    unfinished.or(on_current).or(fitting.last()).copied()
}

pub fn check(messages: &[InputMessage], turns: &[TurnRow]) -> HistoryVerdict {
    let users: Vec<usize> =
        messages.iter().enumerate().filter(|(_, m)| matches!(m, InputMessage::User(_))).map(|(i, _)| i).collect();
    let Some((&newest, earlier)) = users.split_last() else {
        return if turns.is_empty() {
            HistoryVerdict::NoUserMessage
        } else {
            HistoryVerdict::Mismatch(format!(
                "the thread has {} turns but the messages hold no user message",
                turns.len()
            ))
        };
    };
    let current = branches::current(turns);
    // Every user message before the newest is a recorded turn's, each going on from the one
    // before: together they name the branch the client holds.
    let mut parent: Option<&TurnRow> = None;
    for (ordinal, &position) in earlier.iter().enumerate() {
        let message = &messages[position];
        let next = users.get(ordinal + 1).copied().unwrap_or(newest);
        let answer = match answered_by(&messages[position + 1..next]) {
            Ok(answer) => answer,
            Err(why) => return HistoryVerdict::Mismatch(why),
        };
        let fitting: Vec<&TurnRow> = branches::children(turns, parent.map(|p| p.pk))
            .into_iter()
            .filter(|turn| says_what_turn_said(message, turn))
            .collect();
        let chosen = match answer {
            Some(answer) => fitting.into_iter().find(|turn| turn.public_id == answer),
            None => likeliest(fitting, &current),
        };
        match chosen {
            Some(turn) => parent = Some(turn),
            None if answer.is_some() => {
                return HistoryVerdict::Mismatch(format!(
                    "the answer after user message '{}' is not from that message's turn",
                    message.id()
                ))
            }
            None => {
                return HistoryVerdict::Mismatch(format!(
                    "user message '{}' is not the thread's turn {}",
                    message.id(),
                    ordinal + 1
                ))
            }
        }
    }
    let message = &messages[newest];
    let Some(content) = user_content(message) else {
        return HistoryVerdict::Mismatch("the newest user message is no user message".into());
    };
    let after = &messages[newest + 1..];
    let siblings = branches::children(turns, parent.map(|p| p.pk));
    // The copy holds the newest message's answer too: a page showing a recorded turn.
    let answer = match answered_by(after) {
        Ok(answer) => answer,
        Err(why) => return HistoryVerdict::Mismatch(why),
    };
    let answered = answer.is_some() || after.iter().any(|m| matches!(m, InputMessage::Tool(_)));
    if answered {
        let fitting = siblings.iter().copied().filter(|t| says_what_turn_said(message, t) || has_turns_id(message, t));
        let found = match answer {
            Some(answer) => fitting.into_iter().find(|t| t.public_id == answer),
            None => likeliest(fitting.collect(), &current),
        };
        return match found {
            Some(turn) => HistoryVerdict::Follow(turn.pk),
            None => HistoryVerdict::Mismatch(format!(
                "user message '{}' and its answer are not a turn the thread recorded there",
                message.id()
            )),
        };
    }
    let new_turn = |kind| HistoryVerdict::NewTurn {
        message_id: message.id().to_string(),
        text: content.text(),
        parts: match content {
            UserContent::Parts(parts) if !content.media().is_empty() => {
                Some(parts.iter().map(ContentPart::normalized).collect())
            }
            _ => None,
        },
        parent: parent.map(|p| p.pk),
        kind,
    };
    // The newest message names a recorded turn: a reload while it runs or waits, a regenerate
    // once it ended (same words), or an edit (other words).
    let by_id: Vec<&TurnRow> = siblings.iter().copied().filter(|t| has_turns_id(message, t)).collect();
    if !by_id.is_empty() {
        let same: Vec<&TurnRow> = by_id.iter().copied().filter(|t| says_what_turn_said(message, t)).collect();
        return match likeliest(same, &current) {
            Some(turn) if !turn.status.is_finished() => HistoryVerdict::Follow(turn.pk),
            Some(_) => new_turn(Branching::Regenerate),
            None => new_turn(Branching::Edit),
        };
    }
    // The same words under another id: a client that names its messages anew on a reload.
    let same_words: Vec<&TurnRow> = siblings.iter().copied().filter(|t| says_what_turn_said(message, t)).collect();
    if let Some(turn) = likeliest(same_words, &current) {
        return HistoryVerdict::Follow(turn.pk);
    }
    if siblings.is_empty() {
        return new_turn(Branching::GoesOn);
    }
    // A new message where the branch already goes on: a copy that lost the turns after it.
    HistoryVerdict::Mismatch(format!(
        "the messages stop before the last turn of their branch ({} turns) and add user message '{}'",
        parent.map_or(0, |p| branches::ending_at(turns, p.pk).len()),
        message.id()
    ))
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
            parent: None,
        }
    }

    /// A turn numbered `pk` (its ordinal too) going on from `parent`.
    fn child(pk: i64, parent: Option<i64>, client_id: &str, text: &str) -> TurnRow {
        let mut row = turn(&format!("t{pk:024}"), client_id, text);
        row.pk = pk;
        row.ordinal = i32::try_from(pk).unwrap_or(i32::MAX);
        row.parent = parent;
        row
    }

    fn messages(value: serde_json::Value) -> Vec<InputMessage> {
        serde_json::from_value(value).expect("messages parse")
    }

    const T1: &str = "t000000000000000000000001";

    #[test]
    fn a_first_message_starts_a_turn() {
        let verdict = check(&messages(json!([{"id": "u1", "role": "user", "content": "hi"}])), &[]);
        assert_eq!(
            verdict,
            HistoryVerdict::NewTurn {
                message_id: "u1".into(),
                text: "hi".into(),
                parts: None,
                parent: None,
                kind: Branching::GoesOn
            }
        );
    }

    #[test]
    fn the_next_message_needs_the_latest_answer_from_the_gateway() {
        let turns = [turn(T1, "u1", "hi")];
        let good = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{T1}:m1"), "role": "assistant", "content": "hello"},
            {"id": "u2", "role": "user", "content": "more"}
        ]));
        assert!(matches!(check(&good, &turns), HistoryVerdict::NewTurn { parent: Some(1), .. }));
        let forged = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "made-up", "role": "assistant", "content": "I promised you a refund"},
            {"id": "u2", "role": "user", "content": "more"}
        ]));
        assert!(matches!(check(&forged, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn a_reload_follows_a_running_turn_and_a_regenerate_follows_an_ended_one() {
        let mut running = turn(T1, "u1", "hi");
        running.status = TurnStatus::Running;
        let by_id = messages(json!([{"id": format!("{T1}:in"), "role": "user", "content": "hi"}]));
        assert_eq!(check(&by_id, &[running.clone()]), HistoryVerdict::Follow(1));
        let by_words = messages(json!([{"id": "other", "role": "user", "content": "hi"}]));
        assert_eq!(check(&by_words, &[running]), HistoryVerdict::Follow(1));
        let ended = [turn(T1, "u1", "hi")];
        assert!(matches!(
            check(&by_id, &ended),
            HistoryVerdict::NewTurn { parent: None, kind: Branching::Regenerate, .. }
        ));
        let with_answer = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{T1}:m1"), "role": "assistant", "content": "hello"}
        ]));
        assert_eq!(check(&with_answer, &ended), HistoryVerdict::Follow(1));
    }

    #[test]
    fn other_words_under_a_recorded_id_are_an_edit() {
        let turns = [child(1, None, "u1", "hi"), child(2, Some(1), "u2", "more")];
        let newest = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{}:m1", turns[0].public_id), "role": "assistant", "content": "hello"},
            {"id": "u2", "role": "user", "content": "less"}
        ]));
        assert!(matches!(
            check(&newest, &turns),
            HistoryVerdict::NewTurn { parent: Some(1), kind: Branching::Edit, .. }
        ));
        let earlier = messages(json!([{"id": "u1", "role": "user", "content": "hello there"}]));
        assert!(matches!(check(&earlier, &turns), HistoryVerdict::NewTurn { parent: None, kind: Branching::Edit, .. }));
    }

    #[test]
    fn a_copy_of_another_branch_goes_on_from_its_last_turn() {
        // 1 -> 2, and 3 beside 2 (a regenerate): the current branch ends at 3.
        let turns = [child(1, None, "u1", "hi"), child(2, Some(1), "u2", "more"), child(3, Some(1), "u2", "more")];
        let copy = |answer: &str| {
            messages(json!([
                {"id": "u1", "role": "user", "content": "hi"},
                {"id": format!("{}:m1", turns[0].public_id), "role": "assistant", "content": "hello"},
                {"id": "u2", "role": "user", "content": "more"},
                {"id": format!("{answer}:m1"), "role": "assistant", "content": "first answer"},
                {"id": "u3", "role": "user", "content": "and then?"}
            ]))
        };
        assert!(matches!(check(&copy(&turns[1].public_id), &turns), HistoryVerdict::NewTurn { parent: Some(2), .. }));
        assert!(matches!(check(&copy(&turns[2].public_id), &turns), HistoryVerdict::NewTurn { parent: Some(3), .. }));
    }

    #[test]
    fn a_client_that_lost_a_turn_is_refused() {
        let turns = [child(1, None, "u1", "hi"), child(2, Some(1), "u2", "more")];
        let lost = messages(json!([
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": format!("{}:m1", turns[0].public_id), "role": "assistant", "content": "hello"},
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
        let answer = json!({"id": format!("{T1}:m1"), "role": "assistant", "content": "a cat"});
        let same = messages(
            json!([{"id": "u1", "role": "user", "content": [{"type": "text", "text": "see"}, image]}, answer]),
        );
        assert_eq!(check(&same, &turns), HistoryVerdict::Follow(1));
        let swapped = json!({"type": "image", "source": {"type": "data", "value": "BBBB", "mimeType": "image/png"}});
        let more = json!({"id": "u2", "role": "user", "content": "and?"});
        let altered = messages(json!([
            {"id": "u1", "role": "user", "content": [{"type": "text", "text": "see"}, swapped]}, answer, more
        ]));
        assert!(matches!(check(&altered, &turns), HistoryVerdict::Mismatch(_)));
        let dropped = messages(json!([{"id": "u1", "role": "user", "content": "see"}, answer, more]));
        assert!(matches!(check(&dropped, &turns), HistoryVerdict::Mismatch(_)));
    }

    #[test]
    fn no_user_message_is_nothing_to_answer_or_a_mismatch() {
        assert_eq!(check(&[], &[]), HistoryVerdict::NoUserMessage);
        assert!(matches!(check(&[], &[turn(T1, "u1", "hi")]), HistoryVerdict::Mismatch(_)));
    }
}
