//! Content parts besides text in a user message (SPEC §2 `messages`): an `openai` agent's model
//! is given those its settings say it takes (`input_modalities`), as chat-completions parts;
//! an `agui` upstream gets every part unchanged; the turn records them, and the conversation,
//! `MESSAGES_SNAPSHOT` and the history check show and compare them. Parts the agent does not
//! take, or past the size limits, are refused before anything is stored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::helpers::*;
use crate::on_both_stores;
use crate::upstream::{upstream_of, Upstream};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn image_part(data: &str) -> Value {
    json!({"type": "image", "source": {"type": "data", "value": data, "mimeType": "image/png"}})
}

fn run_with_parts(thread: &str, run: &str, parts: Value) -> Value {
    json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0", "state": {},
        "messages": [{"id": format!("{run}-user"), "role": "user", "content": parts}],
        "tools": [], "context": [], "forwardedProps": {}
    })
}

/// A gateway with the `openai` agent `vision` (its model takes text and images) on `model`.
async fn vision_gateway(model: &ScriptedModel, db: &TestDatabase, limits: Option<(usize, usize)>) -> TestApp {
    let mut config = test_config(&db.url);
    config.agents.push(model.agent("vision", "input_modalities = [\"text\", \"image\"]\n"));
    if let Some((part, total)) = limits {
        config.limits.max_content_part_bytes = part;
        config.limits.max_content_bytes = total;
    }
    TestApp::start_with(config).await
}

/// The user message of the model's `index`th request, its content.
fn last_user_content(request: &Value) -> Value {
    let messages = request["messages"].as_array().expect("messages");
    messages.iter().rev().find(|m| m["role"] == "user").expect("a user message")["content"].clone()
}

