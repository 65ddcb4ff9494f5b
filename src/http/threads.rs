//! `GET /v1/threads`, `GET /v1/threads/{thread}`, `GET /v1/threads/{thread}/messages` (a branch
//! of the thread), `GET /v1/threads/{thread}/turns` (its tree of turns),
//! `POST /v1/threads/{thread}/cancel` and `DELETE /v1/threads/{thread}`. A thread that does not
//! exist and one the caller may not read are answered alike (403), so a caller learns nothing
//! about other people's threads; a list shows only the threads the caller may read.

use std::marker::PhantomData;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use utoipa::IntoResponses;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{documented, ApiError, ErrorBody, ReadRefusals, Responses, ThreadRefusals};
use super::error::{INTERNAL, NOT_THEIRS, UNAUTHENTICATED};
use super::openapi::{JsonObject, TenantQuery, ThreadPath};
use super::permissions::{CanRead, CanReadContent, Grant};
use super::query::ApiQuery;
use super::state::AppState;
use crate::auth::Caller;
use crate::config::TenantConfig;
use crate::engine::conversation::Activity;
use crate::engine::threads::{title, ThreadFilter};
use crate::engine::EngineError;
use crate::ids::ThreadId;
use crate::protocol::iso8601;
use crate::store::{ThreadRow, TurnStatus};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_threads))
        .routes(routes!(show_thread, delete_thread))
        .routes(routes!(thread_messages))
        .routes(routes!(thread_turns))
        .routes(routes!(cancel_turn))
}

/// The query of `GET /v1/threads`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// A configured tenant's name (default `default`); unknown tenants are `404 not_found`.
    #[allow(dead_code)] // read by the permission extractor; here for the document
    pub tenant: Option<String>,
    /// Threads per page, from 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`; absent for the first page.
    pub cursor: Option<String>,
    /// Only threads whose latest turn ran this agent.
    pub agent: Option<String>,
    /// Only threads whose latest turn is `running`, `waiting`, `succeeded`, `failed` or
    /// `cancelled`.
    #[param(pattern = "^(running|waiting|succeeded|failed|cancelled)$")]
    pub status: Option<String>,
}

/// The caller's threads (§10), newest activity first: the ones `GET /v1/threads/{thread}`
/// would show it, a page at a time. The title is the first user message, content: only a
/// caller with `threads:content` gets it.
#[utoipa::path(
    get,
    path = "/v1/threads",
    tag = "threads",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of threads: `threads` (each `id`, `agent`, `status`, `createdAt`, `updatedAt` and, with `threads:content`, `title`) and `next_cursor` (null on the last page).", body = JsonObject),
        (status = 400, description = "a malformed `limit`, `status`, `agent` or `cursor` (`bad_request`, naming it)", body = ErrorBody),
        ReadRefusals
    )
)]
async fn list_threads(
    State(state): State<AppState>,
    CanRead { caller, tenant }: CanRead,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let filter = ThreadFilter { agent: query.agent, status: query.status, cursor: query.cursor, limit: query.limit };
    let page = state.engine.list_threads(&tenant.name, caller.visibility(), &filter).await?;
    let content = caller.scopes().may_read_content();
    let threads: Vec<Value> = page
        .threads
        .iter()
        .map(|summary| {
            let mut entry = summary_of(&summary.thread, Some(summary.status), summary.updated_at_ms);
            entry["agent"] = json!(summary.agent);
            if content {
                entry["title"] = json!(title(&summary.first_user_text));
            }
            entry
        })
        .collect();
    Ok(Json(json!({ "threads": threads, "next_cursor": page.next_cursor })))
}

/// What both thread APIs show of a thread in a list: `id`, its latest turn's `status`,
/// `createdAt`, and `updatedAt` (when its latest turn began); each API adds its own members.
pub(super) fn summary_of(thread: &ThreadRow, status: Option<TurnStatus>, updated_at_ms: i64) -> Value {
    json!({
        "id": thread.thread_id,
        "status": status.map(TurnStatus::as_str),
        "createdAt": iso8601(thread.created_at_ms),
        "updatedAt": iso8601(updated_at_ms),
    })
}

