//! The board (§7): the thread's notes as the state `{"board": {"notes": [...]}}`, the RFC 6902
//! patch that pins one more, and what each caller may see of it.
//!
//! Notes are stored in the order they were pinned and never change; the board is folded from
//! them: a note that supersedes another takes its place (a `replace` at its index), any other
//! is appended (an `add` at `/board/notes/-`). Each patch is applied with the `json-patch`
//! crate before it is logged, so a delta that would not reproduce the board never leaves.

use serde_json::{json, Value};

use crate::protocol::events::PatchOp;

/// The board folded from the thread's notes in pin order.
pub fn assemble(notes: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut board: Vec<Value> = Vec::new();
    for note in notes {
        match superseded_index(&board, &note) {
            Some(index) => board[index] = note,
            None => board.push(note),
        }
    }
    board
}

/// The board folded from notes as the store keeps them (JSON text, in pin order).
pub fn from_stored(notes: &[String]) -> Vec<Value> {
    assemble(notes.iter().filter_map(|note| serde_json::from_str(note).ok()))
}

/// The board as the thread's current branch sees it, from its notes and turns (read already).
pub fn current(notes: Vec<String>, turns: &[crate::store::TurnRow]) -> Vec<Value> {
    from_stored(&on_branch(notes, turns, &crate::store::branches::current(turns)))
}

/// The notes (as the store keeps them) a branch sees (§6): all but those pinned by a turn of
/// the thread that is not on `branch` — a sibling branch's notes are not this branch's board.
/// A note naming no turn of the thread (a delegated child's) stays with its thread.
pub fn on_branch(notes: Vec<String>, turns: &[crate::store::TurnRow], branch: &[crate::store::TurnRow]) -> Vec<String> {
    let off_branch: Vec<&str> =
        turns.iter().filter(|t| !branch.iter().any(|b| b.pk == t.pk)).map(|t| t.public_id.as_str()).collect();
    if off_branch.is_empty() {
        return notes;
    }
    notes
        .into_iter()
        .filter(|note| {
            let pinned_by =
                serde_json::from_str::<Value>(note).ok().and_then(|n| n["turn"].as_str().map(str::to_string));
            !pinned_by.is_some_and(|turn| off_branch.contains(&turn.as_str()))
        })
        .collect()
}

/// The editable state runs wrote (§7), from the text the store keeps; none written: empty.
pub fn stored_state(saved: Option<&str>) -> serde_json::Map<String, Value> {
    saved.and_then(|saved| serde_json::from_str(saved).ok()).unwrap_or_default()
}

/// The state a turn's log last showed its clients: its last `STATE_SNAPSHOT` with the
/// `STATE_DELTA`s after it applied (a delta that does not apply changes nothing, as in the
/// client). Only an object has keys to compare; anything else shows none.
pub fn last_shown_state(log: &[crate::store::StoredEvent]) -> serde_json::Map<String, Value> {
    use crate::protocol::events::Envelope;
    use crate::protocol::Event;
    let mut state = Value::Object(serde_json::Map::new());
    for stored in log {
        let Ok(envelope) = serde_json::from_slice::<Envelope>(&stored.body) else { continue };
        match envelope.event {
            Event::StateSnapshot { snapshot, .. } => state = snapshot,
            Event::StateDelta { delta, .. } => {
                let patch = serde_json::to_value(&delta)
                    .ok()
                    .and_then(|ops| serde_json::from_value::<json_patch::Patch>(ops).ok());
                if let Some(patch) = patch {
                    let mut next = state.clone();
                    if json_patch::patch(&mut next, &patch).is_ok() {
                        state = next;
                    }
                }
            }
            _ => {}
        }
    }
    match state {
        Value::Object(keys) => keys,
        _ => serde_json::Map::new(),
    }
}

/// Where on `board` the note it supersedes sits.
fn superseded_index(board: &[Value], note: &Value) -> Option<usize> {
    let old = note.get("supersedes")?.as_str()?;
    board.iter().position(|n| n["id"].as_str() == Some(old))
}

/// The patch that turns `board` into the board with `note` pinned, checked by applying it.
pub fn pin_patch(board: &[Value], note: &Value) -> Result<Vec<PatchOp>, String> {
    let op = match superseded_index(board, note) {
        Some(index) => PatchOp {
            op: "replace".into(),
            path: format!("/board/notes/{index}"),
            from: None,
            value: Some(note.clone()),
        },
        None => PatchOp { op: "add".into(), path: "/board/notes/-".into(), from: None, value: Some(note.clone()) },
    };
    let mut state = json!({ "board": { "notes": board } });
    let patch: json_patch::Patch =
        serde_json::from_value(json!([op])).map_err(|e| format!("the board patch is malformed: {e}"))?;
    json_patch::patch(&mut state, &patch).map_err(|e| format!("the board patch does not apply: {e}"))?;
    let expected = assemble(board.iter().cloned().chain([note.clone()]));
    if state["board"]["notes"] != json!(expected) {
        return Err("the board patch does not give the board".into());
    }
    Ok(vec![op])
}

