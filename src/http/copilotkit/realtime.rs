//! Live updates of `useThreads`' list (SPEC §2: "live updates where the client subscribes"),
//! spoken as `@copilotkit/core` speaks them when `GET {base}/info` advertises
//! `threadEndpoints.realtimeMetadata: true` and `intelligence.wsUrl`:
//!
//! 1. `GET {base}/threads?agentId=…` answers a `joinCode` beside the page (the channel's name);
//! 2. `POST {base}/threads/subscribe` answers `{joinToken}`: a grant of the caller ([`grants`]),
//!    because a browser's WebSocket cannot send the `Authorization` header;
//! 3. the page opens a Phoenix socket (`vsn=2.0.0`, JSON arrays `[joinRef, ref, topic, event,
//!    payload]`) at `{wsUrl}/websocket?join_token=…`, joins `user_meta:{joinCode}` and hears
//!    `thread_metadata` pushes: `{operation: "created" | "updated" | "archived", threadId,
//!    thread}` with the thread as the list shows it, or `{operation: "deleted", threadId,
//!    deleted: {id}}`; and `thread_run_activity` pushes `{threadId, agentId, runId,
//!    eventType}` when a thread's turn starts or runs again (`RUN_STARTED`) or stops
//!    (`RUN_FINISHED`, `RUN_ERROR`): `<CopilotChat>` showing that thread connects to catch up
//!    with a run another tab or person started, and passes over news of the runs it made
//!    (`runId` names the thread's latest run).
//!
//! What a socket pushes is a difference between two readings of the caller's own threads, made
//! exactly as the list route makes its page: the database is the truth, so a rename on another
//! instance, an operator's erasure or a run anywhere reaches the page, within [`POLL`]; a change
//! made on this instance wakes its sockets at once. Only threads the caller may list are ever
//! read, so another person's thread is never pushed. The grant is kept in the database
//! ([`grants`]), so the socket may reach any instance, with or without a sticky balancer; the
//! socket ends when the caller's access ends (a revoked key, an expired token), at
//! `limits.stream_max_secs` (the page reconnects with the same grant) and at shutdown, and holds
//! one of the caller's stream slots while open.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::grants::{self, Grant};
#[cfg(test)]
use super::threads::join_code;
use super::threads::{own_entries, own_thread, TenantPath};
use crate::engine::threads::ThreadFilter;
use crate::http::error::{documented, ApiError, ErrorCode, ReadRefusals, Responses};
use crate::http::error::{INTERNAL, TOO_MANY_STREAMS, UNKNOWN_TENANT};
use crate::http::openapi::JsonObject;
use crate::http::permissions::{configured_tenant, CanRead};
use crate::http::sse::{SlotLimits, StreamSlots};
use crate::http::state::AppState;

/// How often an open socket reads its caller's threads again, for changes made where this
/// instance does not hear of them (another instance, an operator's command, retention).
const POLL: Duration = Duration::from_secs(2);

/// The least time between two readings woken by changes on this instance: a burst of runs is
/// one reading, not one each.
const WAKE_GAP: Duration = Duration::from_millis(100);

/// The newest threads a socket watches (the list's largest page): an older thread changed
/// meanwhile reaches the page when it reloads.
const WINDOW: u32 = 200;

/// The channel topic's prefix, and the events `@copilotkit/core` listens for.
const TOPIC_PREFIX: &str = "user_meta:";
const METADATA_EVENT: &str = "thread_metadata";
const RUN_ACTIVITY_EVENT: &str = "thread_run_activity";

/// What a thread's change says of its runs, as `thread_run_activity`'s `eventType`: a turn
/// started or running again (`RUN_STARTED`), or one that stopped as its stream ends it:
/// waiting, done or cancelled (`RUN_FINISHED`), or failed (`RUN_ERROR`). `None` when neither
/// its status nor its latest turn changed (a rename, an archive).
fn run_activity(before: Option<&Value>, now: &Value) -> Option<&'static str> {
    let changed =
        before.is_none_or(|before| before["status"] != now["status"] || before["lastRunAt"] != now["lastRunAt"]);
    if !changed {
        return None;
    }
    match now["status"].as_str()? {
        "running" => Some("RUN_STARTED"),
        "waiting" | "succeeded" | "cancelled" => Some("RUN_FINISHED"),
        "failed" => Some("RUN_ERROR"),
        _ => None,
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(subscribe)).routes(routes!(socket))
}

