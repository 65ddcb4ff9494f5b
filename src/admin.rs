//! Operator commands behind the CLI (`agui-gateway decide`, `agui-gateway threads show`): the
//! same engine and checks as the HTTP routes, for a person at a terminal.

use serde_json::{json, Value};

use crate::auth::Caller;
use crate::engine::{Engine, EngineError};
use crate::ids::ThreadId;
use crate::protocol::input::{ResumeEntry, ResumeStatus};

/// Decides one interrupt as `person` (the same checks as `POST /v1/interrupts/{id}/decision`),
/// recorded with `via: "cli"`.
pub async fn decide(
    engine: &Engine,
    tenant: &str,
    caller: &Caller,
    interrupt_id: &str,
    approve: bool,
    payload: Option<Value>,
) -> Result<Value, EngineError> {
    let entry = ResumeEntry {
        interrupt_id: interrupt_id.to_string(),
        status: if approve { ResumeStatus::Resolved } else { ResumeStatus::Cancelled },
        payload: payload.or_else(|| approve.then(|| json!({ "approved": true }))),
        metadata: None,
    };
    engine.decide_out_of_band(tenant, caller, &entry, "cli").await
}

/// A thread as an operator sees it: status, turns, open interrupts, the conversation.
pub async fn show_thread(engine: &Engine, tenant: &str, caller: &Caller, thread: &str) -> Result<Value, EngineError> {
    let thread_id = ThreadId::parse(thread).map_err(|message| EngineError::BadRequest { field: "thread", message })?;
    let thread = engine.readable_thread(tenant, caller, &thread_id).await?;
    let turns = engine.store().thread_turns(thread.pk).await?;
    let mut interrupts = Vec::new();
    if let Some(latest) = turns.last() {
        interrupts = engine.open_interrupts_for(caller, latest).await?;
    }
    let messages = engine.messages(&thread).await?;
    Ok(json!({
        "threadId": thread.thread_id,
        "tenant": thread.tenant,
        "turns": turns.iter().map(|t| json!({ "id": t.public_id, "agent": t.agent, "status": t.status.as_str() })).collect::<Vec<_>>(),
        "interrupts": interrupts,
        "messages": messages,
    }))
}
