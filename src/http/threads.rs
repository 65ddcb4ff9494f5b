//! `GET /v1/threads/{thread}`, `GET /v1/threads/{thread}/messages` and
//! `POST /v1/threads/{thread}/cancel`. A thread that does not exist and one the caller may not
//! read are answered alike (403), so a caller learns nothing about other people's threads.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::openapi::{ErrorBody, JsonObject, TenantQuery};
use super::permissions::{CanRead, CanReadContent};
use super::{ApiError, AppState};
use crate::auth::Caller;
use crate::engine::EngineError;
use crate::ids::ThreadId;
use crate::store::{ThreadRow, TurnStatus};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(show_thread)).routes(routes!(thread_messages)).routes(routes!(cancel_turn))
}

async fn readable(state: &AppState, tenant: &str, caller: &Caller, thread: &str) -> Result<ThreadRow, ApiError> {
    let thread_id = ThreadId::parse(thread).map_err(|m| ApiError::bad_request("thread", m))?;
    match state.engine.readable_thread(tenant, caller, &thread_id).await {
        Ok(thread) => Ok(thread),
        Err(EngineError::NotFound(_)) => Err(ApiError::PermissionDenied),
        Err(other) => Err(other.into()),
    }
}

/// The board is content (§7): a caller without `threads:content` sees the thread without it.
#[utoipa::path(
    get,
    path = "/v1/threads/{thread}",
    tag = "threads",
    params(("thread" = String, Path, description = "The client's threadId.", pattern = r"^[A-Za-z0-9._:@-]{1,200}$"), TenantQuery),
    responses(
        (status = 200, description = "The thread: status, turns, the caller's open interrupts and, with `threads:content`, the board.", body = JsonObject),
        (status = 400, description = "the thread id is malformed (`bad_request`)", body = ErrorBody),
        (status = 401, description = "no valid credential (`unauthenticated`)", body = ErrorBody),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        (status = 404, description = "unknown tenant (`not_found`)", body = ErrorBody),
        (status = 500, description = "internal error (`internal`); the cause is logged", body = ErrorBody)
    )
)]
async fn show_thread(
    State(state): State<AppState>,
    CanRead { caller, tenant }: CanRead,
    Path(thread): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = readable(&state, &tenant.name, &caller, &thread).await?;
    let store = state.engine.store();
    let turns = store.thread_turns(thread.pk).await?;
    let clearance = crate::engine::board::Clearance::of(&caller);
    let notes: Vec<Value> = if clearance.content {
        let board = state.engine.thread_board(thread.pk).await?;
        state.engine.audit_board_read(&caller, &thread, &clearance, &board).await?;
        board.iter().map(|note| clearance.show(note)).collect()
    } else {
        Vec::new()
    };
    // The editable state runs wrote (§7) is content too.
    let editable = match clearance.content {
        true => crate::engine::board::stored_state(store.thread_state(thread.pk).await?.as_deref()),
        false => serde_json::Map::new(),
    };
    let latest = turns.last();
    let status = match latest.map(|t| t.status) {
        Some(TurnStatus::Running) => "running",
        Some(TurnStatus::Waiting) => "waiting",
        _ => "idle",
    };
    let interrupts = match latest {
        Some(turn) => state.engine.open_interrupts_for(&caller, turn).await?,
        None => Vec::new(),
    };
    Ok(Json(json!({
        "threadId": thread.thread_id,
        "tenant": thread.tenant,
        "status": status,
        "turnCount": turns.len(),
        "latestTurn": latest.map(|t| json!({ "id": t.public_id, "agent": t.agent, "status": t.status.as_str() })),
        "interrupts": interrupts,
        "board": { "notes": notes },
        "state": editable,
    })))
}

#[utoipa::path(
    get,
    path = "/v1/threads/{thread}/messages",
    tag = "threads",
    params(("thread" = String, Path, description = "The client's threadId.", pattern = r"^[A-Za-z0-9._:@-]{1,200}$"), TenantQuery),
    responses(
        (status = 200, description = "The conversation as AG-UI messages, with the gateway's ids.", body = JsonObject),
        (status = 400, description = "the thread id is malformed (`bad_request`)", body = ErrorBody),
        (status = 401, description = "no valid credential (`unauthenticated`)", body = ErrorBody),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        (status = 404, description = "unknown tenant (`not_found`)", body = ErrorBody),
        (status = 500, description = "internal error (`internal`); the cause is logged", body = ErrorBody)
    )
)]
async fn thread_messages(
    State(state): State<AppState>,
    CanReadContent { caller, tenant }: CanReadContent,
    Path(thread): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = readable(&state, &tenant.name, &caller, &thread).await?;
    let messages = state.engine.messages(&thread).await?;
    Ok(Json(json!({ "threadId": thread.thread_id, "messages": messages })))
}

#[utoipa::path(
    post,
    path = "/v1/threads/{thread}/cancel",
    tag = "threads",
    params(("thread" = String, Path, description = "The client's threadId.", pattern = r"^[A-Za-z0-9._:@-]{1,200}$"), TenantQuery),
    responses(
        (status = 202, description = "The running turn is being cancelled; it ends with outcome `cancelled`.", body = JsonObject),
        (status = 400, description = "the thread id is malformed (`bad_request`)", body = ErrorBody),
        (status = 401, description = "no valid credential (`unauthenticated`)", body = ErrorBody),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        (status = 404, description = "unknown tenant (`not_found`)", body = ErrorBody),
        (status = 409, description = "no turn is running (`not_running`)", body = ErrorBody),
        (status = 500, description = "internal error (`internal`); the cause is logged", body = ErrorBody)
    )
)]
async fn cancel_turn(
    State(state): State<AppState>,
    CanReadContent { caller, tenant }: CanReadContent,
    Path(thread): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let thread = readable(&state, &tenant.name, &caller, &thread).await?;
    let thread_id = ThreadId::parse(&thread.thread_id).map_err(|m| ApiError::bad_request("thread", m))?;
    let turn = state.engine.cancel(&tenant.name, &caller, &thread_id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "turn": turn, "status": "cancelling" }))))
}
