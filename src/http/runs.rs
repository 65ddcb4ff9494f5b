//! `POST /v1/agui/agents/{agent}`: the AG-UI run route (SPEC §2–§4).
//!
//! The order of checks is the contract: the caller (401, before any body byte is read), its
//! tenant (403/404), the caller's permission to start the agent (403, before the agent is looked
//! up, so that an agent the caller may not use and one that does not exist answer alike) and
//! the agent (404) — all in the [`CanStart`] extractor —, `Accept` (406) and `Content-Type` (415), the body size while
//! reading it (413), its shape (400 naming the field), the caller's and the thread's open
//! streams on this instance (429 `too_many_streams`, before the engine is asked anything), then
//! the engine's decisions (a key's resume: 403), which either open the stream or refuse the run
//! with a lone `RUN_ERROR` in a 200 stream. An open stream whose key is revoked, or whose
//! person's token expires, ends with `RUN_ERROR revoked`.
//!
//! `POST /v1/agui/agents/{agent}/connect` streams a thread rather than one run (see
//! `engine/stream/connect.rs`): the same caller, tenant, agent, header and body checks and the same
//! stream slots, then 403 alike for a thread with no turn yet and one the caller may not read.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use axum::Extension;
use bytes::Bytes;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::content::check_newest_user_message;
use super::error::{documented, ApiError, ErrorBody, ErrorCode, Responses};
use super::error::{BODY_TIMEOUT, INTERNAL, UNAUTHENTICATED, UNKNOWN_AGENT};
use super::openapi::{AgentPath, BinaryFrames, SseEvent, TenantQuery};
use super::permissions::CanStart;
use super::sse;
use super::sse::{Framing, SlotLimits, SlotRefused, StreamSlots};
use super::state::AppState;
use crate::auth::{Caller, ThreadSight};
use crate::config::AgentConfig;
use crate::engine::request::app_requests::AppPlan;
use crate::engine::{ConnectRequest, RunPlan, RunRequest};
use crate::ids::{EventId, RunId, TenantId, ThreadId};
use crate::protocol::RunAgentInput;

/// The routes, counting their open streams in `slots` (the server's one count, which the
/// CopilotKit runtime's routes share).
pub fn router(slots: Arc<StreamSlots>) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(run))
        .routes(routes!(connect))
        // The route measures its own body limit while reading (413), from config.
        .layer(DefaultBodyLimit::disable())
        .layer(Extension(slots))
}

/// Runs the agent (a new turn, a reconnect with `Last-Event-ID`, a replay of a known runId, or a
/// resume of its interrupts).
#[utoipa::path(
    post,
    path = "/v1/agui/agents/{agent}",
    tag = "runs",
    params(
        AgentPath,
        TenantQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Continue the run after this event id."),
    ),
    request_body(content = RunAgentInput, content_type = "application/json"),
    responses(
        (status = 200, description = "The run: AG-UI events as server-sent events, each with an `id:` (`<turn>.<seq>`). A refused run is a 200 stream of one `RUN_ERROR` with its `code`. With `Accept: application/vnd.ag-ui.event+proto` (named before `text/event-stream`), the same events as length-prefixed protobuf frames, each id in its `metadata.eventId`.", content((SseEvent = "text/event-stream"), (BinaryFrames = "application/vnd.ag-ui.event+proto"))),
        (status = 400, description = "a bad body, id, message or Last-Event-ID (`bad_request`, `unsupported_content`, `tool_not_admitted`, `bad_last_event_id`): among them a body of more than `limits.max_json_values` JSON values, a client tool schema past `limits.max_tool_schema_bytes` or `limits.max_tool_schema_depth`, text holding a NUL character, and a content part of the newest user message the agent does not take (`unsupported_content`, naming `messages[i].content[j]`), each naming the field", body = ErrorBody),
        StreamRefusals
    )
)]
async fn run(State(state): State<AppState>, request: StreamRequest) -> Result<Response, ApiError> {
    run_stream(state, request).await
}