/// Erases the thread (§10) with its turns, events, interrupts, board and state, leaving one
/// `thread.delete` audit row (who, when; no content). Its owner erases it: the person whose
/// thread it is, or, for a thread the tenant owns, a tenant API key.
#[utoipa::path(
    delete,
    path = "/v1/threads/{thread}",
    tag = "threads",
    params(ThreadPath, TenantQuery),
    responses(Erased, ThreadRefusals)
)]
async fn delete_thread(
    State(state): State<AppState>,
    ReadableThread { caller, thread, .. }: ReadableThread<CanReadContent>,
) -> Result<StatusCode, ApiError> {
    erase_thread(&state, &caller, &thread).await
}

/// What erasing a thread answers besides [`ThreadRefusals`], on either thread API.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // only read by the OpenAPI derive
pub(super) enum Erased {
    #[response(status = 204, description = "The thread and everything stored for it are erased.")]
    Erased,
    #[response(
        status = 409,
        description = "a turn of the thread the delete cancelled has not ended in time (`turn_in_progress`): try again"
    )]
    TurnInProgress(ErrorBody),
}

/// Erases a thread the caller may erase (the engine checks), for either thread API.
pub(super) async fn erase_thread(
    state: &AppState,
    caller: &Caller,
    thread: &ThreadRow,
) -> Result<StatusCode, ApiError> {
    match state.engine.delete_thread(caller, thread).await {
        Ok(()) => {
            state.threads_changed();
            Ok(StatusCode::NO_CONTENT)
        }
        // Erased meanwhile by someone else: as unknown as any other missing thread.
        Err(EngineError::NotFound(_)) => Err(ApiError::PermissionDenied),
        Err(other) => Err(other.into()),
    }
}

/// The route's `{thread}` as the caller holding the permission `P` ([`CanRead`] or
/// [`CanReadContent`]) may read it: the permission first, then the thread, 403 alike for one it
/// may not read and one that does not exist ([`readable`]).
pub(super) struct ReadableThread<P = CanRead> {
    pub caller: Caller,
    pub tenant: TenantConfig,
    pub thread: ThreadRow,
    permission: PhantomData<P>,
}

/// The `{thread}` of a route's path, beside whatever else the path names.
#[derive(serde::Deserialize)]
struct ThreadParam {
    thread: String,
}

impl<P: Grant> FromRequestParts<AppState> for ReadableThread<P> {
    /// The permission's refusal, the path's, or [`readable`]'s, each answered as a handler's.
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let (caller, tenant) =
            P::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?.granted();
        let Path(ThreadParam { thread }) =
            Path::<ThreadParam>::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        let thread = readable(state, &tenant.name, &caller, &thread).await.map_err(IntoResponse::into_response)?;
        Ok(ReadableThread { caller, tenant, thread, permission: PhantomData })
    }
}

/// A thread id from a request, or 400 naming `thread`.
pub(super) fn thread_id(thread: &str) -> Result<ThreadId, ApiError> {
    ThreadId::parse(thread).map_err(|m| ApiError::bad_request("thread", m))
}

/// The thread the caller may read, or 403 alike for one it may not and one that does not exist.
pub(super) async fn readable(
    state: &AppState,
    tenant: &str,
    caller: &Caller,
    thread: &str,
) -> Result<ThreadRow, ApiError> {
    let thread_id = thread_id(thread)?;
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
    params(ThreadPath, TenantQuery),
    responses(
        (status = 200, description = "The thread: status, turns, the caller's open interrupts and, with `threads:content`, the board.", body = JsonObject),
        ThreadRefusals
    )
)]
async fn show_thread(
    State(state): State<AppState>,
    ReadableThread { caller, thread, .. }: ReadableThread,
) -> Result<Json<Value>, ApiError> {
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

/// The query of `GET /v1/threads/{thread}/messages`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// A configured tenant's name (default `default`); unknown tenants are `404 not_found`.
    #[allow(dead_code)] // read by the permission extractor; here for the document
    pub tenant: Option<String>,
    /// A turn of the thread (its id, `t…`): show the branch that ends at it. Absent: the
    /// current branch (the one ending at the thread's newest turn).
    pub turn: Option<String>,
}