/// The agent a joined channel watches (`None`: all); `Err` for a topic no list named
/// ([`super::threads::join_code`]).
fn watched_agent(topic: &str) -> Result<Option<String>, ()> {
    match topic.strip_prefix(TOPIC_PREFIX).ok_or(())? {
        "all" => Ok(None),
        code => code.strip_prefix("agent.").filter(|agent| !agent.is_empty()).map(|a| Some(a.to_string())).ok_or(()),
    }
}

/// `intelligence.wsUrl` for `GET {base}/info`: the socket's address on the host the page
/// called, under the published base path. Without TLS of its own the gateway cannot tell
/// whether a proxy added it, so the address takes the page's scheme (`//host/…`).
pub(super) fn socket_url(state: &AppState, headers: &HeaderMap, uri: &Uri, tenant: &str) -> Option<String> {
    // HTTP/1.1 names the host in `Host`, HTTP/2 in the request's authority.
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .filter(|h| !h.is_empty())?;
    let scheme = if state.config.tls.cert_file.is_empty() { "" } else { "wss:" };
    let tenant = percent_encoding::utf8_percent_encode(tenant, percent_encoding::NON_ALPHANUMERIC);
    Some(format!("{scheme}//{host}{}/{tenant}/threads/realtime", state.config.copilotkit_path))
}

/// Grants the caller a live thread list: the `joinToken` its socket presents. The body
/// (`{}` from `useThreads`) is not read.
#[utoipa::path(
    post,
    path = "/v1/copilotkit/{tenant}/threads/subscribe",
    tag = "copilotkit",
    params(TenantPath),
    responses(
        (status = 200, description = "`{joinToken}`: opens `GET …/threads/realtime/websocket?join_token=…` on any instance of the gateway for a day (or until the caller's credential expires, if sooner); each socket ends when the caller's access does.", body = JsonObject),
        ReadRefusals
    )
)]
async fn subscribe(
    State(state): State<AppState>,
    CanRead { caller, tenant }: CanRead,
) -> Result<Json<Value>, ApiError> {
    let token = grants::mint(&state, &caller, &tenant.name).await?;
    Ok(Json(json!({ "joinToken": token })))
}

/// What the socket's address carries.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SocketQuery {
    /// A `joinToken` from `POST …/threads/subscribe`.
    join_token: Option<String>,
    /// The Phoenix serializer's version the client speaks (`2.0.0`); not read.
    #[allow(dead_code)]
    vsn: Option<String>,
}

/// What opening the socket refuses (each with the error body).
struct SocketRefusals;

impl utoipa::IntoResponses for SocketRefusals {
    fn responses() -> Responses {
        documented(&[
            (400, "not a WebSocket upgrade (`bad_request`)"),
            (
                401,
                "no join token, or one unknown, ended, of another tenant or of a key revoked since (`unauthenticated`)",
            ),
            UNKNOWN_TENANT,
            TOO_MANY_STREAMS,
            INTERNAL,
        ])
    }
}

/// The live thread list: a Phoenix socket (serializer 2.0.0) whose channel
/// `user_meta:{joinCode}` pushes `thread_metadata` as the caller's own threads change.
#[utoipa::path(
    get,
    path = "/v1/copilotkit/{tenant}/threads/realtime/websocket",
    tag = "copilotkit",
    params(TenantPath, SocketQuery),
    responses(
        (status = 101, description = "The WebSocket. Frames are `[joinRef, ref, topic, event, payload]`: `phx_join` of `user_meta:{joinCode}`, `heartbeat` and `phx_leave` are answered `phx_reply` `{status: \"ok\"}`; the channel then hears `thread_metadata` `{operation, threadId, thread}` (`created`, `updated`, `archived`) and `{operation: \"deleted\", threadId, deleted: {id}}`, and `thread_run_activity` `{threadId, agentId, runId, eventType}` (`RUN_STARTED`, `RUN_FINISHED`, `RUN_ERROR`) as a thread's turn starts or stops."),
        SocketRefusals
    )
)]
async fn socket(
    State(state): State<AppState>,
    Extension(slots): Extension<Arc<StreamSlots>>,
    Path(tenant): Path<String>,
    Query(query): Query<SocketQuery>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let tenant = configured_tenant(&state, &tenant)?;
    let grant = grants::find(&state, query.join_token.as_deref().unwrap_or_default(), &tenant.name).await?;
    let upgrade = upgrade.map_err(|rejection| ApiError::bad_request("upgrade", rejection.body_text()))?;
    let limits = &state.config.limits;
    let limits = SlotLimits { per_caller: limits.max_streams_per_caller, per_thread: limits.max_streams_per_thread };
    // Counted against the caller, not against any one thread: the key is this socket's own.
    let caller_key = format!("{}/{}", tenant.name, grant.caller.label());
    let socket_key = format!("{}/threads-realtime/{}", tenant.name, uuid::Uuid::new_v4());
    let slot = slots.take(caller_key, socket_key, limits).map_err(|_| ApiError::TooMany {
        code: ErrorCode::TooManyStreams,
        message: "you have as many streams open on this gateway instance as limits.max_streams_per_caller allows"
            .to_string(),
    })?;
    Ok(upgrade.on_upgrade(move |socket| async move {
        let _slot = slot;
        LiveList { state, grant, joined: None }.serve(socket).await;
    }))
}

