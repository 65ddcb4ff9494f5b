//! `GET /livez` (the process answers), `GET /readyz` (the database answers too) and
//! `GET /metrics` (Prometheus).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/livez", get(livez)).route("/readyz", get(readyz)).route("/metrics", get(metrics))
}

/// Prometheus text format (§2 `GET /metrics`).
async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let metrics = state.engine.metrics();
    let (connections, idle) = state.engine.store().pool_stats();
    metrics.db_connections.set(i64::from(connections));
    metrics.db_connections_idle.set(idle as i64);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.render())
}

async fn livez() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    if *state.shutting_down.borrow() {
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
