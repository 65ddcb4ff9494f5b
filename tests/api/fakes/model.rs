//! [`ScriptedModel`]: an OpenAI-compatible model server (`POST /v1/chat/completions`) on a
//! random port. Its script answers each request from the conversation it is sent (so a repeated
//! call gets the same answer) and the call's number; every request is recorded, and so is every
//! answer its caller closed before it was whole ([`ScriptedModel::cut`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};

use super::chunks::{self, DONE};

/// What the model does with one request.
pub enum Reply {
    /// A streamed answer, whole (frames from [`chunks`]).
    Stream(String),
    /// A streamed answer the script sends piece by piece (a cut network, a stalled model).
    Body(axum::body::Body),
    /// `429` with a `Retry-After` of this many seconds.
    RateLimited { retry_after_secs: u64 },
    /// No answer ever: the call is in flight until its caller goes.
    Hang,
}

/// The script: the request, and which call it is (1 for the first).
pub type Script = Arc<dyn Fn(&Value, usize) -> Reply + Send + Sync>;

/// A model server; `url` is its base URL (`…/v1`) for an agent's `base_url`.
pub struct ScriptedModel {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
    /// Answers (a [`Reply::Body`] or a [`Reply::Hang`]) whose caller closed the request before
    /// the answer was whole.
    cut: Arc<AtomicUsize>,
}

impl ScriptedModel {
    /// Starts a model that answers as `script` says.
    pub async fn start(script: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static) -> ScriptedModel {
        let script: Script = Arc::new(script);
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let cut: Arc<AtomicUsize> = Arc::default();
        let (recorded, counted) = (requests.clone(), cut.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            post(move |Json(request): Json<Value>| {
                let (recorded, script, counted) = (recorded.clone(), script.clone(), counted.clone());
                async move {
                    let call = {
                        let mut all = recorded.lock().unwrap_or_else(|p| p.into_inner());
                        all.push(request.clone());
                        all.len()
                    };
                    respond(script(&request, call), counted).await
                }
            }),
        );
        let address = super::serve(app).await;
        ScriptedModel { url: format!("http://{address}/v1"), requests, cut }
    }

