//! The CopilotKit runtime's own routes (SPEC §2), so a CopilotKit app points its `runtimeUrl`
//! at the gateway with no Node runtime between: `{base}` is `/v1/copilotkit/{tenant}`
//! ([`super::permissions::COPILOTKIT_BASE`]; the tenant is read from the path there), or
//! `{copilotkit_path}/{tenant}` where the configuration publishes it elsewhere (mapped onto
//! the same routes before routing, [`super::rebase`]).
//!
//! | route | what |
//! |---|---|
//! | `GET {base}/info` | the agents the caller may start, in the shape `@copilotkit/core` reads |
//! | `POST {base}/agent/{agent}/run` | the AG-UI run route, unchanged ([`super::runs::run_stream`]) |
//! | `POST {base}/agent/{agent}/connect` | the gateway's connect stream, ended once it shows the thread as it stands |
//! | `POST {base}/agent/{agent}/stop/{thread}` | cancels the thread's running turn |
//! | `POST {base}` | the single-route envelope `{method, params, body}` of the four above |
//! | `{base}/threads…` | the thread routes `useThreads` calls ([`threads`]) |
//! | `POST {base}/threads/subscribe`, `GET {base}/threads/realtime/websocket` | the live thread list ([`realtime`]) |
//!
//! The tenant is the path's (CopilotKit joins paths to the `runtimeUrl`, so a query would be
//! lost); the caller is the `Authorization` header the provider's `headers` send, checked as on
//! every route: the same credentials, scopes, refusals, limits and audit. A run goes through the
//! same code as `POST /v1/agui/agents/{agent}`: one run path, not a copy.

mod grants;
mod realtime;
mod threads;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{documented, ApiError, ErrorBody, Refusal, Responses, TenantRefusals};
use super::error::{BAD_THREAD_ID, INTERNAL, TOO_MANY_STREAMS, UNAUTHENTICATED, UNKNOWN_AGENT};
use super::openapi::{AgentPath, JsonObject, SseEvent, ThreadPath};
use super::permissions::{startable_agent, Authorized, CanStart};
use super::runs::{connect_stream, run_stream, ConnectEnd, StreamRequest};
use super::sse::StreamSlots;
use super::state::AppState;
use crate::engine::EngineError;
use crate::ids::ThreadId;
use threads::TenantPath;

/// The version `GET {base}/info` reports: CopilotKit's clients read it as the runtime's.
const RUNTIME_VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn router(slots: Arc<StreamSlots>) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(info))
        .routes(routes!(envelope))
        .routes(routes!(run))
        .routes(routes!(connect))
        .routes(routes!(stop))
        .merge(threads::router())
        .merge(realtime::router())
        // The stream routes measure their own body limit while reading (413), from config.
        .layer(DefaultBodyLimit::disable())
        .layer(Extension(slots))
}

/// What the runtime describes itself as: the caller's agents, and which of CopilotKit's
/// features the gateway serves (threads listed and changed over REST, the list kept live over
/// the socket `intelligence.wsUrl` names; no transcription, suggestions or generative UI).
/// Without a `Host` to name the socket by, the list is not advertised as live.
fn runtime_info(state: &AppState, auth: &Authorized, headers: &HeaderMap, uri: &Uri) -> Value {
    let agents: serde_json::Map<String, Value> = state
        .config
        .agents
        .iter()
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&auth.tenant.name))
        .filter(|agent| auth.caller.scopes().may_start(&agent.name))
        .map(|agent| {
            let capabilities = crate::agents::capabilities::capabilities(agent, &state.config);
            (
                agent.name.clone(),
                json!({
                    "name": agent.name,
                    "description": agent.description,
                    "className": "agui-gateway",
                    "capabilities": capabilities,
                }),
            )
        })
        .collect();
    let socket = realtime::socket_url(state, headers, uri, &auth.tenant.name);
    let mut info = json!({
        "version": RUNTIME_VERSION,
        "agents": agents,
        "mode": "sse",
        "threadEndpoints": { "list": true, "inspect": true, "mutations": true, "realtimeMetadata": socket.is_some() },
        "audioFileTranscriptionEnabled": false,
        "suggestions": false,
        "a2uiEnabled": false,
        "openGenerativeUIEnabled": false,
        "telemetryDisabled": true,
    });
    if let Some(socket) = socket {
        // `mode` stays "sse": runs go over this gateway's routes; only the list's socket is
        // read from here.
        info["intelligence"] = json!({ "wsUrl": socket });
    }
    info
}

