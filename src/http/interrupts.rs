//! `POST /v1/interrupts/{id}/decision`: a person decides one interrupt out of band (§2, §5.3),
//! with the same checks as a resume, so a decider who is not in the chat can unblock a turn.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use super::permissions::CanReadContent;
use super::{ApiError, AppState};
use crate::protocol::input::{ResumeEntry, ResumeStatus};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/interrupts/{id}/decision", post(decide))
}

/// The body: what a resume entry says, without the id (it is in the path).
#[derive(Debug, Deserialize)]
struct DecisionBody {
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<Value>,
}

async fn decide(
    State(state): State<AppState>,
    CanReadContent { caller, tenant }: CanReadContent,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: DecisionBody = serde_json::from_slice(&body).map_err(|e| ApiError::bad_request("body", e))?;
    let entry = ResumeEntry { interrupt_id: id, status: body.status, payload: body.payload, metadata: None };
    let outcome = state.engine.decide_out_of_band(&tenant.name, &caller, &entry, "decision-route").await?;
    Ok(Json(outcome))
}