/// The run route's work once its request is checked: also what the CopilotKit runtime's
/// `agent/{agent}/run` does (one run path for both).
pub(super) async fn run_stream(state: AppState, request: StreamRequest) -> Result<Response, ApiError> {
    let StreamRequest { caller, tenant, agent, slots, framing, last_event_id, body: bytes } = request;
    let agent = &agent;
    let input = parse_input(&bytes)?;
    // Parsed: the raw body is not held beside its copy while the run starts.
    drop(bytes);
    let thread_id = ThreadId::parse(&input.thread_id).map_err(|m| ApiError::bad_request("threadId", m))?;
    let run_id = RunId::parse(&input.run_id).map_err(|m| ApiError::bad_request("runId", m))?;
    check_newest_user_message(&input, agent, &state.config.limits)?;
    check_tools(&input, agent)?;
    check_tool_schemas(&input, &state.config.limits)?;
    let state_writes = editable_state(&input, agent);
    let slot = take_stream_slot(&slots, &state, &tenant.name, &caller, &thread_id)?;
    let tenant_id = tenant_id(&tenant)?;

    let request = RunRequest {
        tenant: &tenant_id,
        caller: &caller,
        agent: &agent.name,
        thread_id: &thread_id,
        run_id: &run_id,
        input: &input,
        last_event_id: last_event_id.as_ref(),
        state_writes,
    };
    // An MCP App's own request is answered for the App, not by a turn (mcp_apps.rs).
    let plan = match super::mcp_apps::app_request_of(&input)? {
        Some(app) => match state.engine.begin_app_request(request, app).await? {
            AppPlan::Answered(result) => {
                return super::mcp_apps::answered(&input, result, slot, framing, state.auth.clock().now_ms())
            }
            AppPlan::Run(plan) => plan,
        },
        None => state.engine.begin_run(request).await?,
    };
    Ok(match plan {
        RunPlan::Follow(plan) => {
            // A new thread, or a new turn moving one up its owner's list.
            state.threads_changed();
            let sight = ThreadSight {
                tenant: tenant.name.clone(),
                thread_id: plan.thread_id.clone(),
                thread_pk: plan.thread_pk,
            };
            tracing::info!(
                tenant = %tenant.name,
                thread = %plan.thread_id,
                turn = %plan.turn_id,
                agent = %agent.name,
                caller = %caller.label(),
                "run"
            );
            sse::serve_events(state.engine.stream(plan), lifetime(&state, caller, sight, framing), slot)
        }
        RunPlan::Refused(refusal) => {
            let refused =
                sse::lone_run_error(refusal.code, refusal.message, refusal.figures, state.auth.clock().now_ms())?;
            sse::response_in_slot(futures_util::stream::iter([refused]), slot, framing)
        }
    })
}

/// Watches the thread: its conversation and board, the turn going on, and every later turn of
/// it as runs of their own, until the client leaves or `limits.stream_max_secs`.
#[utoipa::path(
    post,
    path = "/v1/agui/agents/{agent}/connect",
    tag = "runs",
    params(
        AgentPath,
        TenantQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Continue the connect stream after this event id."),
    ),
    request_body(content = ConnectInput, content_type = "application/json", description = "A RunAgentInput, of which only `threadId` is read (and `runId`, which the stream's runs carry, and `protocolVersion`); the rest is ignored."),
    responses(
        (status = 200, description = "The thread: `RUN_STARTED`, `MESSAGES_SNAPSHOT` (with `threads:content`), `STATE_SNAPSHOT`, the turn going on, then each later turn as a run of its own; every event has an `id:` (`<turn>.<seq>[.<part>]`) that `Last-Event-ID` continues after, on any instance. With `Accept: application/vnd.ag-ui.event+proto`, the same as protobuf frames.", content((SseEvent = "text/event-stream"), (BinaryFrames = "application/vnd.ag-ui.event+proto"))),
        (status = 400, description = "a bad body, id or Last-Event-ID (`bad_request`, `bad_last_event_id`)", body = ErrorBody),
        StreamRefusals
    )
)]
async fn connect(State(state): State<AppState>, request: StreamRequest) -> Result<Response, ApiError> {
    connect_stream(state, request, ConnectEnd::Open).await
}

/// Where a connect stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnectEnd {
    /// It follows the thread's later turns until the client leaves (`…/connect`).
    Open,
    /// Once it has shown the thread as it stands (the latest turn followed to its end, or to a
    /// wait nothing has followed yet: a wait already decided is shown and followed on), as the
    /// CopilotKit runtime's connect ends; a thread with no turn, or one the caller may not
    /// read, is an empty stream, as that runtime answers for a thread it does not know (alike,
    /// so it tells nothing).
    CaughtUp,
}

