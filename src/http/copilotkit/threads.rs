//! The thread routes CopilotKit's `useThreads` calls, over the gateway's own threads:
//! `GET {base}/threads` (the caller's own threads of an agent), `GET`, `PATCH` (rename,
//! unarchive) and `DELETE {base}/threads/{thread}`, `POST {base}/threads/{thread}/archive` and
//! `GET {base}/threads/{thread}/messages`.
//!
//! "Own" is the owner who may erase the thread: a person's own threads, or the tenant's for a
//! tenant API key; another person's thread is answered as one that does not exist (403). A
//! rename, an archive or an unarchive is audited in the same transaction.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde_json::{json, Value};
use utoipa::IntoResponses;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::engine::threads::{title, ThreadFilter};
use crate::engine::EngineError;
use crate::http::error::{thread_refusals, ApiError, ErrorBody, Responses};
use crate::http::error::{ReadRefusals, TenantRefusals, ThreadRefusals};
use crate::http::openapi::{JsonObject, ThreadPath};
use crate::http::permissions::{CanRead, CanReadContent, Grant};
use crate::http::query::ApiQuery;
use crate::http::state::AppState;
use crate::http::threads::{erase_thread, summary_of, Erased, ReadableThread};
use crate::protocol::iso8601;
use crate::store::{ThreadRow, ThreadSummary, ThreadTitle, TitleChange, TurnStatus};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, change, erase))
        .routes(routes!(archive))
        .routes(routes!(messages))
}

/// The query `useThreads` sends.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    /// Only threads whose latest turn ran this agent (`useThreads({agentId})`).
    agent_id: Option<String>,
    /// `true` lists archived threads too.
    include_archived: Option<String>,
    /// Threads per page, from 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// The previous page's `nextCursor`.
    cursor: Option<String>,
}

/// What a list entry is made of: a page of the list gives it ([`ThreadSummary`]), and so does
/// one thread read with its turns ([`thread_entry`]).
struct Listed<'a> {
    thread: &'a ThreadRow,
    /// The latest turn's agent and status; none for a thread with no turn.
    latest: Option<(&'a str, TurnStatus)>,
    /// When the latest turn began (the thread's creation without one).
    updated_at_ms: i64,
    first_user_text: &'a str,
}

impl<'a> From<&'a ThreadSummary> for Listed<'a> {
    fn from(summary: &'a ThreadSummary) -> Listed<'a> {
        Listed {
            thread: &summary.thread,
            latest: Some((&summary.agent, summary.status)),
            updated_at_ms: summary.updated_at_ms,
            first_user_text: &summary.first_user_text,
        }
    }
}

/// A thread as `useThreads` shows it: `name` is the name a person gave it, else its first user
/// message (to a caller with `threads:content`).
fn entry(listed: Listed<'_>, label: Option<&ThreadTitle>, content: bool) -> Value {
    let named = label.and_then(|l| l.title.clone());
    let name = match (named, content) {
        (Some(name), true) => Some(name),
        (None, true) => Some(title(listed.first_user_text)),
        (_, false) => None,
    };
    let mut entry = summary_of(listed.thread, listed.latest.map(|(_, status)| status), listed.updated_at_ms);
    entry["agentId"] = json!(listed.latest.map(|(agent, _)| agent));
    entry["name"] = json!(name);
    entry["archived"] = json!(label.is_some_and(|l| l.archived_at_ms.is_some()));
    entry["lastRunAt"] = json!(iso8601(listed.updated_at_ms));
    entry
}

/// The caller's own threads, newest activity first, a page at a time; archived ones only with
/// `includeArchived=true`. A page holds at most `limit` threads (fewer when some were archived
/// or another's); `nextCursor` continues it.
#[utoipa::path(
    get,
    path = "/v1/copilotkit/{tenant}/threads",
    tag = "copilotkit",
    params(TenantPath, ListQuery),
    responses(
        (status = 200, description = "`{threads: [{id, agentId, name, archived, status, createdAt, updatedAt, lastRunAt}], nextCursor, joinCode}`; `joinCode` names the live list's channel (`POST …/threads/subscribe`)", body = JsonObject),
        (status = 400, description = "a malformed `agentId`, `limit` or `cursor` (`bad_request`, naming it)", body = ErrorBody),
        ReadRefusals
    )
)]
async fn list(
    State(state): State<AppState>,
    CanRead { caller, tenant }: CanRead,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let include_archived = query.include_archived.as_deref() == Some("true");
    let join_code = join_code(query.agent_id.as_deref());
    let filter = ThreadFilter { agent: query.agent_id, status: None, cursor: query.cursor, limit: query.limit };
    let (threads, next_cursor) = own_entries(&state, &caller, &tenant.name, &filter, include_archived).await?;
    Ok(Json(json!({ "threads": threads, "nextCursor": next_cursor, "joinCode": join_code })))
}

/// The `joinCode` a list answers: the channel of the live list (`super::realtime`) of that
/// agent's threads, or of all the caller's threads for a list of every agent.
pub(super) fn join_code(agent: Option<&str>) -> String {
    match agent {
        Some(agent) => format!("agent.{agent}"),
        None => "all".to_string(),
    }
}

