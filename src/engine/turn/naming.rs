//! How a turn names what it says: messages, tool calls, reasoning and activities are numbered
//! after the turn (`<turn>:m<n>`, `<turn>:c<n>`, …), and board notes after the thread's notes.
//! One marker per kind serves both ways: naming the next item, and reading the numbers a log
//! picked up already used, so the numbering goes on after them.

use crate::protocol::Event;

/// What a turn numbers, each with its own counter and marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Named {
    /// An assistant text message, or a message that holds only tool calls (`:m`).
    Message,
    ToolCall,
    ReasoningSpan,
    ReasoningMessage,
    /// An activity message: activities share the id space of text messages on the client,
    /// hence their own marker.
    Activity,
    /// A sub-agent an agent relays (an upstream's, `:s`): numbered after every one the turn's
    /// log holds, so a run again after a takeover never reuses an id the cut run closed.
    Subagent,
}

impl Named {
    /// What stands between the turn's id and the item's number.
    fn marker(self) -> &'static str {
        match self {
            Named::Message => ":m",
            Named::ToolCall => ":c",
            Named::ReasoningSpan => ":reasoning",
            Named::ReasoningMessage => ":thought",
            Named::Activity => ":a",
            Named::Subagent => ":s",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The turn's counters: how many of each kind it named, and the board's next note number.
#[derive(Debug)]
pub(super) struct Naming {
    turn_id: String,
    used: [u32; 6],
    next_note_no: i64,
}

impl Naming {
    pub(super) fn new(turn_id: &str) -> Naming {
        Naming { turn_id: turn_id.to_string(), used: [0; 6], next_note_no: 1 }
    }

    /// A new id of `kind`, numbered after the last one.
    pub(super) fn next(&mut self, kind: Named) -> String {
        self.used[kind.index()] += 1;
        self.id(kind, self.used[kind.index()])
    }

    /// The id of `kind` named last, if any was.
    pub(super) fn latest(&self, kind: Named) -> Option<String> {
        let used = self.used[kind.index()];
        (used > 0).then(|| self.id(kind, used))
    }

    fn id(&self, kind: Named, number: u32) -> String {
        format!("{}{}{number}", self.turn_id, kind.marker())
    }

    /// The next note's number, which is then used.
    pub(super) fn next_note_no(&mut self) -> i64 {
        let note_no = self.next_note_no;
        self.next_note_no += 1;
        note_no
    }

    pub(super) fn set_next_note_no(&mut self, next: i64) {
        self.next_note_no = next;
    }

    /// Reads the numbers an event of a log picked up used: the numbering goes on after the
    /// highest one.
    pub(super) fn observe(&mut self, event: &Event) {
        match event {
            Event::TextMessageStart { message_id, .. } => self.raise(Named::Message, message_id),
            Event::ToolCallStart { tool_call_id, parent_message_id, .. } => {
                // A message that holds only calls is numbered with the messages.
                if let Some(parent) = parent_message_id {
                    self.raise(Named::Message, parent);
                }
                self.raise(Named::ToolCall, tool_call_id);
            }
            Event::ReasoningStart { message_id, .. } => self.raise(Named::ReasoningSpan, message_id),
            Event::ReasoningMessageStart { message_id, .. } => self.raise(Named::ReasoningMessage, message_id),
            Event::ActivitySnapshot { message_id, .. } => self.raise(Named::Activity, message_id),
            Event::SubagentStarted { subagent_run_id, .. } => self.raise(Named::Subagent, subagent_run_id),
            _ => {}
        }
    }

    /// Counts `id` as used if it is one of this turn's of `kind` (an id named otherwise, by an
    /// upstream or another turn, counts as none).
    fn raise(&mut self, kind: Named, id: &str) {
        let number = id
            .strip_prefix(self.turn_id.as_str())
            .and_then(|rest| rest.strip_prefix(kind.marker()))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let used = &mut self.used[kind.index()];
        *used = (*used).max(number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbering_goes_on_after_the_highest_number_a_log_used() {
        let mut names = Naming::new("t");
        names.observe(&Event::ToolCallStart {
            tool_call_id: "t:c3".into(),
            tool_call_name: "x".into(),
            parent_message_id: Some("t:m2".into()),
            subagent_run_id: None,
        });
        names.observe(&Event::TextMessageStart {
            message_id: "other:m9".into(),
            role: None,
            name: None,
            subagent_run_id: None,
        });
        assert_eq!(names.next(Named::Message), "t:m3");
        assert_eq!(names.next(Named::ToolCall), "t:c4");
        assert_eq!(names.latest(Named::Activity), None);
        assert_eq!(names.next(Named::Activity), "t:a1");
        assert_eq!(names.latest(Named::Activity).as_deref(), Some("t:a1"));
    }
}
