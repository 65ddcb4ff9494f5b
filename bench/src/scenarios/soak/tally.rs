//! The soak's token accounting: every token the scripted model sent each chat, against what the
//! chat's client received across its reconnects (the rules are in the soak module's doc).

use std::collections::HashMap;

use crate::error::Result;
use crate::scenarios::model::Scripted;
use crate::sse::Received;

/// The token accounting over every chat.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) finished: u64,
    pub(super) failed: Vec<(String, String)>,
    pub(super) sent: u64,
    pub(super) lost: u64,
    pub(super) duplicated: u64,
    pub(super) uncommitted: u64,
    pub(super) unknown: u64,
    pub(super) first_bad: Option<String>,
}

pub(super) fn tally(outcomes: &[(String, Result<Received>)], model: &Scripted) -> Tally {
    let mut tally = Tally::default();
    for (thread, outcome) in outcomes {
        let received = match outcome {
            Ok(received) => received,
            Err(error) => {
                tally.failed.push((thread.clone(), error.to_string()));
                continue;
            }
        };
        if let Err(error) = received.expect_finished(&format!("chat {thread}")) {
            tally.failed.push((thread.clone(), error.to_string()));
            continue;
        }
        tally.finished += 1;
        let mut arrived: HashMap<u64, u64> = HashMap::new();
        for token in &received.tokens {
            *arrived.entry(token.sent_us).or_default() += 1;
        }
        let answers = model.answers(thread);
        let (lost_before, dup_before, unknown_before) = (tally.lost, tally.duplicated, tally.unknown);
        let mut known = 0;
        for (n, answer) in answers.iter().enumerate() {
            tally.sent += answer.stamps.len() as u64;
            let replaced = n + 1 < answers.len();
            // The last stamp of this answer that arrived: everything before it must have too.
            let reached = answer.stamps.iter().rposition(|s| arrived.contains_key(s));
            for (i, stamp) in answer.stamps.iter().enumerate() {
                match arrived.get(stamp) {
                    Some(&times) => {
                        known += times;
                        tally.duplicated += times - 1;
                    }
                    None if replaced && reached.is_none_or(|r| i > r) => tally.uncommitted += 1,
                    None => tally.lost += 1,
                }
            }
        }
        tally.unknown += (received.tokens.len() as u64).saturating_sub(known);
        if tally.first_bad.is_none()
            && (tally.lost > lost_before || tally.duplicated > dup_before || tally.unknown > unknown_before)
        {
            tally.first_bad = Some(thread.clone());
        }
    }
    tally
}
