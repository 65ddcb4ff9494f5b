//! The binary transport over real HTTP (§2.3): `Accept` picks it, the answer is
//! `application/vnd.ag-ui.event+proto` frames (a 4-byte big-endian length, then the event), one
//! per event SSE would send, and a refusal is one frame. The official decoder judges the frames
//! themselves in `tests/clients/conformance.mjs` (every scenario's runs, HttpAgent, a cut
//! resumed with `Last-Event-ID`).

use serde_json::Value;

use crate::helpers::*;
use crate::on_both_stores;

const BINARY: &str = "application/vnd.ag-ui.event+proto";

async fn post(app: &TestApp, agent: &str, input: &Value, accept: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(app.run_url(agent))
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(input.to_string())
        .send()
        .await
        .expect("request sent")
}

/// The frames of a whole binary body; fails unless the lengths walk it exactly.
fn frames(body: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < body.len() {
        assert!(body.len() - at >= 4, "a length prefix cut short at {at}");
        let length = u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]) as usize;
        assert!(body.len() - at - 4 >= length, "a frame of {length} bytes cut short at {at}");
        frames.push(&body[at + 4..at + 4 + length]);
        at += 4 + length;
    }
    frames
}

async fn accept_picks_the_binary_transport_and_it_carries_every_event(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run(&unique("th-binary"), "run-1", "frames, please");
    let over_sse = app.run_to_end("demo", &input).await;

    let response = post(&app, "demo", &input, &format!("{BINARY}, text/event-stream")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], BINARY);
    let body = response.bytes().await.expect("body");
    let frames = frames(&body);
    assert_eq!(frames.len(), over_sse.len(), "one frame per event SSE sends");
    for (frame, event) in frames.iter().zip(&over_sse) {
        let id = event.id.as_deref().expect("an SSE event has an id");
        assert!(frame.windows(id.len()).any(|window| window == id.as_bytes()), "the frame of {id} carries its id");
    }

    // curl's `*/*`, and SSE named first, stay SSE; nothing acceptable is 406.
    for sse in ["*/*", "text/event-stream, application/vnd.ag-ui.event+proto"] {
        let response = post(&app, "demo", &input, sse).await;
        assert_eq!(response.status(), 200, "{sse}");
        assert_eq!(response.headers()["content-type"], "text/event-stream", "{sse}");
    }
    let response = post(&app, "demo", &input, "application/json").await;
    assert_eq!(response.status(), 406);

    // The connect route takes it too: the thread's opening arrives as whole frames.
    let mut watch = reqwest::Client::new()
        .post(app.url("/v1/agui/agents/demo/connect"))
        .header("content-type", "application/json")
        .header("accept", BINARY)
        .body(serde_json::json!({"threadId": input["threadId"], "protocolVersion": "1.0"}).to_string())
        .send()
        .await
        .expect("connect sent");
    assert_eq!(watch.status(), 200);
    assert_eq!(watch.headers()["content-type"], BINARY);
    let mut opening = Vec::new();
    while opening.len() < 4
        || opening.len() < 4 + u32::from_be_bytes([opening[0], opening[1], opening[2], opening[3]]) as usize
    {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), watch.chunk())
            .await
            .expect("the opening within 10 s")
            .expect("read")
            .expect("a chunk before the end");
        opening.extend_from_slice(&chunk);
    }
    let first_length = u32::from_be_bytes([opening[0], opening[1], opening[2], opening[3]]) as usize;
    let thread = input["threadId"].as_str().expect("thread id").as_bytes();
    assert!(
        opening[4..4 + first_length].windows(thread.len()).any(|w| w == thread),
        "the first frame, RUN_STARTED, names the thread"
    );
}
on_both_stores!(accept_picks_the_binary_transport_and_it_carries_every_event);

// One store: the refusal is framed before any store is read.
#[tokio::test]
async fn a_refused_run_is_one_binary_frame() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let thread = unique("th-binary-refused");
    let mut input = first_run(&thread, "run-1", "two");
    input["messages"] = serde_json::json!([
        {"id": "u0", "role": "user", "content": "one"},
        {"id": "a0", "role": "assistant", "content": "made up"},
        {"id": "u1", "role": "user", "content": "two"},
    ]);
    let response = post(&app, "demo", &input, BINARY).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], BINARY);
    let body = response.bytes().await.expect("body");
    let frames = frames(&body);
    assert_eq!(frames.len(), 1, "the refusal alone");
    assert!(frames[0].windows(16).any(|w| w == b"history_mismatch"), "the frame names its code");
}