/// The connect route's work once its request is checked (see [`ConnectEnd`]).
pub(super) async fn connect_stream(
    state: AppState,
    request: StreamRequest,
    end: ConnectEnd,
) -> Result<Response, ApiError> {
    let StreamRequest { caller, tenant, slots, framing, last_event_id, body: bytes, .. } = request;
    let input: ConnectInput = parse_body(&bytes)?;
    let thread_id = ThreadId::parse(&input.thread_id).map_err(|m| ApiError::bad_request("threadId", m))?;
    let run_id = match input.run_id.as_deref() {
        Some(run_id) => RunId::parse(run_id).map_err(|m| ApiError::bad_request("runId", m))?.as_str().to_string(),
        None => format!("connect-{}", uuid::Uuid::new_v4().simple()),
    };
    let slot = take_stream_slot(&slots, &state, &tenant.name, &caller, &thread_id)?;
    let tenant_id = tenant_id(&tenant)?;
    let pre_1_0 = input.protocol_version.as_deref().is_none_or(|v| v.split('.').next() == Some("0"));
    let plan = state
        .engine
        .begin_connect(ConnectRequest {
            tenant: &tenant_id,
            caller: &caller,
            thread_id: &thread_id,
            run_id: &run_id,
            pre_1_0,
            last_event_id: last_event_id.as_ref(),
            ends_caught_up: end == ConnectEnd::CaughtUp,
        })
        .await;
    let plan = match (plan, end) {
        (Ok(plan), _) => plan,
        (Err(crate::engine::EngineError::PermissionDenied), ConnectEnd::CaughtUp) => {
            return Ok(sse::response_in_slot(futures_util::stream::empty(), slot, framing));
        }
        (Err(error), _) => return Err(error.into()),
    };
    tracing::info!(tenant = %tenant.name, thread = %plan.thread_id(), caller = %caller.label(), "connect");
    let sight = ThreadSight {
        tenant: tenant.name.clone(),
        thread_id: plan.thread_id().to_string(),
        thread_pk: plan.thread_pk(),
    };
    let events = state.engine.connect_stream(plan);
    let lifetime = lifetime(&state, caller, sight, framing);
    Ok(sse::serve_events(events, lifetime, slot))
}

/// The refusals both stream routes answer before a stream opens, as OpenAPI documents them
/// (each with the error body).
struct StreamRefusals;

impl utoipa::IntoResponses for StreamRefusals {
    fn responses() -> Responses {
        documented(&[
            UNAUTHENTICATED,
            (403, "the caller may not do this, or the thread is not theirs or has no turn yet, answered alike (`permission_denied`)"),
            UNKNOWN_AGENT,
            (406, "Accept names neither text/event-stream, the AG-UI binary type nor a wildcard (`not_acceptable`)"),
            BODY_TIMEOUT,
            (413, "the body exceeds `limits.max_body_bytes`, or the newest user message's content parts exceed `limits.max_content_part_bytes` (one part) or `limits.max_content_bytes` (together) (`payload_too_large`, naming the part)"),
            (415, "Content-Type is not application/json (`unsupported_media_type`)"),
            (429, "the caller or the thread holds as many open streams on this instance as `limits.max_streams_per_caller` / `limits.max_streams_per_thread` allow (`too_many_streams`); nothing was started"),
            INTERNAL,
        ])
    }
}

/// What both stream routes check, in the contract's order, before either reads what the body
/// says: the caller may start the agent ([`CanStart`]: 401, 403, 404), `Accept` (406) and
/// `Content-Type` (415), the `Last-Event-ID` (400), and the body, read within its limits (413,
/// 408). Each route then parses the body as its own input.
pub struct StreamRequest {
    caller: Caller,
    tenant: crate::config::TenantConfig,
    agent: AgentConfig,
    slots: Arc<StreamSlots>,
    /// SSE or the binary transport, as `Accept` asked.
    framing: Framing,
    last_event_id: Option<EventId>,
    body: Bytes,
}

impl StreamRequest {
    /// A stream request of the CopilotKit runtime's single-route envelope: the caller, tenant
    /// and agent already checked, the envelope's `body` as the body; `Accept` and
    /// `Last-Event-ID` from the request's head, as the routes read them.
    pub(super) fn from_envelope(
        parts: &axum::http::request::Parts,
        caller: Caller,
        tenant: crate::config::TenantConfig,
        agent: AgentConfig,
        body: Bytes,
    ) -> Result<StreamRequest, ApiError> {
        let slots = stream_slots(parts)?;
        let framing = check_accept(&parts.headers)?;
        let last_event_id = parse_last_event_id(&parts.headers)?;
        Ok(StreamRequest { caller, tenant, agent, slots, framing, last_event_id, body })
    }
}