/// One open socket: its caller and the channel it joined.
struct LiveList {
    state: AppState,
    grant: Grant,
    joined: Option<Channel>,
}

/// A joined channel and what its page was last told.
struct Channel {
    topic: String,
    join_ref: Value,
    agent: Option<String>,
    known: HashMap<String, Value>,
}

impl LiveList {
    async fn serve(mut self, mut socket: WebSocket) {
        let state = self.state.clone();
        let caller = self.grant.caller.clone();
        let access_ends = state.auth.access_ends(&caller, None);
        tokio::pin!(access_ends);
        let lasts = tokio::time::sleep(Duration::from_secs(state.config.limits.stream_max_secs));
        tokio::pin!(lasts);
        let mut shutdown = state.shutting_down.clone();
        let mut changes = state.thread_changes.subscribe();
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let looked = tokio::select! {
                message = socket.recv() => match message {
                    Some(Ok(Message::Text(text))) => self.answer(&mut socket, text.as_str()).await,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    // Pings are answered by the socket itself; binary frames are not this protocol's.
                    Some(Ok(_)) => Ok(()),
                },
                Ok(()) = changes.changed() => {
                    tokio::time::sleep(WAKE_GAP).await;
                    changes.borrow_and_update();
                    self.look_again(&mut socket).await
                }
                _ = poll.tick() => self.look_again(&mut socket).await,
                _ = &mut access_ends => break,
                () = &mut lasts => break,
                // The guard `wait_for` answers is not `Send`: dropped inside.
                () = async { drop(shutdown.wait_for(|stopping| *stopping).await) } => break,
            };
            if let Err(error) = looked {
                match error {
                    Gone::Socket => {}
                    Gone::Reading(error) => tracing::warn!(%error, "a live thread list could not read its threads"),
                }
                break;
            }
        }
        let _ = socket.send(Message::Close(None)).await;
    }

    /// Answers one frame from the page.
    async fn answer(&mut self, socket: &mut WebSocket, text: &str) -> Result<(), Gone> {
        let Ok(Value::Array(frame)) = serde_json::from_str::<Value>(text) else { return Ok(()) };
        let [join_ref, reference, topic, event, _payload] = <[Value; 5]>::try_from(frame).unwrap_or_default();
        let Some(topic) = topic.as_str() else { return Ok(()) };
        let reply = |status: &str, response: Value| json!([join_ref, reference, topic, "phx_reply", { "status": status, "response": response }]);
        match (topic, event.as_str()) {
            ("phoenix", Some("heartbeat")) => send(socket, &reply("ok", json!({}))).await,
            (_, Some("phx_join")) => match watched_agent(topic) {
                Ok(agent) => {
                    // What the page listed just before: changes are told from here on.
                    let known = self.read(agent.as_deref()).await.map_err(Gone::Reading)?;
                    self.joined = Some(Channel { topic: topic.to_string(), join_ref: join_ref.clone(), agent, known });
                    send(socket, &reply("ok", json!({}))).await
                }
                Err(()) => send(socket, &reply("error", json!({ "reason": "unmatched topic" }))).await,
            },
            (_, Some("phx_leave")) => {
                if self.joined.as_ref().is_some_and(|channel| channel.topic == topic) {
                    self.joined = None;
                }
                send(socket, &reply("ok", json!({}))).await
            }
            _ => Ok(()),
        }
    }

    /// Reads the caller's threads again and pushes what changed since the page was last told.
    async fn look_again(&mut self, socket: &mut WebSocket) -> Result<(), Gone> {
        let Some(agent) = self.joined.as_ref().map(|channel| channel.agent.clone()) else { return Ok(()) };
        let now = self.read(agent.as_deref()).await.map_err(Gone::Reading)?;
        let Some(channel) = self.joined.as_ref() else { return Ok(()) };
        let mut pushes = Vec::new();
        let mut activity = Vec::new();
        for (id, thread) in &now {
            let before = channel.known.get(id);
            if let Some(event_type) = run_activity(before, thread) {
                activity.push((id.clone(), thread["agentId"].clone(), event_type));
            }
            let operation = match before {
                None => "created",
                Some(before) if before == thread => continue,
                Some(before) if thread["archived"] == true && before["archived"] != true => "archived",
                Some(_) => "updated",
            };
            pushes.push((METADATA_EVENT, json!({ "operation": operation, "threadId": id, "thread": thread })));
        }
        for id in channel.known.keys().filter(|id| !now.contains_key(*id)) {
            // Out of the window is not gone: a thread is told deleted only when it is.
            let gone = own_thread(&self.state, &self.grant.tenant, &self.grant.caller, id).await.is_err();
            if gone {
                pushes
                    .push((METADATA_EVENT, json!({ "operation": "deleted", "threadId": id, "deleted": { "id": id } })));
            }
        }
        for (thread, agent, event_type) in activity {
            // The run the page may have made itself: it then knows the news is its own.
            let store = self.state.engine.store();
            let run = store.latest_run_id(&self.grant.tenant, &thread).await.map_err(|e| Gone::Reading(e.into()))?;
            let payload = json!({ "threadId": thread, "agentId": agent, "runId": run, "eventType": event_type });
            pushes.push((RUN_ACTIVITY_EVENT, payload));
        }
        for (event, payload) in pushes {
            send(socket, &json!([channel.join_ref, Value::Null, channel.topic, event, payload])).await?;
        }
        if let Some(channel) = self.joined.as_mut() {
            channel.known = now;
        }
        Ok(())
    }

    /// The caller's own threads as the list shows them (archived ones too), by id.
    async fn read(&self, agent: Option<&str>) -> Result<HashMap<String, Value>, ApiError> {
        let filter = ThreadFilter { agent: agent.map(str::to_string), status: None, cursor: None, limit: Some(WINDOW) };
        let (threads, _) = own_entries(&self.state, &self.grant.caller, &self.grant.tenant, &filter, true).await?;
        Ok(threads.into_iter().filter_map(|thread| Some((thread.get("id")?.as_str()?.to_string(), thread))).collect())
    }
}

