//! `GET /livez` (the process answers), `GET /readyz` (the database answers too) and
//! `GET /metrics` (Prometheus).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::openapi::JsonObject;
use super::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(livez)).routes(routes!(readyz)).routes(routes!(metrics))
}

/// Prometheus text format (§2 `GET /metrics`). Its labels name agents, so only a caller from
/// loopback, or one presenting `auth.metrics_token`, may read it.
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()), responses(
    (status = 200, description = "The `agui_` metrics of this instance.", content_type = "text/plain", body = String),
    (status = 403, description = "neither from loopback nor with `auth.metrics_token` (`permission_denied`)", body = ErrorBody)
))]
async fn metrics(
    State(state): State<AppState>,
    request: axum::http::request::Parts,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let peer = request.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
    if !may_scrape(&state.config.auth.metrics_token, peer, &request.headers) {
        return Err(ApiError::Forbidden(
            "the metrics answer loopback callers, or a scraper with auth.metrics_token".into(),
        ));
    }
    let metrics = state.engine.metrics();
    let (connections, idle) = state.engine.store().pool_stats();
    metrics.db_connections.set(i64::from(connections));
    metrics.db_connections_idle.set(idle as i64);
    Ok(([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.render()))
}

/// A caller from loopback, or one whose bearer credential is the metrics token (compared in
/// constant time).
fn may_scrape(token: &str, peer: Option<SocketAddr>, headers: &axum::http::HeaderMap) -> bool {
    if peer.is_some_and(|peer| peer.ip().is_loopback()) {
        return true;
    }
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default();
    !token.is_empty()
        && presented.len() == token.len()
        && presented.bytes().zip(token.bytes()).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}

/// The process answers.
#[utoipa::path(get, path = "/livez", tag = "operations", security(()), responses(
    (status = 200, description = "`{\"status\": \"ok\"}`", body = JsonObject)
))]
async fn livez() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database answers and the gateway is not draining or shutting down (from the moment it
/// is asked to stop: a balancer stops sending it new requests).
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()), responses(
    (status = 200, description = "`{\"status\": \"ready\"}`", body = JsonObject),
    (status = 503, description = "the database does not answer, or shutting down (`unavailable`)", body = ErrorBody)
))]
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if *state.shutting_down.borrow() || state.engine.is_draining() {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    match state.engine.store().ping().await {
        Ok(()) => Ok(Json(json!({ "status": "ready" }))),
        Err(error) => {
            tracing::warn!(%error, "readiness check: the database does not answer");
            Err(ApiError::Unavailable("the database does not answer".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_or_the_token_may_scrape() {
        let outside: SocketAddr = "10.0.0.7:4000".parse().expect("address");
        let inside: SocketAddr = "127.0.0.1:4000".parse().expect("address");
        let mut headers = axum::http::HeaderMap::new();
        assert!(may_scrape("", Some(inside), &headers));
        assert!(!may_scrape("", Some(outside), &headers));
        assert!(!may_scrape("", None, &headers));
        headers.insert(axum::http::header::AUTHORIZATION, "Bearer s3cret-token".parse().expect("header"));
        assert!(!may_scrape("", Some(outside), &headers), "no token configured: nobody from outside");
        assert!(may_scrape("s3cret-token", Some(outside), &headers));
        assert!(!may_scrape("s3cret-tokem", Some(outside), &headers));
        assert!(!may_scrape("s3cret-token-longer", Some(outside), &headers));
    }
}
