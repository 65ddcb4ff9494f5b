//! HTTP tools for the `openai` agent's `[[tools]]`: each records how it was called.

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Json;
use serde_json::Value;

/// A tool at `…/tool` answering `answer`, recording the arguments of every call.
pub async fn start_tool(answer: &'static str) -> (String, Arc<Mutex<Vec<Value>>>) {
    let calls: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorded = calls.clone();
    let app = axum::Router::new().route(
        "/tool",
        post(move |Json(args): Json<Value>| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().unwrap_or_else(|p| p.into_inner()).push(args);
                answer
            }
        }),
    );
    (format!("http://{}/tool", super::serve(app).await), calls)
}

/// A tool at `…/charge` answering `answer`, recording the `Idempotency-Key` of every call, in
/// order; call number `hanging_call` (1 for the first), if any, is never answered, so the
/// instance making it can be killed in the middle of the call.
pub async fn start_keyed_tool(answer: &'static str, hanging_call: Option<usize>) -> (String, Arc<Mutex<Vec<String>>>) {
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorded = keys.clone();
    let app = axum::Router::new().route(
        "/charge",
        post(move |headers: HeaderMap| {
            let recorded = recorded.clone();
            async move {
                let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
                let call = {
                    let mut keys = recorded.lock().unwrap_or_else(|p| p.into_inner());
                    keys.push(key);
                    keys.len()
                };
                if hanging_call == Some(call) {
                    std::future::pending::<()>().await;
                }
                answer
            }
        }),
    );
    (format!("http://{}/charge", super::serve(app).await), keys)
}

/// How often a tool was called, and how many of those calls its caller closed unanswered.
#[derive(Clone, Default)]
pub struct StallCounts {
    pub called: Arc<std::sync::atomic::AtomicUsize>,
    pub closed: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a call as closed when the request is dropped unanswered.
struct ClosedGuard(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for ClosedGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A tool at `…/stall` that never answers (a payment provider that hangs), counting its calls
/// and the calls the gateway closed.
pub async fn start_stalled_tool() -> (String, StallCounts) {
    let counts = StallCounts::default();
    let seen = counts.clone();
    let app = axum::Router::new().route(
        "/stall",
        post(move || {
            let seen = seen.clone();
            async move {
                seen.called.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _closed = ClosedGuard(seen.closed.clone());
                std::future::pending::<&'static str>().await
            }
        }),
    );
    (format!("http://{}/stall", super::serve(app).await), counts)
}