    /// Starts a model answering by [`plan`].
    pub async fn planned(calls: Vec<(&'static str, Value)>, final_text: &'static str) -> ScriptedModel {
        ScriptedModel::start(plan(calls, final_text)).await
    }

    /// The `[[agents]]` table of a gateway config for the agent `assistant` on this model
    /// ([`assistant_toml`]), with `more`.
    pub fn agents_table(&self, more: &str) -> String {
        format!("[[agents]]\n{}", assistant_toml(&self.url, more))
    }

    /// An `openai` agent `name` on this model ([`openai_toml`]), with `more`.
    pub fn agent(&self, name: &str, more: &str) -> agui_gateway::config::AgentConfig {
        toml::from_str(&openai_toml(name, &self.url, more)).expect("agent config")
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many answers were cut by their caller closing the request (a cancel drops it).
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }

    /// Waits until `n` answers were cut (the gateway closed its requests), within
    /// [`crate::helpers::PATIENCE`]; how long it took.
    pub async fn until_cut(&self, n: usize) -> Duration {
        let started = std::time::Instant::now();
        while self.cut() < n {
            assert!(started.elapsed() < crate::helpers::PATIENCE, "{} of {n} answers cut", self.cut());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        started.elapsed()
    }

    /// How many requests came so far.
    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The settings of an `openai` agent `name` on the model at `base_url` (model `scripted`), then
/// `more`: its other settings and sub-tables. On its own, an agent's TOML
/// ([`AgentConfig`](agui_gateway::config::AgentConfig)); after `[[agents]]`, a table of a
/// gateway's config.
pub fn openai_toml(name: &str, base_url: &str, more: &str) -> String {
    format!("name = \"{name}\"\nkind = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"scripted\"\n{more}")
}

/// [`openai_toml`] of the agent most tests talk to, `assistant`.
pub fn assistant_toml(base_url: &str, more: &str) -> String {
    openai_toml("assistant", base_url, more)
}

/// Counts an answer as cut when it is dropped before it was sent whole.
struct CutGuard {
    cut: Arc<AtomicUsize>,
    whole: bool,
}

impl Drop for CutGuard {
    fn drop(&mut self) {
        if !self.whole {
            self.cut.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn respond(reply: Reply, cut: Arc<AtomicUsize>) -> Response {
    let streamed = [("content-type", "text/event-stream")];
    match reply {
        Reply::Stream(body) => (StatusCode::OK, streamed, body).into_response(),
        Reply::Body(body) => {
            let mut data = body.into_data_stream();
            let watched = async_stream::stream! {
                let mut guard = CutGuard { cut, whole: false };
                while let Some(piece) = futures_util::StreamExt::next(&mut data).await {
                    yield piece;
                }
                guard.whole = true;
            };
            (StatusCode::OK, streamed, axum::body::Body::from_stream(watched)).into_response()
        }
        Reply::RateLimited { retry_after_secs } => {
            let body = json!({"error": {"message": "Rate limit reached", "type": "requests"}});
            let headers =
                [("content-type", "application/json".to_string()), ("retry-after", retry_after_secs.to_string())];
            (StatusCode::TOO_MANY_REQUESTS, headers, body.to_string()).into_response()
        }
        Reply::Hang => {
            let _guard = CutGuard { cut, whole: false };
            std::future::pending().await
        }
    }
}

/// An answer of `words` words (`w1 w2 …`), one every `gap`, then its usage: a model that is
/// slow to say it all (a cancel or a restart comes in the middle).
pub fn slowly(words: usize, gap: Duration) -> Reply {
    let pieces = async_stream::stream! {
        for word in 1..=words {
            if word > 1 {
                tokio::time::sleep(gap).await;
            }
            yield Ok::<_, std::convert::Infallible>(chunks::chunk(json!({"content": format!("w{word} ")})));
        }
        yield Ok(chunks::usage(12, words as u64) + DONE);
    };
    Reply::Body(axum::body::Body::from_stream(pieces))
}

/// The text of a whole [`slowly`] answer of `words` words.
pub fn slow_text(words: usize) -> String {
    (1..=words).map(|word| format!("w{word} ")).collect()
}

/// A script that works through `calls` one per answer: a tool call for each of them not yet
/// answered in the conversation, then `final_text`; every answer reports usage 12 + 5.
pub fn plan(
    calls: Vec<(&'static str, Value)>,
    final_text: &'static str,
) -> impl Fn(&Value, usize) -> Reply + Send + Sync {
    move |request, _| {
        let results = chunks::tool_results(request);
        let mut body = match calls.get(results) {
            Some((name, args)) => chunks::tool_call(0, results, name, args, true),
            None => chunks::text(final_text),
        };
        body.push_str(&chunks::usage(12, 5));
        body.push_str(DONE);
        Reply::Stream(body)
    }
}

/// A script that answers a conversation without tool results with all of `calls` in one answer,
/// and any later conversation with `final_text`.
pub fn all_at_once(
    calls: Vec<(&'static str, Value)>,
    final_text: &'static str,
) -> impl Fn(&Value, usize) -> Reply + Send + Sync {
    move |request, _| {
        let mut body = String::new();
        if chunks::tool_results(request) > 0 {
            body.push_str(&chunks::chunk(json!({"content": final_text})));
        } else {
            for (index, (name, args)) in calls.iter().enumerate() {
                body.push_str(&chunks::tool_call(index, index, name, args, false));
            }
        }
        body.push_str(DONE);
        Reply::Stream(body)
    }
}

/// `script`, except that call number `call` never gets an answer (a model thinking for ever).
pub fn hanging_on_call(
    call: usize,
    script: impl Fn(&Value, usize) -> Reply + Send + Sync,
) -> impl Fn(&Value, usize) -> Reply + Send + Sync {
    move |request, number| if number == call { Reply::Hang } else { script(request, number) }
}

/// `script`, except that the first call is answered 429 (rate limited), asking for a second.
pub fn busy_first(
    script: impl Fn(&Value, usize) -> Reply + Send + Sync,
) -> impl Fn(&Value, usize) -> Reply + Send + Sync {
    move |request, number| {
        if number == 1 {
            Reply::RateLimited { retry_after_secs: 1 }
        } else {
            script(request, number)
        }
    }
}