/// One page of the caller's own threads as the list shows them, and the next page's cursor.
pub(super) async fn own_entries(
    state: &AppState,
    caller: &Caller,
    tenant: &str,
    filter: &ThreadFilter,
    include_archived: bool,
) -> Result<(Vec<Value>, Option<String>), ApiError> {
    let page = state.engine.list_threads(tenant, caller.visibility(), filter).await?;
    let own: Vec<&ThreadSummary> = page.threads.iter().filter(|s| caller.may_delete(&s.thread)).collect();
    let pks: Vec<i64> = own.iter().map(|s| s.thread.pk).collect();
    let labels = state.engine.thread_titles(&pks).await?;
    let content = caller.scopes().may_read_content();
    let threads: Vec<Value> = own
        .into_iter()
        .map(|summary| (summary, labels.get(&summary.thread.pk)))
        .filter(|(_, label)| include_archived || !label.is_some_and(|l| l.archived_at_ms.is_some()))
        .map(|(summary, label)| entry(summary.into(), label, content))
        .collect();
    Ok((threads, page.next_cursor))
}

/// One of the caller's own threads, or 403 alike for another's and one that does not exist.
pub(super) async fn own_thread(
    state: &AppState,
    tenant: &str,
    caller: &Caller,
    thread: &str,
) -> Result<ThreadRow, ApiError> {
    let thread = crate::http::threads::readable(state, tenant, caller, thread).await?;
    owned(caller, thread)
}

/// The thread when it is the caller's own (the caller may erase it), else 403.
fn owned(caller: &Caller, thread: ThreadRow) -> Result<ThreadRow, ApiError> {
    match caller.may_delete(&thread) {
        true => Ok(thread),
        false => Err(ApiError::PermissionDenied),
    }
}

/// The route's `{thread}` when it is one of the caller's own, the caller holding the
/// permission `P`: [`ReadableThread`], then [`owned`].
struct OwnThread<P = CanRead> {
    caller: Caller,
    thread: ThreadRow,
    permission: std::marker::PhantomData<P>,
}

impl<P: Grant> FromRequestParts<AppState> for OwnThread<P> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let ReadableThread { caller, thread, .. } = ReadableThread::<P>::from_request_parts(parts, state).await?;
        let thread = owned(&caller, thread).map_err(axum::response::IntoResponse::into_response)?;
        Ok(OwnThread { caller, thread, permission: std::marker::PhantomData })
    }
}

/// The list's entry of one thread.
async fn thread_entry(state: &AppState, caller: &Caller, thread: &ThreadRow) -> Result<Value, ApiError> {
    let labels = state.engine.thread_titles(&[thread.pk]).await?;
    let label = labels.get(&thread.pk);
    let turns = state.engine.store().thread_turns(thread.pk).await?;
    let latest = turns.last();
    let listed = Listed {
        thread,
        latest: latest.map(|t| (t.agent.as_str(), t.status)),
        updated_at_ms: latest.map(|t| t.created_at_ms).unwrap_or(thread.created_at_ms),
        first_user_text: turns.first().map(|t| t.user_text.as_str()).unwrap_or_default(),
    };
    Ok(entry(listed, label, caller.scopes().may_read_content()))
}

/// What a route reading one of the caller's own threads refuses (each with the error body).
struct OwnThreadRefusals;

impl IntoResponses for OwnThreadRefusals {
    fn responses() -> Responses {
        thread_refusals((403, "the caller may not read threads, or the thread is not theirs (`permission_denied`)"))
    }
}

/// What reading the conversation of one of the caller's own threads refuses (each with the
/// error body).
struct OwnContentRefusals;

impl IntoResponses for OwnContentRefusals {
    fn responses() -> Responses {
        thread_refusals((403, "the caller may not read content, or the thread is not theirs (`permission_denied`)"))
    }
}

/// One of the caller's own threads, as the list shows it.
#[utoipa::path(
    get,
    path = "/v1/copilotkit/{tenant}/threads/{thread}",
    tag = "copilotkit",
    params(TenantPath, ThreadPath),
    responses(
        (status = 200, description = "`{id, agentId, name, archived, status, createdAt, updatedAt, lastRunAt}`", body = JsonObject),
        OwnThreadRefusals
    )
)]
async fn show(
    State(state): State<AppState>,
    OwnThread { caller, thread, .. }: OwnThread,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(thread_entry(&state, &caller, &thread).await?))
}

/// What `PATCH {base}/threads/{thread}` takes: `useThreads` sends `{agentId, name}` to rename
/// and `{agentId, archived: false}` to unarchive.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Change {
    /// The thread's new name (1–200 characters).
    #[serde(default)]
    name: Option<String>,
    /// `false` unarchives, `true` archives.
    #[serde(default)]
    archived: Option<bool>,
    /// Sent by `useThreads`; not read.
    #[serde(default)]
    #[allow(dead_code)]
    agent_id: Option<String>,
}

fn parse_change(body: &[u8]) -> Result<Change, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let change: Change = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        match path.as_str() {
            "." => ApiError::bad_request("body", error.into_inner()),
            _ => ApiError::bad_request(&path, error.into_inner()),
        }
    })?;
    Ok(change)
}

