//! `GET /livez` (the process answers) and `GET /readyz` (the database answers too).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/livez", get(livez)).route("/readyz", get(readyz))
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
