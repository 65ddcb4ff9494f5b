//! Unit tests of `protocol/input.rs`.

use super::*;

#[test]
fn the_official_clients_body_parses_and_unknown_members_are_ignored() {
    let body = json!({
        "threadId": "t1", "runId": "r1", "protocolVersion": "1.0", "state": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "hi", "surprise": true},
            {"id": "a1", "role": "assistant", "content": "hello",
             "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"id": "x1", "role": "reasoning", "content": "hmm"},
            {"id": "tm", "role": "tool", "content": "ok", "toolCallId": "c1"},
            {"id": "u2", "role": "user", "content": [{"type": "text", "text": "again"}]}
        ],
        "tools": [], "context": [], "forwardedProps": {}, "newField": 1
    });
    let input: RunAgentInput = serde_json::from_value(body).expect("parses");
    assert_eq!(input.messages.len(), 5);
    assert!(!input.is_pre_1_0_client());
    let InputMessage::User(last) = &input.messages[4] else { panic!("user message") };
    assert_eq!(last.content.text(), "again");
}

#[test]
fn media_parts_are_classed_and_their_sources_read() {
    let content: UserContent = serde_json::from_value(json!([
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url", "value": "http://x/a.png"}},
        {"type": "binary", "mimeType": "audio/wav", "data": "UklG"},
        {"type": "document", "source": {"type": "data", "value": "JVBE"}}
    ]))
    .expect("parses");
    assert_eq!(content.text(), "look");
    let media = content.media();
    assert_eq!(
        media.iter().map(|p| p.modality()).collect::<Vec<_>>(),
        [Some(Modality::Image), Some(Modality::Audio), Some(Modality::Document)]
    );
    assert_eq!(media[0].content_source(), Ok(PartSource::Url { value: "http://x/a.png", mime_type: None }));
    assert_eq!(media[1].content_source(), Ok(PartSource::Data { value: "UklG", mime_type: "audio/wav" }));
    assert!(media[2].content_source().is_err(), "a data source needs its mimeType");
    let binary: ContentPart = serde_json::from_value(
        json!({"type": "binary", "mimeType": "application/pdf", "data": "JVBE", "filename": "a.pdf"}),
    )
    .expect("parses");
    assert_eq!(
        serde_json::to_value(binary.normalized()).expect("serializes"),
        json!({"type": "document", "source": {"type": "data", "value": "JVBE", "mimeType": "application/pdf"},
               "metadata": {"filename": "a.pdf"}})
    );
}

#[test]
fn media_types_base64_and_data_urls_are_checked_against_the_part() {
    let part = |value: Value| serde_json::from_value::<ContentPart>(value).expect("a part");
    let data = |kind: &str, mime: &str, value: &str| {
        part(json!({"type": kind, "source": {"type": "data", "value": value, "mimeType": mime}}))
    };
    assert!(data("image", "image/png", "iVBORw0KGgo=").checked_source().is_ok());
    assert!(data("image", "IMAGE/PNG", "iVBORw0KGgo").checked_source().is_ok(), "case and padding as sent");
    assert!(data("document", "application/pdf", "JVBERi0=").checked_source().is_ok());
    assert!(data("audio", "audio/wav", "UklGRg==").checked_source().is_ok());
    let long = "QUJD".repeat(5000);
    assert!(data("image", "image/png", &long).checked_source().is_ok(), "across chunks");
    for (kind, mime, value, names) in [
        ("image", "text/html", "iVBO", "source.mimeType"),
        ("image", "image/png;base64,AAAA\" onerror=x", "iVBO", "source.mimeType"),
        ("image", "image/png; charset=x", "iVBO", "source.mimeType"),
        ("image", "image", "iVBO", "source.mimeType"),
        ("document", "image/png", "iVBO", "source.mimeType"),
        ("audio", "video/mp4", "iVBO", "source.mimeType"),
        ("image", "image/png", "not base64!", "source.value"),
        ("image", "image/png", "iVBO\niVBO", "source.value"),
        ("image", "image/png", "iVB=iVBO", "source.value"),
        ("image", "image/png", "i", "source.value"),
        ("image", "image/png", "", "source.value"),
    ] {
        let error = data(kind, mime, value).checked_source().expect_err(mime);
        assert!(error.starts_with(names), "{kind} {mime} {value}: {error}");
    }
    let mut bad_tail = long.clone();
    bad_tail.push_str("A*==");
    assert!(data("image", "image/png", &bad_tail).checked_source().is_err());
    let binary = part(json!({"type": "binary", "mimeType": "image/png\"><x", "data": "iVBO"}));
    assert!(binary.checked_source().expect_err("refused").starts_with("mimeType"));
    let url = |value: &str| part(json!({"type": "image", "source": {"type": "url", "value": value}}));
    assert!(url("https://x.example/a.png").checked_source().is_ok());
    assert!(url("data:image/png;base64,iVBO").checked_source().is_ok());
    assert!(url("DATA:image/png;base64,iVBO").checked_source().is_ok());
    assert!(url("data:text/html;base64,iVBO").checked_source().is_err());
    assert!(url("data:image/png,<svg onload=x>").checked_source().is_err());
    assert!(url("data:image/png;base64,<svg>").checked_source().is_err());
    assert_eq!(url_scheme("HTTPS://x"), Some("https".into()));
    assert_eq!(url_scheme("file:///etc/passwd"), Some("file".into()));
    assert_eq!(url_scheme("/relative"), None);
    assert_eq!(url_scheme("1http://x"), None);
}

#[test]
fn protocol_versions_are_classified() {
    let mut input: RunAgentInput =
        serde_json::from_value(json!({"threadId": "t", "runId": "r", "messages": []})).expect("parses");
    assert!(input.is_pre_1_0_client());
    input.protocol_version = Some("0.9".into());
    assert!(input.is_pre_1_0_client());
    input.protocol_version = Some("x".into());
    assert!(!input.is_pre_1_0_client());
}