/// Changes the name or archive mark of one of the caller's own threads, and answers the thread
/// as the list shows it now.
async fn apply(
    state: &AppState,
    caller: &Caller,
    row: &ThreadRow,
    change: TitleChange,
) -> Result<Json<Value>, ApiError> {
    if change.title.is_some() && !caller.scopes().may_read_content() {
        // A name is content: set only by who may read it.
        return Err(ApiError::PermissionDenied);
    }
    match state.engine.change_thread_title(caller, row, &change).await {
        Ok(_) => {
            state.threads_changed();
            Ok(Json(thread_entry(state, caller, row).await?))
        }
        // Erased meanwhile: as unknown as any other missing thread.
        Err(EngineError::NotFound(_)) => Err(ApiError::PermissionDenied),
        Err(other) => Err(other.into()),
    }
}

/// Renames (`name`) or unarchives (`archived: false`) one of the caller's own threads; the
/// change is audited (`thread.rename`, `thread.unarchive`).
#[utoipa::path(
    patch,
    path = "/v1/copilotkit/{tenant}/threads/{thread}",
    tag = "copilotkit",
    params(TenantPath, ThreadPath),
    request_body(content = Change, content_type = "application/json"),
    responses(
        (status = 200, description = "The thread as the list shows it now.", body = JsonObject),
        (status = 400, description = "a malformed id or body, a name of no or more than 200 characters, or a body that changes nothing (`bad_request`, naming it)", body = ErrorBody),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        (status = 413, description = "the body is too large (`payload_too_large`)", body = ErrorBody),
        TenantRefusals
    )
)]
async fn change(
    State(state): State<AppState>,
    CanRead { caller, tenant }: CanRead,
    Path((_, thread)): Path<(String, String)>,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    let body = crate::http::body::read_json_body(&state, body).await?;
    let change = parse_change(&body)?;
    let row = own_thread(&state, &tenant.name, &caller, &thread).await?;
    apply(&state, &caller, &row, TitleChange { title: change.name, archived: change.archived }).await
}

/// Archives one of the caller's own threads (audited, `thread.archive`): the list leaves it
/// out unless asked with `includeArchived=true`; it stays whole and runs as before.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}/threads/{thread}/archive",
    tag = "copilotkit",
    params(TenantPath, ThreadPath),
    responses(
        (status = 200, description = "The thread as the list shows it now.", body = JsonObject),
        ThreadRefusals
    )
)]
async fn archive(
    State(state): State<AppState>,
    OwnThread { caller, thread, .. }: OwnThread,
) -> Result<Json<Value>, ApiError> {
    apply(&state, &caller, &thread, TitleChange { title: None, archived: Some(true) }).await
}

/// Erases one of the caller's own threads, as `DELETE /v1/threads/{thread}` does.
#[utoipa::path(
    delete,
    path = "/v1/copilotkit/{tenant}/threads/{thread}",
    tag = "copilotkit",
    params(TenantPath, ThreadPath),
    responses(Erased, ThreadRefusals)
)]
async fn erase(
    State(state): State<AppState>,
    OwnThread { caller, thread, .. }: OwnThread<CanReadContent>,
) -> Result<StatusCode, ApiError> {
    erase_thread(&state, &caller, &thread).await
}

/// The conversation of one of the caller's own threads, in the runtime's shape: a tool call is
/// `{id, name, args}`.
#[utoipa::path(
    get,
    path = "/v1/copilotkit/{tenant}/threads/{thread}/messages",
    tag = "copilotkit",
    params(TenantPath, ThreadPath),
    responses(
        (status = 200, description = "`{messages: [{id, role, content?, toolCalls?: [{id, name, args}], toolCallId?}]}` with the gateway's ids.", body = JsonObject),
        OwnContentRefusals
    )
)]
async fn messages(
    State(state): State<AppState>,
    OwnThread { thread, .. }: OwnThread<CanReadContent>,
) -> Result<Json<Value>, ApiError> {
    let messages = state.engine.messages(&thread).await?;
    let messages = serde_json::to_value(&messages).map_err(|e| ApiError::Internal(Box::new(e)))?;
    let messages: Vec<Value> = match messages {
        Value::Array(items) => items.into_iter().map(runtime_message).collect(),
        _ => Vec::new(),
    };
    Ok(Json(json!({ "messages": messages })))
}

/// An AG-UI message in the runtime's thread-messages shape: tool calls flattened.
fn runtime_message(mut message: Value) -> Value {
    if let Some(calls) = message.get_mut("toolCalls").and_then(Value::as_array_mut) {
        for call in calls.iter_mut() {
            let function = call.get("function").cloned().unwrap_or(Value::Null);
            *call = json!({
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": function.get("name").cloned().unwrap_or(Value::Null),
                "args": function.get("arguments").cloned().unwrap_or(Value::Null),
            });
        }
    }
    message
}

/// `{tenant}` in the document: the path names the tenant on these routes.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(super) struct TenantPath {
    /// A configured tenant's name; unknown tenants are `404 not_found`.
    tenant: String,
}