/// The runtime's description: the agents this caller may start (as `/v1/agents` lists them),
/// keyed by name, and what the gateway serves.
#[utoipa::path(
    get,
    path = "/v1/copilotkit/{tenant}/info",
    tag = "copilotkit",
    params(TenantPath),
    responses(
        (status = 200, description = "`{version, agents: {<name>: {name, description, className, capabilities}}, mode: \"sse\", threadEndpoints: {list, inspect, mutations, realtimeMetadata}, intelligence: {wsUrl}, …}`, as `@copilotkit/core` reads it; `wsUrl` is the live thread list's socket.", body = JsonObject),
        (status = 403, description = "a credential of another tenant (`permission_denied`)", body = ErrorBody),
        TenantRefusals
    )
)]
async fn info(State(state): State<AppState>, auth: Authorized, headers: HeaderMap, uri: Uri) -> Json<Value> {
    Json(runtime_info(&state, &auth, &headers, &uri))
}

/// What the runtime's stream routes, and the envelope that carries them, refuse besides a bad
/// body and a caller who may not start the agent.
const STREAM_REFUSALS: [Refusal; 8] = [
    UNAUTHENTICATED,
    UNKNOWN_AGENT,
    (406, "Accept names no stream type (`not_acceptable`)"),
    (408, "the body was too slow (`request_timeout`)"),
    (413, "the body is too large (`payload_too_large`)"),
    (415, "Content-Type is not JSON (`unsupported_media_type`)"),
    TOO_MANY_STREAMS,
    INTERNAL,
];

/// A caller who may not start the agent, or a thread not theirs: what `agent/stop` refuses,
/// on its route and in the envelope.
const MAY_NOT_STOP: Refusal =
    (403, "the caller may not start the agent, or the thread is not theirs (`permission_denied`)");

/// What `…/agent/{agent}/run` and `…/connect` refuse besides a bad body (each with the error
/// body).
struct StartRefusals;

impl utoipa::IntoResponses for StartRefusals {
    fn responses() -> Responses {
        let may_not_start = (403, "the caller may not start the agent (`permission_denied`)");
        documented(&[&[may_not_start][..], &STREAM_REFUSALS[..]].concat())
    }
}

/// What the single-route envelope refuses besides what is not an envelope: what its methods'
/// routes refuse (each with the error body).
struct EnvelopeRefusals;

impl utoipa::IntoResponses for EnvelopeRefusals {
    fn responses() -> Responses {
        documented(&[&[MAY_NOT_STOP][..], &STREAM_REFUSALS[..]].concat())
    }
}

/// Runs the agent: exactly `POST /v1/agui/agents/{agent}` (a new turn, a replay of a known
/// runId, a resume, `Last-Event-ID`), with the tenant from the path.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}/agent/{agent}/run",
    tag = "copilotkit",
    params(TenantPath, AgentPath),
    request_body(content = crate::protocol::RunAgentInput, content_type = "application/json"),
    responses(
        (status = 200, description = "The run, as on `POST /v1/agui/agents/{agent}`.", content((SseEvent = "text/event-stream"))),
        (status = 400, description = "a bad body, id or message, as on the AG-UI route", body = ErrorBody),
        StartRefusals
    )
)]
async fn run(State(state): State<AppState>, request: StreamRequest) -> Result<Response, ApiError> {
    run_stream(state, request).await
}

/// Restores the thread: the gateway's connect stream (`RUN_STARTED`, `MESSAGES_SNAPSHOT`,
/// `STATE_SNAPSHOT`, a turn going on followed live, a waiting turn's interrupt), ended once
/// it shows the thread as it stands, as CopilotKit's connect ends: the latest turn to its end,
/// or to a wait not yet decided (a wait already decided is shown and followed on, so a page
/// that lost a resumed run's stream gets the rest of it). Any instance answers it alike. A
/// thread with no turn yet, or one the caller may not read, is an empty stream.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}/agent/{agent}/connect",
    tag = "copilotkit",
    params(TenantPath, AgentPath),
    request_body(content = JsonObject, content_type = "application/json", description = "A RunAgentInput, of which `threadId`, `runId` and `protocolVersion` are read."),
    responses(
        (status = 200, description = "The thread as it stands: its latest turn followed, on any instance, to its end or to a wait not yet decided (a decided wait is followed past), each event once; empty for a thread with no turn or not the caller's. Each event's `id:` continues with `Last-Event-ID`.", content((SseEvent = "text/event-stream"))),
        (status = 400, description = "a bad body, id or Last-Event-ID (`bad_request`, `bad_last_event_id`)", body = ErrorBody),
        StartRefusals
    )
)]
async fn connect(State(state): State<AppState>, request: StreamRequest) -> Result<Response, ApiError> {
    connect_stream(state, request, ConnectEnd::CaughtUp).await
}

/// What stopping a thread's turn refuses (each with the error body).
struct StopRefusals;

impl utoipa::IntoResponses for StopRefusals {
    fn responses() -> Responses {
        documented(&[BAD_THREAD_ID, UNAUTHENTICATED, MAY_NOT_STOP, UNKNOWN_AGENT, INTERNAL])
    }
}

