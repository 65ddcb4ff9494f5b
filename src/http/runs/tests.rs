//! Unit tests of `http/runs.rs`.

use super::*;
use axum::http::HeaderValue;

fn accept(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, HeaderValue::from_str(value).expect("header"));
    headers
}

#[test]
fn accept_picks_sse_or_the_binary_transport() {
    assert_eq!(check_accept(&HeaderMap::new()).ok(), Some(Framing::Sse));
    for sse in [
        "text/event-stream",
        "*/*",
        "application/json, text/event-stream",
        "text/*;q=0.5",
        "text/event-stream, application/vnd.ag-ui.event+proto",
        "application/vnd.ag-ui.event+proto;q=0, text/event-stream",
        "application/vnd.ag-ui.event+proto;q=0, */*",
        "application/vnd.ag-ui.event+proto;Q=0, text/event-stream",
        "application/vnd.ag-ui.event+proto; Q = 0.0, */*",
    ] {
        assert_eq!(check_accept(&accept(sse)).ok(), Some(Framing::Sse), "{sse}");
    }
    for binary in [
        "application/vnd.ag-ui.event+proto",
        "application/vnd.ag-ui.event+proto, text/event-stream",
        "application/json, application/vnd.ag-ui.event+proto;q=0.1, text/event-stream",
        "*/*, application/vnd.ag-ui.event+proto",
    ] {
        assert_eq!(check_accept(&accept(binary)).ok(), Some(Framing::Binary), "{binary}");
    }
    for refused in ["application/json", "text/event-stream;q=0", "text/event-stream;Q=0", "application/*"] {
        assert!(check_accept(&accept(refused)).is_err(), "{refused}");
    }
}

/// Mutated bodies (flipped bytes, cuts, spliced values) never panic the parser or the
/// checks that follow it: each is a RunAgentInput or a 400 naming what is wrong.
#[test]
fn mutated_bodies_never_panic_the_request_parser() {
    let seeds = [
        r#"{"threadId":"t","runId":"r","protocolVersion":"1.0","state":{},"messages":[{"id":"u","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}}"#,
        r#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","value":"x"}}]},{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"id":"t","role":"tool","content":"ok","toolCallId":"c"}],"resume":[{"interruptId":"i","status":"resolved","payload":{"approved":true}}]}"#,
    ];
    let splices: [&[u8]; 8] =
        [b"null", b"[]", b"{}", br#""\u0000""#, b"1e999", b"-0", "\"💩\"".as_bytes(), b"[[[[[[[[[[[[]]]]]]]]]]]]"];
    let mut config = crate::config::Config::builtin().expect("config");
    let limits = config.limits.clone();
    let agent = config.agents.remove(0);
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..20_000 {
        let mut body = seeds[round % seeds.len()].as_bytes().to_vec();
        for _ in 0..(next() % 4 + 1) {
            let at = (next() as usize) % (body.len() + 1);
            match next() % 4 {
                0 if at < body.len() => body[at] ^= 1 << (next() % 8),
                1 => body.truncate(at),
                2 => {
                    let splice = splices[(next() as usize) % splices.len()];
                    body.splice(at..at, splice.iter().copied());
                }
                _ if at < body.len() => {
                    body.remove(at);
                }
                _ => {}
            }
        }
        if let Ok(input) = parse_input(&body) {
            let _ = ThreadId::parse(&input.thread_id);
            let _ = RunId::parse(&input.run_id);
            let _ = check_newest_user_message(&input, &agent, &limits);
            let _ = check_tools(&input, &agent);
            let _ = crate::engine::request::history::check(&input.messages, &[]);
        }
    }
}

#[test]
fn a_wrong_type_is_named_by_its_path() {
    let error = parse_input(br#"{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":5}]}"#)
        .expect_err("refused");
    assert!(error.to_string().starts_with("messages[0]"), "{error}");
    let error = parse_input(br#"{"threadId":7,"runId":"r","messages":[]}"#).expect_err("refused");
    assert!(error.to_string().starts_with("threadId"), "{error}");
    let error = parse_input(b"not json").expect_err("refused");
    assert!(error.to_string().contains("not JSON"), "{error}");
}
