//! The run route's door for an MCP App's own request (SPEC §9.2; docs/api.md "MCP Apps' own
//! requests"): a run whose `forwardedProps.__proxiedMCPRequest` is an object is handed to the
//! engine's [`Engine::begin_app_request`](crate::engine::Engine) instead of starting a turn.
//!
//! An answered request is rendered here, straight to the stream: `RUN_STARTED`, then
//! `RUN_FINISHED` whose `result` is the MCP method's result, as the middleware answers. It
//! does not go through the event log, because it is no turn: nothing of it is kept (but its
//! audit row), so there is nothing a reconnect could follow or another instance could serve.
//! A call that waits for a person is a turn, and its stream is the turn's, from the log.

use serde_json::Value;

use super::error::ApiError;
use super::sse::{self, Framing, StreamSlot};
use crate::engine::turn::app_request::AppRequest;
use crate::engine::StreamItem;
use crate::protocol::events::{Envelope, Event};
use crate::protocol::mcp_apps::proxied_request;
use crate::protocol::RunAgentInput;

/// The App's request the run carries, if it carries one; 400 naming the field for one that
/// does not read.
pub(super) fn app_request_of(input: &RunAgentInput) -> Result<Option<AppRequest>, ApiError> {
    let read =
        proxied_request(input.forwarded_props.as_ref()).map_err(|(field, why)| ApiError::bad_request(&field, why))?;
    Ok(read.map(|request| AppRequest {
        server: request.server,
        method: request.method,
        params: request.params,
        // The engine names it after the tenant, the thread and the run.
        idempotency_key: String::new(),
    }))
}

/// The stream of an answered request: `RUN_STARTED` and `RUN_FINISHED` with `result`, under
/// the run's own ids (id `0`: there is no log position to continue after).
pub(super) fn answered(
    input: &RunAgentInput,
    result: Value,
    slot: StreamSlot,
    framing: Framing,
    at_ms: i64,
) -> Result<axum::response::Response, ApiError> {
    let started = Event::RunStarted {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        protocol_version: Some("1.0".into()),
        parent_run_id: None,
        input: None,
    };
    let finished = Event::RunFinished {
        thread_id: input.thread_id.clone(),
        run_id: input.run_id.clone(),
        result: Some(result),
        outcome: Some(crate::protocol::RunOutcome::Success { pending_tool_call_ids: Vec::new() }),
        usage: None,
    };
    let items = [started, finished]
        .into_iter()
        .map(|event| {
            let json = serde_json::to_vec(&Envelope::new(event, at_ms)).map_err(|e| ApiError::Internal(Box::new(e)))?;
            Ok(StreamItem::rendered("0".into(), bytes::Bytes::from(json)))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(sse::response_in_slot(futures_util::stream::iter(items), slot, framing))
}
