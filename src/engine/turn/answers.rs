//! The turn's answers as they are sent: the tenant's AI label leads the first piece of every
//! text message (and an interrupt's question), and the latest answer's text is kept as its
//! agent wrote it, for its card ([`super::cards`]).

#[derive(Debug, Default)]
pub(super) struct Answers {
    /// The tenant's AI label (never an empty one).
    ai_label: Option<String>,
    /// Messages whose first content has not been sent yet (the AI label goes there).
    unlabelled: Vec<String>,
    /// The latest answer's message id and its text as the agent wrote it.
    latest: (String, String),
}

impl Answers {
    pub(super) fn new(ai_label: Option<String>) -> Answers {
        Answers { ai_label: ai_label.filter(|l| !l.is_empty()), ..Answers::default() }
    }

    /// The message `message_id` is opened: the AI label goes before its first piece.
    pub(super) fn opened(&mut self, message_id: String) {
        self.unlabelled.push(message_id);
    }

    /// A piece of the answer `message_id` as it is sent: the AI label leads the message's first
    /// piece. The piece is kept as the agent wrote it.
    pub(super) fn piece(&mut self, message_id: &str, delta: &str) -> String {
        if self.latest.0 != message_id {
            self.latest = (message_id.to_string(), String::new());
        }
        self.latest.1.push_str(delta);
        match self.unlabelled.iter().position(|m| m == message_id) {
            Some(index) => {
                self.unlabelled.swap_remove(index);
                self.labelled(delta.to_string())
            }
            None => delta.to_string(),
        }
    }

    /// The message `message_id` ended: no label goes into it any more.
    pub(super) fn ended(&mut self, message_id: &str) {
        self.unlabelled.retain(|m| m != message_id);
    }

    /// The messages awaiting their first piece were cut off: none gets a label any more.
    pub(super) fn forget_unlabelled(&mut self) {
        self.unlabelled.clear();
    }

    /// `text` led by the tenant's AI label, when it has one.
    pub(super) fn labelled(&self, text: String) -> String {
        match &self.ai_label {
            Some(label) => format!("{label}{text}"),
            None => text,
        }
    }

    /// The text of the latest answer, as its agent wrote it.
    pub(super) fn latest_text(&self) -> &str {
        &self.latest.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_leads_only_the_first_piece_and_the_text_is_kept_unlabelled() {
        let mut answers = Answers::new(Some("[AI] ".into()));
        answers.opened("t:m1".into());
        assert_eq!(answers.piece("t:m1", "Hel"), "[AI] Hel");
        assert_eq!(answers.piece("t:m1", "lo"), "lo");
        assert_eq!(answers.latest_text(), "Hello");
    }
}