/// What reading a branch refuses: [`ThreadRefusals`], a malformed query, and a `turn` that is
/// not the thread's (each with the error body).
struct BranchRefusals;

impl IntoResponses for BranchRefusals {
    fn responses() -> Responses {
        let unknown = (404, "unknown tenant, or `turn` is no turn of this thread (`not_found`)");
        let malformed = (400, "the thread id or the query is malformed (`bad_request`)");
        documented(&[malformed, UNAUTHENTICATED, NOT_THEIRS, unknown, INTERNAL])
    }
}

/// A branch of the thread (§6): its conversation as AG-UI messages, and for each user message
/// the alternatives a client can offer ("‹ 2 / 3 ›").
#[utoipa::path(
    get,
    path = "/v1/threads/{thread}/messages",
    tag = "threads",
    params(ThreadPath, MessagesQuery),
    responses(
        (status = 200, description = "The branch: `threadId`, `turn` (the branch's last turn), `current` (whether it is the current branch), `messages` (AG-UI messages, with the gateway's ids) and `alternatives` (one per user message, in order: `messageId`, `turn`, `index` from 1, `count`, and `turns`, each `{turn, head}`: an alternative and the turn to open with `?turn=` to see it as last continued).", body = JsonObject),
        BranchRefusals
    )
)]
async fn thread_messages(
    State(state): State<AppState>,
    CanReadContent { caller, tenant }: CanReadContent,
    Path(thread): Path<String>,
    ApiQuery(query): ApiQuery<MessagesQuery>,
) -> Result<Json<Value>, ApiError> {
    let thread = readable(&state, &tenant.name, &caller, &thread).await?;
    // The route takes the content permission, so the branch shows its activity (§3).
    let view = state.engine.branch_view(&thread, query.turn.as_deref(), Activity::Shown).await?;
    Ok(Json(json!({
        "threadId": thread.thread_id,
        "turn": view.head,
        "current": view.current,
        "messages": view.messages,
        "alternatives": view.alternatives,
    })))
}

/// The thread's turns as a tree (§6): every turn of every branch, oldest first, with its parent.
#[utoipa::path(
    get,
    path = "/v1/threads/{thread}/turns",
    tag = "threads",
    params(ThreadPath, TenantQuery),
    responses(
        (status = 200, description = "`threadId` and `turns`, oldest first: each `id`, `parent` (the turn it went on from, null for a first turn), `agent`, `status`, `createdAt` and `onCurrentBranch`.", body = JsonObject),
        ThreadRefusals
    )
)]
async fn thread_turns(
    State(state): State<AppState>,
    ReadableThread { thread, .. }: ReadableThread,
) -> Result<Json<Value>, ApiError> {
    let turns: Vec<Value> = state
        .engine
        .turn_tree(&thread)
        .await?
        .into_iter()
        .map(|turn| {
            json!({
                "id": turn.id,
                "parent": turn.parent,
                "agent": turn.agent,
                "status": turn.status,
                "createdAt": iso8601(turn.created_at_ms),
                "onCurrentBranch": turn.on_current_branch,
            })
        })
        .collect();
    Ok(Json(json!({ "threadId": thread.thread_id, "turns": turns })))
}

#[utoipa::path(
    post,
    path = "/v1/threads/{thread}/cancel",
    tag = "threads",
    params(ThreadPath, TenantQuery),
    responses(
        (status = 202, description = "The running or waiting turn is cancelled at once, whatever it is doing; it ends with outcome `cancelled`.", body = JsonObject),
        (status = 409, description = "no turn is running or waiting (`not_running`)", body = ErrorBody),
        ThreadRefusals
    )
)]
async fn cancel_turn(
    State(state): State<AppState>,
    ReadableThread { caller, tenant, thread, .. }: ReadableThread<CanReadContent>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let thread_id = thread_id(&thread.thread_id)?;
    let turn = state.engine.cancel(&tenant.name, &caller, &thread_id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "turn": turn, "status": "cancelling" }))))
}
