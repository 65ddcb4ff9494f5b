//! `GET /livez` (the process answers), `GET /readyz` (the database answers too) and
//! `GET /metrics` (Prometheus).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::openapi::{ErrorBody, JsonObject};
use super::{ApiError, AppState};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(livez)).routes(routes!(readyz)).routes(routes!(metrics))
}

/// Prometheus text format (§2 `GET /metrics`).
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()), responses(
    (status = 200, description = "The `agui_` metrics of this instance.", content_type = "text/plain", body = String)
))]
async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let metrics = state.engine.metrics();
    let (connections, idle) = state.engine.store().pool_stats();
    metrics.db_connections.set(i64::from(connections));
    metrics.db_connections_idle.set(idle as i64);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.render())
}

/// The process answers.
#[utoipa::path(get, path = "/livez", tag = "operations", security(()), responses(
    (status = 200, description = "`{\"status\": \"ok\"}`", body = JsonObject)
))]
async fn livez() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database answers and the gateway is not shutting down.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()), responses(
    (status = 200, description = "`{\"status\": \"ready\"}`", body = JsonObject),
    (status = 503, description = "the database does not answer, or shutting down (`unavailable`)", body = ErrorBody)
))]
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
