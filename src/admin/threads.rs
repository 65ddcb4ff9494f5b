//! Operator commands behind the CLI (`agui-gateway decide`, `agui-gateway threads
//! list|show|delete`): the same engine and checks as the HTTP routes, for a person at a
//! terminal. An operator lists and erases any thread of a tenant (the database is theirs
//! anyway); the erasure is audited with the actor `cli`.

use serde_json::{json, Value};

use crate::auth::Caller;
use crate::engine::threads::{title, ThreadFilter};
use crate::engine::{Engine, EngineError};
use crate::ids::ThreadId;
use crate::protocol::input::{ResumeEntry, ResumeStatus};
use crate::protocol::iso8601;
use crate::store::Visibility;

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

/// A page of the tenant's threads, newest activity first: every thread, or with `person` only
/// those that person would see listed.
pub async fn list_threads(
    engine: &Engine,
    tenant: &str,
    person: Option<&Caller>,
    filter: &ThreadFilter,
) -> Result<Value, EngineError> {
    let visibility = person.map_or(Visibility::All, Caller::visibility);
    let page = engine.list_threads(tenant, visibility, filter).await?;
    let threads: Vec<Value> = page
        .threads
        .iter()
        .map(|summary| {
            let owner = &summary.thread.owner;
            json!({
                "id": summary.thread.thread_id,
                "owner": format!("{}:{}", owner.kind.as_str(), owner.id).trim_end_matches(':'),
                "agent": summary.agent,
                "status": summary.status.as_str(),
                "title": title(&summary.first_user_text),
                "createdAt": iso8601(summary.thread.created_at_ms),
                "updatedAt": iso8601(summary.updated_at_ms),
            })
        })
        .collect();
    Ok(json!({ "threads": threads, "next_cursor": page.next_cursor }))
}

/// Erases one thread of the tenant, whoever owns it (refused while a turn of it runs or
/// waits), audited as `actor: "cli"`.
pub async fn delete_thread(engine: &Engine, tenant: &str, thread: &str) -> Result<(), EngineError> {
    let thread_id = ThreadId::parse(thread).map_err(|message| EngineError::BadRequest { field: "thread", message })?;
    let Some(thread) = engine.store().find_thread(tenant, thread_id.as_str()).await? else {
        return Err(EngineError::NotFound(format!("tenant '{tenant}' has no thread '{thread_id}'")));
    };
    engine.erase_thread(&thread, "cli", None, "operator").await
}
