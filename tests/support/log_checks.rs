//! Test support: what every turn's log must look like, whatever happened to its runners.
//!
//! A log is sealed by its end: its sequence numbers run 1, 2, 3… without a gap or a repeat,
//! it holds at most one terminal event (`RUN_FINISHED` or `RUN_ERROR`), and nothing follows it.
//! Checked on every turn a crash test touches, so "a second runner appended after the end" or
//! "two runners both ended the turn" fails the test that caused it.

/// Event kinds as stored (`events.kind`): 2 `RUN_FINISHED`, 3 `RUN_ERROR`.
const TERMINAL_KINDS: [i16; 2] = [2, 3];

/// Why a turn's log `(seq, kind)` (in seq order) breaks the rules, or `None` when it holds.
/// `finished`: the turn's row says it ended, so its log must end with its one terminal event.
#[allow(dead_code)]
pub fn seal_violation(log: &[(i64, i16)], finished: bool) -> Option<String> {
    for (index, (seq, _)) in log.iter().enumerate() {
        if *seq != index as i64 + 1 {
            return Some(format!("seq {seq} at position {} (a gap or a repeat)", index + 1));
        }
    }
    let terminals: Vec<i64> =
        log.iter().filter(|(_, kind)| TERMINAL_KINDS.contains(kind)).map(|(seq, _)| *seq).collect();
    match terminals.as_slice() {
        [] if finished => Some("the turn ended but its log holds no terminal event".into()),
        [] => None,
        [only] if *only == log.len() as i64 => None,
        [only] => Some(format!("events after the terminal event at seq {only} (the log ends at {})", log.len())),
        many => Some(format!("{} terminal events, at seqs {many:?}", many.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_judged_by_its_end() {
        assert_eq!(seal_violation(&[(1, 1), (2, 0), (3, 2)], true), None);
        assert_eq!(seal_violation(&[(1, 1), (2, 0)], false), None);
        assert!(seal_violation(&[(1, 1), (2, 0)], true).is_some());
        assert!(seal_violation(&[(1, 1), (2, 2), (3, 0), (4, 2)], true).is_some());
        assert!(seal_violation(&[(1, 1), (2, 2), (3, 0)], true).is_some());
        assert!(seal_violation(&[(1, 1), (3, 2)], true).is_some());
    }
}

/// A turn's whole log as stored, `(seq, kind, body)` in seq order: the rows logged before
/// segments and every segment's events (decoded by the gateway's own reader).
#[allow(dead_code)]
pub async fn stored_log(pool: &sqlx::PgPool, turn: i64) -> Vec<(i64, i16, String)> {
    use sqlx::Row;
    let mut log: Vec<(i64, i16, String)> = sqlx::query("SELECT seq, kind, body FROM events WHERE turn = $1")
        .bind(turn)
        .fetch_all(pool)
        .await
        .expect("old log rows")
        .iter()
        .map(|row| (row.get("seq"), row.get("kind"), row.get("body")))
        .collect();
    let segments: Vec<Vec<u8>> = sqlx::query_scalar("SELECT body FROM event_segments WHERE turn = $1")
        .bind(turn)
        .fetch_all(pool)
        .await
        .expect("segments");
    for segment in segments {
        for event in agui_gateway::store::segments::decode(segment.into()).expect("a readable segment") {
            let body = String::from_utf8(event.body.to_vec()).expect("UTF-8");
            log.push((event.seq, event.kind as i16, body));
        }
    }
    log.sort_by_key(|(seq, _, _)| *seq);
    log
}
