//! No redirect is followed by the HTTP clients of tools, models and upstream agents, so a
//! secret header never reaches an address it was not configured for.

use std::sync::{Arc, Mutex};

use axum::response::IntoResponse;
use axum::routing::any;
use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::helpers::*;
use crate::on_both_stores;

/// A server that records every request (method, path, headers) and answers 200.
async fn start_recorder() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorded = seen.clone();
    let app = axum::Router::new().fallback(any(move |request: axum::extract::Request| {
        let recorded = recorded.clone();
        async move {
            let headers: Vec<String> = request.headers().keys().map(|k| k.to_string()).collect();
            recorded.lock().unwrap_or_else(|p| p.into_inner()).push(json!({
                "method": request.method().as_str(), "path": request.uri().path(), "headers": headers }));
            "recorded"
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

/// A server answering every request `307 Temporary Redirect` to `target`, counting them.
async fn start_redirector(target: String) -> (String, Arc<Mutex<usize>>) {
    let count: Arc<Mutex<usize>> = Arc::default();
    let counted = count.clone();
    let app = axum::Router::new().fallback(any(move || {
        let counted = counted.clone();
        let target = target.clone();
        async move {
            *counted.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            (axum::http::StatusCode::TEMPORARY_REDIRECT, [("location", target)]).into_response()
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, count)
}

async fn a_tool_that_redirects_is_not_followed(backend: Backend) {
    std::env::set_var("AGUI_TEST_REDIRECT_TOOL_KEY", "tool-secret");
    let (elsewhere, seen) = start_recorder().await;
    let (tool_url, redirected) = start_redirector(format!("{elsewhere}/collect")).await;
    let model = ScriptedModel::planned(vec![("lookup", json!({"q": "x"}))], "Could not look it up.").await;
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    let lookup = format!(
        "[[tools]]\nname = \"lookup\"\nurl = \"{tool_url}/lookup\"\n\
         secret_headers = {{ x-api-key = \"AGUI_TEST_REDIRECT_TOOL_KEY\" }}\n"
    );
    config.agents.push(model.agent("looker", &lookup));
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("looker", &first_run("th-redirect", "run-1", "look it up")).await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert_eq!(*redirected.lock().expect("count"), 1, "the tool was called once");
    assert!(seen.lock().expect("seen").is_empty(), "the redirect's target saw nothing: {:?}", seen.lock());
    let result = events.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("a result");
    let content = result.data["content"].as_str().unwrap_or("");
    assert!(
        content.starts_with("error: the tool answered 307 Temporary Redirect, a redirect, which is not followed"),
        "{content}"
    );
    assert!(!content.contains(&elsewhere), "the result does not name where it pointed: {content}");
}
on_both_stores!(a_tool_that_redirects_is_not_followed);

// One store: the model call is in front of any store.
#[tokio::test]
async fn a_model_that_redirects_fails_the_turn_and_its_key_goes_nowhere() {
    std::env::set_var("AGUI_TEST_REDIRECT_MODEL_KEY", "model-secret");
    let (elsewhere, seen) = start_recorder().await;
    let (model_url, redirected) = start_redirector(format!("{elsewhere}/v1/chat/completions")).await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(
        toml::from_str(&format!(
            r#"
name = "redirected"
kind = "openai"
base_url = "{model_url}/v1"
model = "scripted"
api_key_env = "AGUI_TEST_REDIRECT_MODEL_KEY"
"#
        ))
        .expect("agent config"),
    );
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("redirected", &first_run("th-model-redirect", "run-1", "hi")).await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(&events));
    assert_eq!(end["code"], "failed");
    let message = end["message"].as_str().unwrap_or("");
    assert!(message.contains("answered 307 Temporary Redirect, a redirect, which is not followed"), "{message}");
    assert_eq!(*redirected.lock().expect("count"), 1, "a redirect is not retried");
    assert!(seen.lock().expect("seen").is_empty(), "the redirect's target saw nothing");
}

// One store: the upstream call is in front of any store.
#[tokio::test]
async fn an_upstream_agent_that_redirects_fails_the_turn_and_its_secret_goes_nowhere() {
    std::env::set_var("AGUI_TEST_REDIRECT_UPSTREAM_KEY", "Bearer upstream-secret");
    let (elsewhere, seen) = start_recorder().await;
    let (upstream_url, redirected) = start_redirector(format!("{elsewhere}/agent")).await;
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.agents.push(
        toml::from_str(&format!(
            r#"
name = "fronted"
kind = "agui"
url = "{upstream_url}/agent"
secret_headers = {{ authorization = "AGUI_TEST_REDIRECT_UPSTREAM_KEY" }}
"#
        ))
        .expect("agent config"),
    );
    let app = TestApp::start_with(config).await;
    let events = app.run_to_end("fronted", &first_run("th-up-redirect", "run-1", "hi")).await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(&events));
    assert_eq!(end["code"], "failed");
    let message = end["message"].as_str().unwrap_or("");
    assert!(
        message.contains("the upstream agent answered 307 Temporary Redirect, a redirect, which is not followed"),
        "{message}"
    );
    assert_eq!(*redirected.lock().expect("count"), 1);
    assert!(seen.lock().expect("seen").is_empty(), "the redirect's target saw nothing");
}