/// What a caller may see of the board: its content at all (`threads:content`), and which
/// labels (`*`: every label).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clearance {
    pub content: bool,
    pub labels: Vec<String>,
}

impl Clearance {
    /// What this caller may see: content with `threads:content`, labels from its clearance.
    pub fn of(caller: &crate::caller::Caller) -> Clearance {
        Clearance { content: caller.scopes().may_read_content(), labels: caller.clearance().to_vec() }
    }

    /// Whether this caller sees the note whole (its text and tags).
    pub fn reads(&self, note: &Value) -> bool {
        self.lacking(note).is_none()
    }

    /// The first of the note's labels this caller lacks.
    fn lacking<'a>(&self, note: &'a Value) -> Option<&'a str> {
        if self.labels.iter().any(|l| l == "*") {
            return None;
        }
        note["labels"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .find(|label| !self.labels.iter().any(|l| l == label))
    }

    /// The note as this caller sees it: whole, or without its text and tags.
    pub fn show(&self, note: &Value) -> Value {
        match self.lacking(note) {
            None => note.clone(),
            Some(label) => json!({
                "id": note["id"], "kind": note["kind"], "agent": note["agent"], "createdAt": note["createdAt"],
                "redacted": true, "label": label,
            }),
        }
    }

    /// Whether any of the notes shows its text to this caller (a `board.read` audit row).
    pub fn reads_text(&self, notes: &[Value]) -> bool {
        self.content && notes.iter().any(|note| self.reads(note))
    }

    /// A state event as this caller sees it: `None` when it may not read content; otherwise
    /// with every note it may not read redacted (in a snapshot's list and in a patch's values).
    pub fn state_event(&self, event: &Value) -> Option<Value> {
        if !self.content {
            return None;
        }
        let mut event = event.clone();
        if let Some(notes) = event.pointer_mut("/snapshot/board/notes").and_then(Value::as_array_mut) {
            for note in notes.iter_mut() {
                *note = self.show(note);
            }
        }
        if let Some(ops) = event.get_mut("delta").and_then(Value::as_array_mut) {
            for op in ops.iter_mut() {
                let on_notes = op["path"].as_str().is_some_and(|p| p.starts_with("/board/notes/"));
                if let (true, Some(value)) = (on_notes, op.get_mut("value")) {
                    *value = self.show(value);
                }
            }
        }
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(id: &str, supersedes: Option<&str>, labels: &[&str]) -> Value {
        json!({ "id": id, "kind": "k", "tags": ["t"], "text": format!("text {id}"), "agent": "a",
                "createdAt": "2026-01-01T00:00:00.000Z", "supersedes": supersedes, "labels": labels })
    }

    #[test]
    fn a_superseding_note_replaces_the_old_one_in_place() {
        let board = assemble([note("1", None, &[]), note("2", None, &[])]);
        let newer = note("3", Some("1"), &[]);
        let patch = pin_patch(&board, &newer).expect("patch");
        assert_eq!((patch[0].op.as_str(), patch[0].path.as_str()), ("replace", "/board/notes/0"));
        let appended = pin_patch(&board, &note("4", None, &[])).expect("patch");
        assert_eq!((appended[0].op.as_str(), appended[0].path.as_str()), ("add", "/board/notes/-"));
        let folded = assemble([note("1", None, &[]), note("2", None, &[]), newer.clone()]);
        assert_eq!(folded, vec![newer, note("2", None, &[])]);
    }

    #[test]
    fn redaction_hides_text_and_tags_of_labels_the_caller_lacks() {
        let secret = note("1", None, &["hr"]);
        let outsider = Clearance { content: true, labels: vec!["sales".into()] };
        let shown = outsider.show(&secret);
        assert_eq!(
            shown,
            json!({ "id": "1", "kind": "k", "agent": "a", "createdAt": "2026-01-01T00:00:00.000Z",
                                  "redacted": true, "label": "hr" })
        );
        assert_eq!(Clearance { content: true, labels: vec!["hr".into()] }.show(&secret), secret);
        assert_eq!(Clearance { content: true, labels: vec!["*".into()] }.show(&secret), secret);
        let delta =
            json!({ "type": "STATE_DELTA", "delta": [{ "op": "add", "path": "/board/notes/-", "value": secret }] });
        let seen = outsider.state_event(&delta).expect("content").to_string();
        assert!(!seen.contains("text 1") && !seen.contains("\"t\""), "{seen}");
        assert_eq!(Clearance { content: false, labels: vec![] }.state_event(&delta), None);
        assert!(!outsider.reads_text(&[secret.clone()]));
    }
}