async fn an_image_reaches_the_model_and_is_recorded_with_the_turn(backend: Backend) {
    let model = ScriptedModel::planned(vec![], "A single pixel.").await;
    let db = TestDatabase::new(backend).await;
    let app = vision_gateway(&model, &db, None).await;
    let parts = json!([{"type": "text", "text": "What is this?"}, image_part(PNG)]);
    let input = run_with_parts("th-see", "run-1", parts.clone());
    let events = app.run_to_end("vision", &input).await;
    assert_eq!(events.last().expect("end").kind(), "RUN_FINISHED", "{:?}", kinds(&events));
    assert_eq!(text_of(&events), "A single pixel.");
    assert_eq!(
        last_user_content(&model.requests()[0]),
        json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}}
        ])
    );
    let (ok, report) = agui_check(&app.run_url("vision"), &input).await;
    assert!(ok, "{report}");
    // The agent's capabilities say what its model takes.
    let agent = app.get_json("/v1/agents/vision?tenant=default").await;
    let taken = &agent["capabilities"]["multimodal"]["input"];
    assert_eq!((taken["image"].as_bool(), taken["audio"].as_bool()), (Some(true), Some(false)), "{agent}");

    // The conversation holds the message as it was sent.
    let body = app.get_json("/v1/threads/th-see/messages").await;
    let user = &body["messages"][0];
    assert_eq!((user["role"].as_str(), &user["content"]), (Some("user"), &parts), "{body}");
    let answer_id = body["messages"][1]["id"].clone();

    // The next turn restates the conversation with the image, and the model is given it again.
    let next = json!({
        "threadId": "th-see", "runId": "run-2", "protocolVersion": "1.0",
        "messages": [
            {"id": "run-1-user", "role": "user", "content": parts},
            {"id": answer_id, "role": "assistant", "content": "A single pixel."},
            {"id": "u2", "role": "user", "content": "What colour?"}
        ]
    });
    let second = app.run_to_end("vision", &next).await;
    let snapshot = second.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    assert_eq!(snapshot.data["messages"][0]["content"], parts, "{}", snapshot.data);
    let again = last_user_content(&model.requests()[1]);
    assert_eq!(again, "What colour?");
    let earlier = model.requests()[1]["messages"][0].clone();
    assert_eq!(earlier["content"][1]["type"], "image_url", "{earlier}");
    let (ok, report) = agui_check(&app.run_url("vision"), &next).await;
    assert!(ok, "{report}");

    // A connect stream's snapshot shows it too.
    let response = app
        .client
        .post(app.url("/v1/agui/agents/vision/connect"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(json!({"threadId": "th-see", "runId": "watch-1", "protocolVersion": "1.0", "messages": []}).to_string())
        .send()
        .await
        .expect("connect sent");
    let mut stream = EventStream::new(response);
    stream.until_kind("MESSAGES_SNAPSHOT").await;
    let watched = stream.events.iter().find(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot");
    assert_eq!(watched.data["messages"][0]["content"], parts);

    // An earlier message whose image was swapped is not the turn's: refused, nothing stored.
    let mut forged = next.clone();
    forged["runId"] = json!("run-3");
    forged["messages"][0]["content"][1] = image_part("AAAA");
    forged["messages"][2] = json!({"id": "u3", "role": "user", "content": "and now?"});
    forged["messages"].as_array_mut().expect("messages").truncate(3);
    let turns = app.counts().await;
    let refused = app.run_to_end("vision", &forged).await;
    assert_eq!(kinds(&refused), ["RUN_ERROR"]);
    assert_eq!(refused[0].data["code"], "history_mismatch", "{}", refused[0].data);
    assert_eq!(app.counts().await, turns, "a refused run changes nothing");
}
on_both_stores!(an_image_reaches_the_model_and_is_recorded_with_the_turn);

// One store: what reaches the model is decided before any store.
#[tokio::test]
async fn a_url_image_is_passed_on_and_never_fetched() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("listener");
    let address = listener.local_addr().expect("address");
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let watcher = tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let model = ScriptedModel::planned(vec![], "A cat.").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    // A plain http:// URL (the listener here has no certificate) is allowed by setting only.
    let mut config = test_config(&db.url);
    config.agents.push(model.agent("vision", "input_modalities = [\"text\", \"image\"]\n"));
    config.limits.content_url_schemes = vec!["https".into(), "data".into(), "http".into()];
    let app = TestApp::start_with(config).await;
    let url = format!("http://{address}/cat.png");
    let parts = json!([{"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}}]);
    let events = app.run_to_end("vision", &run_with_parts("th-url", "run-1", parts)).await;
    assert_eq!(events.last().expect("end").kind(), "RUN_FINISHED", "{:?}", kinds(&events));
    assert_eq!(last_user_content(&model.requests()[0]), json!([{"type": "image_url", "image_url": {"url": url}}]));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 0, "the gateway made no request to the part's URL");
    watcher.abort();
}

/// Sends each case's parts (`name`, `parts`, `status`, `code`, what the message names) as a new
/// thread's first message to `vision` and checks the refusal: its status and code, its message
/// naming what was wrong, nothing stored and no thread made.
async fn each_is_refused<'a>(
    app: &TestApp,
    before: &agui_gateway::store::RowCounts,
    cases: impl IntoIterator<Item = (&'a str, Value, u16, &'a str, &'a str)>,
) {
    for (name, parts, status, code, names) in cases {
        let thread = unique("th-refused");
        let response = app.post_run("vision", &run_with_parts(&thread, "run-1", parts)).await;
        assert_eq!(response.status().as_u16(), status, "{name}");
        let body: Value = response.json().await.expect("an error body");
        assert_eq!(body["error"]["code"], code, "{name}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(names), "{name}: '{message}' names {names}");
        assert_eq!(&app.counts().await, before, "{name} changed the store");
        let listed = app.client.get(app.url(&format!("/v1/threads/{thread}/messages"))).send().await.expect("GET");
        assert_eq!(listed.status(), 403, "{name}: no thread was made (an unknown thread reads as one not yours)");
    }
}

// One store: the parts are refused before any store is written.
#[tokio::test]
async fn parts_the_agent_does_not_take_or_too_large_are_refused_and_nothing_is_stored() {
    let model = ScriptedModel::planned(vec![], "unused").await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = vision_gateway(&model, &db, Some((1000, 1500))).await;
    app.run_to_end("demo", &first_run("th-held", "run-0", "hello")).await;
    let before = app.counts().await;
    let audio = json!({"type": "audio", "source": {"type": "data", "value": "UklGRg==", "mimeType": "audio/wav"}});
    let document = json!({"type": "binary", "mimeType": "application/pdf", "data": "JVBERi0="});
    let text = json!({"type": "text", "text": "listen"});
    let cases = [
        ("an audio part", json!([text, audio]), 400, "unsupported_content", "messages[0].content[1]"),
        ("a binary document", json!([text, document]), 400, "unsupported_content", "messages[0].content[1]"),
        ("an unknown part type", json!([{"type": "hologram"}]), 400, "unsupported_content", "messages[0].content[0]"),
        (
            "a data source without its type",
            json!([{"type": "image", "source": {"type": "data", "value": "AA"}}]),
            400,
            "bad_request",
            "mimeType",
        ),
        (
            "a part past the part limit",
            json!([text, image_part(&"A".repeat(1200))]),
            413,
            "payload_too_large",
            "messages[0].content[1]",
        ),
        (
            "parts past the request limit",
            json!([image_part(&"A".repeat(900)), image_part(&"A".repeat(900))]),
            413,
            "payload_too_large",
            "limits.max_content_bytes",
        ),
    ];
    each_is_refused(&app, &before, cases).await;
    assert_eq!(model.calls(), 0, "no refused part reached the model");
    // A script agent reads only words: an image to it is refused too.
    let response = app.post_run("demo", &run_with_parts("th-script", "run-1", json!([image_part(PNG)]))).await;
    assert_eq!(response.status(), 400);
}

/// A part is measured whole (its media type, file name and metadata too, not only its
/// content), its media type and base64 are checked against its kind, and a URL must be of a
/// scheme `limits.content_url_schemes` allows: each refused before anything is stored or
/// reaches the model. These used to pass unchanged into the `data:` URL the model was given.
async fn a_part_is_measured_whole_and_checked_as_the_model_will_read_it(backend: Backend) {
    let model = ScriptedModel::planned(vec![], "Seen.").await;
    let db = TestDatabase::new(backend).await;
    let app = vision_gateway(&model, &db, Some((1000, 1500))).await;
    app.run_to_end("demo", &first_run("th-held", "run-0", "hello")).await;
    let before = app.counts().await;
    let image = |mime: &str, value: &str| json!({"type": "image", "source": {"type": "data", "value": value, "mimeType": mime}});
    let linked = |url: &str| json!({"type": "image", "source": {"type": "url", "value": url}});
    let mut with_metadata = image_part(PNG);
    with_metadata["metadata"] = json!({"note": "m".repeat(1200)});
    let noted_text = json!({"type": "text", "text": "look", "metadata": {"note": "n".repeat(800)}});
    let long_name = json!({"type": "binary", "mimeType": "image/png", "data": PNG, "filename": "f".repeat(1100)});
    let cases = [
        ("metadata past the part limit", json!([with_metadata]), 413, "payload_too_large", "messages[0].content[0]"),
        (
            "a mimeType past the part limit",
            json!([image(&format!("image/{}", "x".repeat(1100)), PNG)]),
            413,
            "payload_too_large",
            "messages[0].content[0]",
        ),
        ("a filename past the part limit", json!([long_name]), 413, "payload_too_large", "messages[0].content[0]"),
        (
            "text parts' metadata past the message limit",
            json!([noted_text, noted_text]),
            413,
            "payload_too_large",
            "limits.max_content_bytes",
        ),
        ("data that is not base64", json!([image("image/png", "not base64!")]), 400, "bad_request", "source.value"),
        ("an image part of text/html", json!([image("text/html", PNG)]), 400, "bad_request", "source.mimeType"),
        (
            "a mimeType carrying more",
            json!([image("image/png;base64,AAAA\" onerror=x", PNG)]),
            400,
            "bad_request",
            "source.mimeType",
        ),
        ("a data: URL of text/html", json!([linked("data:text/html;base64,PGI+")]), 400, "bad_request", "source.value"),
        (
            "a file: URL",
            json!([linked("file:///etc/passwd")]),
            400,
            "unsupported_content",
            "limits.content_url_schemes",
        ),
        (
            "a link-local http: URL",
            json!([linked("http://169.254.169.254/latest/meta-data")]),
            400,
            "unsupported_content",
            "limits.content_url_schemes",
        ),
        (
            "a gopher: URL",
            json!([linked("gopher://127.0.0.1:70/_x")]),
            400,
            "unsupported_content",
            "limits.content_url_schemes",
        ),
    ];
    each_is_refused(&app, &before, cases).await;
    assert_eq!(model.calls(), 0, "no refused part reached the model");
    // Well-formed parts of the default schemes are taken.
    let parts = json!([
        linked("https://images.example/a.png"),
        linked(&format!("data:image/png;base64,{PNG}")),
        image_part(PNG)
    ]);
    let input = run_with_parts(&unique("th-fine"), "run-1", parts);
    let events = app.run_to_end("vision", &input).await;
    assert_eq!(events.last().expect("end").kind(), "RUN_FINISHED", "{:?}", kinds(&events));
    let data_url = format!("data:image/png;base64,{PNG}");
    assert_eq!(
        last_user_content(&model.requests()[0]),
        json!([
            {"type": "image_url", "image_url": {"url": "https://images.example/a.png"}},
            {"type": "image_url", "image_url": {"url": data_url}},
            {"type": "image_url", "image_url": {"url": data_url}}
        ])
    );
    let (ok, report) = agui_check(&app.run_url("vision"), &input).await;
    assert!(ok, "{report}");
}
on_both_stores!(a_part_is_measured_whole_and_checked_as_the_model_will_read_it);

/// An `agui` upstream gets the parts unchanged, each kind, and the official model of the
/// upstream's SDK accepts the input.
// One store: what is checked is the upstream's wire.
async fn an_upstream_gets_every_part_unchanged(kind: Upstream) {
    let server = upstream_of(kind);
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    let toml =
        format!("name = \"upstream\"\nkind = \"agui\"\nurl = \"{}/agents/chat\"\ntimeout_secs = 20\n", server.url);
    config.agents.push(toml::from_str(&toml).expect("agent config"));
    let app = TestApp::start_with(config).await;
    let parts = json!([
        {"type": "text", "text": "all of these"},
        image_part(PNG),
        {"type": "image", "source": {"type": "url", "value": "https://example.org/a.png"}},
        {"type": "audio", "source": {"type": "data", "value": "UklGRg==", "mimeType": "audio/wav"}},
        {"type": "video", "source": {"type": "url", "value": "https://example.org/a.mp4", "mimeType": "video/mp4"}},
        {"type": "document", "source": {"type": "data", "value": "JVBERi0=", "mimeType": "application/pdf"}},
        {"type": "binary", "mimeType": "application/pdf", "data": "JVBERi0=", "filename": "a.pdf"}
    ]);
    let thread = unique("th-up-parts");
    let events = app.run_to_end("upstream", &run_with_parts(&thread, "run-1", parts.clone())).await;
    let end = events.last().expect("end");
    assert_eq!(end.kind(), "RUN_FINISHED", "{:?}: {}", kinds(&events), end.data);
    let sent = server.requests().await.last().expect("the upstream was asked")["body"].clone();
    let user = sent["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "user").cloned();
    // A `binary` part (which 1.0's schema no longer admits) goes in its 1.0 form.
    let mut expected = parts.clone();
    expected[6] = json!({"type": "document", "source": {"type": "data", "value": "JVBERi0=", "mimeType": "application/pdf"},
        "metadata": {"filename": "a.pdf"}});
    assert_eq!(user.expect("the user message")["content"], expected, "{sent}");
}
crate::upstream::on_both_upstreams!(an_upstream_gets_every_part_unchanged);