/// The Stop button: cancels the thread's running turn (it ends `cancelled` for every stream
/// following it). Nothing running is not an error, as for CopilotKit's runtime.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}/agent/{agent}/stop/{thread}",
    tag = "copilotkit",
    params(TenantPath, AgentPath, ThreadPath),
    responses(
        (status = 200, description = "`{stopped: true, turn}` when a running turn is being cancelled, `{stopped: false, message}` when none runs.", body = JsonObject),
        StopRefusals
    )
)]
async fn stop(
    State(state): State<AppState>,
    CanStart { caller, tenant, .. }: CanStart,
    Path((_, _, thread)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    stop_thread(&state, &caller, &tenant.name, &thread).await
}

async fn stop_thread(
    state: &AppState,
    caller: &crate::auth::Caller,
    tenant: &str,
    thread: &str,
) -> Result<Json<Value>, ApiError> {
    let thread_id = ThreadId::parse(thread).map_err(|m| ApiError::bad_request("threadId", m))?;
    match state.engine.cancel(tenant, caller, &thread_id).await {
        Ok(turn) => Ok(Json(json!({ "stopped": true, "turn": turn }))),
        Err(EngineError::NotRunning(message)) => Ok(Json(json!({ "stopped": false, "message": message }))),
        Err(EngineError::NotFound(_)) => Err(ApiError::PermissionDenied),
        Err(other) => Err(other.into()),
    }
}

/// What [`CanStart`] asks besides the agent: read on threads and their content.
fn may_read_content(auth: &Authorized) -> Result<(), ApiError> {
    let scopes = auth.caller.scopes();
    match scopes.may_read_threads() && scopes.may_read_content() {
        true => Ok(()),
        false => Err(ApiError::PermissionDenied),
    }
}

/// The single-route envelope.
#[derive(serde::Deserialize, utoipa::ToSchema)]
struct Envelope {
    /// `info`, `agent/run`, `agent/connect` or `agent/stop`.
    method: String,
    /// `agentId` (and `threadId` for `agent/stop`).
    #[serde(default)]
    params: Option<serde_json::Map<String, Value>>,
    /// The method's body: a RunAgentInput for `agent/run` and `agent/connect`.
    #[serde(default)]
    #[schema(value_type = Object)]
    body: Option<Value>,
}

/// CopilotKit's single-route mode: one `POST {base}` carrying `{method, params, body}`, each
/// method answered as its own route answers it. The caller is checked before the body is read;
/// the agent, named inside, after.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}",
    tag = "copilotkit",
    params(TenantPath),
    request_body(content = Envelope, content_type = "application/json"),
    responses(
        (status = 200, description = "What the method's own route answers: the runtime info (JSON), a run or connect stream (SSE), or the stop's answer.", content((JsonObject = "application/json"), (SseEvent = "text/event-stream"))),
        (status = 400, description = "not an envelope, an unknown method or a missing parameter (`bad_request`, naming it), or what the method's route refuses", body = ErrorBody),
        EnvelopeRefusals
    )
)]
async fn envelope(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    let auth = Authorized::from_request_parts(&mut parts, &state).await?;
    super::runs::check_content_type(&parts.headers)?;
    let bytes = super::body::read_json_body(&state, body).await?;
    let envelope: Envelope = serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request("body", format!("not a single-route envelope ({error})")))?;
    drop(bytes);
    let param = |name: &'static str| {
        envelope
            .params
            .as_ref()
            .and_then(|params| params.get(name))
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .map(str::to_string)
            .ok_or_else(|| ApiError::bad_request(&format!("params.{name}"), "missing"))
    };
    match envelope.method.as_str() {
        "info" => Ok(Json(runtime_info(&state, &auth, &parts.headers, &parts.uri)).into_response()),
        "agent/run" | "agent/connect" => {
            let agent = startable_agent(&state, &auth.caller, &auth.tenant, &param("agentId")?)?;
            may_read_content(&auth)?;
            let body = envelope.body.ok_or_else(|| ApiError::bad_request("body.body", "missing"))?;
            let body = serde_json::to_vec(&body).map_err(|e| ApiError::Internal(Box::new(e)))?;
            let request = StreamRequest::from_envelope(&parts, auth.caller, auth.tenant, agent, body.into())?;
            if envelope.method == "agent/run" {
                run_stream(state, request).await
            } else {
                connect_stream(state, request, ConnectEnd::CaughtUp).await
            }
        }
        "agent/stop" => {
            startable_agent(&state, &auth.caller, &auth.tenant, &param("agentId")?)?;
            may_read_content(&auth)?;
            Ok(stop_thread(&state, &auth.caller, &auth.tenant.name, &param("threadId")?).await?.into_response())
        }
        other => Err(ApiError::bad_request(
            "method",
            format!("'{other}' is not a method this runtime serves (info, agent/run, agent/connect, agent/stop)"),
        )),
    }
}
