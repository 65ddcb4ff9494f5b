//! `POST /v1/interrupts/{id}/decision`: a person decides one interrupt out of band (§2, §5.3),
//! with the same checks as a resume, so a decider who is not in the chat can unblock a turn;
//! and `GET /v1/interrupts`, the caller's inbox: what waits for them to decide in the tenant,
//! and what waits on their threads for others.

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{documented, ApiError, ErrorBody, Responses, TenantRefusals};
use super::error::{BODY_TIMEOUT, INTERNAL, UNAUTHENTICATED};
use super::openapi::{JsonObject, TenantQuery};
use super::permissions::{CanRead, CanReadContent};
use super::state::AppState;
use crate::protocol::input::{ResumeEntry, ResumeStatus};

pub fn router() -> OpenApiRouter<AppState> {
    // The route measures its own body limit while reading (413 with the JSON error body).
    OpenApiRouter::new().routes(routes!(decide)).routes(routes!(inbox)).layer(DefaultBodyLimit::disable())
}

/// The caller's inbox (§5): every open interrupt of the tenant this caller may decide, oldest
/// first, whoever's thread it waits on, and apart from them the open interrupts on the
/// caller's threads that only others decide. The call's arguments only with `threads:content`.
#[utoipa::path(
    get,
    path = "/v1/interrupts",
    tag = "interrupts",
    params(TenantQuery),
    responses(
        (status = 200, description = "`interrupts`: the open interrupts the caller may decide, oldest first, each with `tenant`, `threadId`, `turn`, `agent`, `startedBy`, `createdAt`, `expiresAt`, `deciders`, `fourEyes`, `threadReadable` and the AG-UI `interrupt`; `waitingForOthers`: those on the caller's threads that others decide (`interruptId`, `what`, `deciders`, …).", body = JsonObject),
        (status = 400, description = "an unparseable query string (`bad_request`)", body = ErrorBody),
        (status = 403, description = "the caller may not read threads, or holds another tenant's credential (`permission_denied`)", body = ErrorBody),
        TenantRefusals
    )
)]
async fn inbox(State(state): State<AppState>, CanRead { caller, tenant }: CanRead) -> Result<Json<Value>, ApiError> {
    let inbox = state.engine.inbox(&tenant.name, &caller).await?;
    Ok(Json(json!({ "interrupts": inbox.mine, "waitingForOthers": inbox.others })))
}

/// The body: what a resume entry says, without the id (it is in the path).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct DecisionBody {
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<Value>,
}

/// What a decision refuses, as OpenAPI documents it (each with the error body).
struct DecisionRefusals;

impl utoipa::IntoResponses for DecisionRefusals {
    fn responses() -> Responses {
        documented(&[
            (400, "the body is not a decision (`bad_request`)"),
            UNAUTHENTICATED,
            (403, "not a person, not a decider, or not the caller's thread (`permission_denied`, `not_a_decider`)"),
            (404, "unknown tenant or interrupt (`not_found`)"),
            BODY_TIMEOUT,
            (409, "the interrupt is decided, expired or changed (`interrupt_expired`, `interrupt_changed`, `invalid_resume`)"),
            (413, "the body exceeds `limits.max_body_bytes` (`payload_too_large`)"),
            INTERNAL,
        ])
    }
}

/// A person decides one interrupt out of band, with the checks of a resume.
#[utoipa::path(
    post,
    path = "/v1/interrupts/{id}/decision",
    tag = "interrupts",
    params(("id" = String, Path, description = "The interrupt's id (`int_…`)."), TenantQuery),
    request_body(content = DecisionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision was recorded: the interrupt's outcome.", body = JsonObject),
        DecisionRefusals
    )
)]
async fn decide(
    State(state): State<AppState>,
    CanReadContent { caller, tenant }: CanReadContent,
    Path(id): Path<String>,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    super::body::check_text("id", &id)?;
    let body = super::body::read_json_body(&state, body).await?;
    let body: DecisionBody = serde_json::from_slice(&body).map_err(|e| ApiError::bad_request("body", e))?;
    let entry = ResumeEntry { interrupt_id: id, status: body.status, payload: body.payload, metadata: None };
    let outcome = state.engine.decide_out_of_band(&tenant.name, &caller, &entry, "decision-route").await?;
    Ok(Json(outcome))
}