/// Why a socket ends early.
enum Gone {
    /// The page went away.
    Socket,
    /// The threads could not be read.
    Reading(ApiError),
}

async fn send(socket: &mut WebSocket, frame: &Value) -> Result<(), Gone> {
    socket.send(Message::Text(frame.to_string().into())).await.map_err(|_| Gone::Socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_run_activity_is_told_when_its_status_or_latest_turn_changes() {
        let entry = |status: &str, at: &str| json!({ "status": status, "lastRunAt": at, "name": "n" });
        let cases = [
            (None, entry("running", "1"), Some("RUN_STARTED")),
            (None, entry("succeeded", "1"), Some("RUN_FINISHED")),
            (Some(entry("running", "1")), entry("running", "1"), None),
            (Some(entry("running", "1")), entry("waiting", "1"), Some("RUN_FINISHED")),
            (Some(entry("waiting", "1")), entry("running", "1"), Some("RUN_STARTED")),
            (Some(entry("running", "1")), entry("failed", "1"), Some("RUN_ERROR")),
            (Some(entry("running", "1")), entry("cancelled", "1"), Some("RUN_FINISHED")),
            // A turn started and ended between two readings.
            (Some(entry("succeeded", "1")), entry("succeeded", "2"), Some("RUN_FINISHED")),
        ];
        for (before, now, told) in cases {
            assert_eq!(run_activity(before.as_ref(), &now), told, "{before:?} -> {now}");
        }
        let renamed = json!({ "status": "succeeded", "lastRunAt": "1", "name": "m" });
        assert_eq!(run_activity(Some(&entry("succeeded", "1")), &renamed), None);
    }

    #[test]
    fn a_join_code_names_the_channel_a_socket_may_join() {
        for agent in [Some("demo"), None] {
            let topic = format!("{TOPIC_PREFIX}{}", join_code(agent));
            assert_eq!(watched_agent(&topic), Ok(agent.map(str::to_string)));
        }
        for other in ["user_meta:", "user_meta:agent.", "user_meta:someone", "project_meta:all", "all"] {
            assert_eq!(watched_agent(other), Err(()), "{other}");
        }
    }
}
