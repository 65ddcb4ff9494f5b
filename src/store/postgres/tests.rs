//! Unit tests of `store/postgres.rs`.

use super::*;
use crate::store::rows::events::{EventKind, StoredEvent};

#[test]
fn announcements_round_trip_and_skip_our_own() {
    let wakeups = [
        WakeUp::Committed { turn: 1, seq: 2 },
        WakeUp::Cancel { turn: 3 },
        WakeUp::NewTurn { thread: 4 },
        WakeUp::Committed { turn: 3, seq: 40 },
    ];
    let payload = announcement("a", &wakeups);
    // The spelling instances of earlier versions read and write.
    assert_eq!(payload, "a|1:2,3:-1,4:-2,3:40");
    assert_eq!(parse_announcement(&payload, "a"), None);
    assert_eq!(parse_announcement(&payload, "b"), Some(wakeups.to_vec()));
    assert_eq!(parse_announcement("garbage", "b"), None);
    assert_eq!(parse_announcement(&announcement("a", &[WakeUp::Lost]), "b"), Some(vec![WakeUp::Lost]));
}

fn stored(seq: i64, body: &str) -> StoredEvent {
    StoredEvent { seq, kind: EventKind::Plain, body: bytes::Bytes::from(body.to_string()), at_ms: 1_000 + seq }
}

#[test]
fn a_notice_carries_events_byte_for_byte_when_they_fit_and_only_seqs_when_not() {
    let body = r#"{"type":"TEXT_MESSAGE_CONTENT","delta":"Grüße \"quoted\" 你好 😀 \n"}"#;
    let events = [stored(4, body), stored(5, r#"{ "type" : "CUSTOM" }"#)];
    let pieces = notice_pieces([(7, &events[0]), (9, &events[1]), (7, &events[1])].into_iter()).expect("pieces");
    let [payload] = notices("a|", &pieces).try_into().expect("one notice");
    assert_eq!(parse_notice(&payload, "a"), None, "our own");
    let heard = parse_notice(&payload, "b").expect("parses");
    assert_eq!(
        heard,
        vec![
            WakeUp::Events { turn: 7, events: vec![events[0].clone(), events[1].clone()] },
            WakeUp::Events { turn: 9, events: vec![events[1].clone()] },
        ]
    );
    let big = stored(6, &format!("{{\"delta\":\"{}\"}}", "x".repeat(MAX_NOTIFY_PAYLOAD)));
    let pieces = notice_pieces([(7, &big)].into_iter()).expect("pieces");
    let heard: Vec<WakeUp> =
        notices("a|", &pieces).iter().flat_map(|n| parse_notice(n, "b").expect("parses")).collect();
    assert_eq!(heard, vec![WakeUp::Committed { turn: 7, seq: 6 }]);
}

#[test]
fn a_batch_too_big_for_one_notice_is_split_and_only_a_piece_too_big_alone_loses_its_events() {
    // 2,000 turns with an event each: far over one payload, every event still carried.
    let many: Vec<StoredEvent> = (1..2001).map(|seq| stored(seq, r#"{"type":"CUSTOM","value":"abcdefgh"}"#)).collect();
    let big = stored(9_999, &format!("{{\"delta\":\"{}\"}}", "x".repeat(MAX_NOTIFY_PAYLOAD)));
    let events = many.iter().map(|e| (e.seq, e)).chain([(5_000, &big)]).chain(many.iter().take(1).map(|e| (e.seq, e)));
    let pieces = notice_pieces(events).expect("pieces");
    let sent = notices("a|", &pieces);
    assert!(sent.len() > 1, "split");
    assert!(sent.iter().all(|n| n.len() <= MAX_NOTIFY_PAYLOAD), "each under the limit");
    let heard: Vec<WakeUp> = sent.iter().flat_map(|n| parse_notice(n, "b").expect("parses")).collect();
    let mut expected: Vec<WakeUp> = many
        .iter()
        .map(|e| WakeUp::Events {
            turn: e.seq,
            events: if e.seq == 1 { vec![e.clone(), e.clone()] } else { vec![e.clone()] },
        })
        .collect();
    expected.push(WakeUp::Committed { turn: 5_000, seq: 9_999 });
    assert_eq!(heard, expected, "every turn once, in order, the big one by its seq");
}

#[test]
fn an_oversized_announcement_asks_for_a_full_recheck() {
    let many: Vec<WakeUp> = (0..5000).map(|i| WakeUp::Committed { turn: i, seq: i }).collect();
    let payload = announcement("a", &many);
    assert!(payload.len() < 8000);
    assert_eq!(parse_announcement(&payload, "b"), Some(vec![WakeUp::Lost]));
}
