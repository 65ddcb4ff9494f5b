//! The HTTP transport: routes, extractors and SSE rendering. Each resource module exports its
//! `router()`; [`router`] merges them. [`serve`] takes a bound listener and a shutdown signal, so
//! tests pass `127.0.0.1:0` and production passes SIGTERM.

mod agents;
mod error;
mod health;
mod interrupts;
mod runs;
pub mod sse;
mod threads;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::ApiError;

use crate::config::{Config, TenantConfig};
use crate::engine::Engine;

/// What every handler shares; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub config: Arc<Config>,
    /// Flips to true when the server begins shutting down: open streams end (resumably).
    shutting_down: watch::Receiver<bool>,
}

impl AppState {
    pub fn new(engine: Engine) -> (AppState, watch::Sender<bool>) {
        let (sender, receiver) = watch::channel(false);
        let config = engine.config().clone();
        (AppState { engine, config, shutting_down: receiver }, sender)
    }
}

/// The tenant a request names with `?tenant=` (default `default`); 404 when not configured.
pub struct Tenant(pub TenantConfig);

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Query(query) = Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map_err(|error| ApiError::bad_request("query", error.body_text()))?;
        let name = query.get("tenant").map(String::as_str).unwrap_or("default");
        match state.config.tenant(name) {
            Some(tenant) => Ok(Tenant(tenant.clone())),
            None => Err(ApiError::NotFound(format!("unknown tenant '{name}'"))),
        }
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(runs::router())
        .merge(threads::router())
        .merge(agents::router())
        .merge(health::router())
        .merge(interrupts::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Unknown paths get the same JSON error body as every other error.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// Serves until `shutdown` resolves; then open streams end and the server drains.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    stop_streams: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop_streams.send_replace(true);
        })
        .await
}