/// The server's count of open streams, which the routes were built with.
fn stream_slots(parts: &axum::http::request::Parts) -> Result<Arc<StreamSlots>, ApiError> {
    parts
        .extensions
        .get::<Arc<StreamSlots>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("the stream routes were built without their slots".into()))
}

impl FromRequest<AppState> for StreamRequest {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let CanStart { caller, tenant, agent } = CanStart::from_request_parts(&mut parts, state).await?;
        let slots = stream_slots(&parts)?;
        let framing = check_accept(&parts.headers)?;
        check_content_type(&parts.headers)?;
        let last_event_id = parse_last_event_id(&parts.headers)?;
        let body = super::body::read_json_body(state, body).await?;
        Ok(StreamRequest { caller, tenant, agent, slots, framing, last_event_id, body })
    }
}

/// The configured tenant the request named, as the engine takes it (config checked its name at
/// load, so this refuses nothing a request can name).
fn tenant_id(tenant: &crate::config::TenantConfig) -> Result<TenantId, ApiError> {
    TenantId::parse(&tenant.name).map_err(|message| ApiError::bad_request("tenant", message))
}

/// How long a stream of `caller` showing `sight`'s thread lives (`limits.keepalive_secs`,
/// `limits.stream_max_secs`), and what ends it early: the server's shutdown, and the end of the
/// caller's right to read (a revoked key, an expired token, the thread erased). The turn is
/// never touched by a stream's end: it runs on, and whoever still may can follow it.
fn lifetime(state: &AppState, caller: Caller, sight: ThreadSight, framing: Framing) -> sse::Lifetime {
    let limits = &state.config.limits;
    let auth = state.auth.clone();
    sse::Lifetime {
        framing,
        keepalive: Duration::from_secs(limits.keepalive_secs),
        max_duration: Duration::from_secs(limits.stream_max_secs),
        clock: state.auth.clock().clone(),
        shutdown: state.shutting_down.clone(),
        access_ends: Box::pin(async move { auth.access_ends(&caller, Some(sight)).await }),
        frames: state.frames.clone(),
    }
}

/// What a connect request reads of its RunAgentInput: a whole RunAgentInput is welcome, and
/// every other member is ignored (a page's stale `messages` included), so the document asks
/// for no more than this.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct ConnectInput {
    /// The thread to watch.
    thread_id: String,
    /// Carried by every run of the stream; made up when absent.
    #[serde(default)]
    run_id: Option<String>,
    /// `1.0` for AG-UI 1.0 clients; absent or `0.x`: the pre-1.0 interrupt shape.
    #[serde(default)]
    protocol_version: Option<String>,
}

/// The body as the route's input: 400 naming the field that is off, or the body when it is no
/// JSON or no RunAgentInput at all.
fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let input: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request("body", format!("not JSON ({inner})"))
        } else if path == "." {
            ApiError::bad_request("body", format!("not a RunAgentInput ({inner})"))
        } else {
            ApiError::bad_request(&path, inner)
        }
    })?;
    deserializer.end().map_err(|error| ApiError::bad_request("body", format!("not JSON ({error})")))?;
    Ok(input)
}

/// A place among this instance's open streams for the caller's stream on the thread, or 429
/// `too_many_streams`. A person is one caller whichever app they come through; a key is one.
fn take_stream_slot(
    slots: &Arc<StreamSlots>,
    state: &AppState,
    tenant: &str,
    caller: &Caller,
    thread_id: &ThreadId,
) -> Result<sse::StreamSlot, ApiError> {
    let limits = &state.config.limits;
    let limits = SlotLimits { per_caller: limits.max_streams_per_caller, per_thread: limits.max_streams_per_thread };
    let caller_key = format!("{tenant}/{}", caller.label());
    let thread_key = format!("{tenant}/{}", thread_id.as_str());
    slots.take(caller_key, thread_key, limits).map_err(|refused| {
        let message = match refused {
            SlotRefused::Caller(limit) => format!(
                "you have {limit} streams open on this gateway instance (limits.max_streams_per_caller); close one first"
            ),
            SlotRefused::Thread(limit) => format!(
                "thread '{}' has {limit} streams open on this gateway instance (limits.max_streams_per_thread)",
                thread_id.as_str()
            ),
        };
        ApiError::TooMany { code: ErrorCode::TooManyStreams, message }
    })
}

/// How the answer is framed, read off `Accept` (§2.3): the first range that names
/// `text/event-stream` or the binary media type decides; a wildcard (`*/*`, `text/*`) gets SSE
/// when neither is named (the official encoder would pick protobuf for `*/*`; we do not, so
/// `curl` and browsers keep SSE). An absent Accept is SSE. A range with `q=0` names nothing. No
/// acceptable range: 406.
fn check_accept(headers: &HeaderMap) -> Result<Framing, ApiError> {
    let mut values = headers.get_all(header::ACCEPT).iter().peekable();
    if values.peek().is_none() {
        return Ok(Framing::Sse);
    }
    let mut wildcard = false;
    for value in values {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            // Parameter names are case-insensitive (RFC 9110 §5.6.6): `Q=0` refuses too.
            let refused = parts.any(|p| {
                let p = p.trim().replace(' ', "").to_ascii_lowercase();
                p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
            });
            if refused {
                continue;
            }
            match media.as_str() {
                "text/event-stream" => return Ok(Framing::Sse),
                crate::protocol::proto::MEDIA_TYPE => return Ok(Framing::Binary),
                "*/*" | "text/*" | "" => wildcard = true,
                _ => {}
            }
        }
    }
    if wildcard {
        Ok(Framing::Sse)
    } else {
        Err(ApiError::NotAcceptable)
    }
}

pub(super) fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    match media.as_deref() {
        Some("application/json") => Ok(()),
        Some(other) if other.starts_with("application/") && other.ends_with("+json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

fn parse_last_event_id(headers: &HeaderMap) -> Result<Option<EventId>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest {
        code: ErrorCode::BadLastEventId,
        message: "Last-Event-ID is not an event id this gateway sent".into(),
    };
    let text = value.to_str().map_err(|_| bad())?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    EventId::parse(text).map(Some).ok_or_else(bad)
}

/// A run's body: its RunAgentInput, with a `command.resume` read as the resume it asks for.
fn parse_input(bytes: &[u8]) -> Result<RunAgentInput, ApiError> {
    Ok(parse_body::<RunAgentInput>(bytes)?.with_command_resume())
}

/// The keys of the run's `state` the agent lists as editable, as sent; every other key is
/// ignored (§7). The engine checks those the run changes against their schemas.
fn editable_state(input: &RunAgentInput, agent: &AgentConfig) -> serde_json::Map<String, serde_json::Value> {
    let Some(state) = input.state.as_ref().and_then(|s| s.as_object()) else { return serde_json::Map::new() };
    agent.editable_state.keys().filter_map(|key| Some((key.clone(), state.get(key)?.clone()))).collect()
}

/// Client-declared tools are admitted only when the agent lists them (§2 `tools`).
fn check_tools(input: &RunAgentInput, agent: &AgentConfig) -> Result<(), ApiError> {
    match input.tools().iter().find(|tool| !agent.frontend_tools.contains(&tool.name)) {
        Some(tool) => Err(ApiError::BadRequest {
            code: ErrorCode::ToolNotAdmitted,
            message: format!("tools: agent '{}' does not admit the client tool '{}'", agent.name, tool.name),
        }),
        None => Ok(()),
    }
}

/// A client tool's schema is kept with the turn and sent to the model on every call: each is
/// held to `limits.max_tool_schema_bytes` (as serialized) and `limits.max_tool_schema_depth`.
fn check_tool_schemas(input: &RunAgentInput, limits: &crate::config::Limits) -> Result<(), ApiError> {
    for (index, tool) in input.tools().iter().enumerate() {
        let Some(schema) = &tool.parameters else { continue };
        let field = format!("tools[{index}].parameters");
        let depth = json_depth(schema);
        if depth > limits.max_tool_schema_depth {
            return Err(ApiError::bad_request(
                &field,
                format!(
                    "the schema nests {depth} levels deep, more than limits.max_tool_schema_depth ({})",
                    limits.max_tool_schema_depth
                ),
            ));
        }
        let mut size = ByteCount(0);
        serde_json::to_writer(&mut size, schema).map_err(|e| ApiError::Internal(Box::new(e)))?;
        if size.0 > limits.max_tool_schema_bytes {
            return Err(ApiError::bad_request(
                &field,
                format!(
                    "the schema is {} bytes, more than limits.max_tool_schema_bytes ({})",
                    size.0, limits.max_tool_schema_bytes
                ),
            ));
        }
    }
    Ok(())
}

/// Objects and arrays nested in `value` (a scalar is 0, `{}` is 1).
fn json_depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(members) => 1 + members.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Counts what is written to it, keeping nothing.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
