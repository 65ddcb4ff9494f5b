//! A person's inbox (SPEC §5, the console): every open interrupt of a tenant this caller may
//! decide, across the tenant's threads, oldest first — on their own threads and, as a decider
//! named by a policy, on threads they may not read — and apart from them the open interrupts
//! on threads they may read that only others decide, with who does.
//!
//! It shows exactly what the other routes would show the same caller: an interrupt's call
//! arguments (`gateway/details`) only with the content permission, a thread's id beside an
//! interrupt only when the caller may read that thread or decides the interrupt, and nothing
//! of an interrupt that is neither theirs to decide nor on a thread of theirs.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use serde_json::{json, Value};

use super::errors::EngineError;
use super::interrupts::{describe_deciders, waiting_of, Viewer};
use super::shape::Engine;
use crate::caller::Caller;
use crate::protocol::iso8601;
use crate::store::{ThreadRow, TurnRow};

/// The most interrupts one inbox reads from a tenant; older ones come first, so an inbox
/// past it shows the oldest (which expire first).
pub const INBOX_LIMIT: i64 = 500;

/// What an inbox holds: the interrupts this caller may decide, and those waiting for others.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    pub mine: Vec<Value>,
    pub others: Vec<Value>,
}

impl Engine {
    /// The caller's inbox in `tenant` (see the module doc).
    pub async fn inbox(&self, tenant: &str, caller: &Caller) -> Result<Inbox, EngineError> {
        let store = self.store();
        let viewer = Viewer::of(caller, false);
        let content = viewer.clearance.content;
        let console = self.console();
        let rows = store.tenant_open_interrupts(tenant, self.now_ms(), INBOX_LIMIT).await?;
        let mut threads: HashMap<i64, Option<ThreadRow>> = HashMap::new();
        let mut turns: HashMap<i64, Option<TurnRow>> = HashMap::new();
        let mut inbox = Inbox::default();
        for row in &rows {
            // An interrupt whose record does not read decides nobody's inbox.
            let Some(waiting) = waiting_of(row) else { continue };
            let decides = waiting.may_be_decided_by(&viewer);
            if let Entry::Vacant(slot) = threads.entry(row.thread) {
                slot.insert(store.thread_by_pk(row.thread).await?.filter(|t| t.tenant == tenant));
            }
            let Some(Some(thread)) = threads.get(&row.thread) else { continue };
            let reads = caller.may_read(thread);
            if !decides && !reads {
                continue;
            }
            if let Entry::Vacant(slot) = turns.entry(row.turn) {
                slot.insert(store.turn_by_pk(row.turn).await?);
            }
            let turn = turns.get(&row.turn).and_then(Option::as_ref);
            let mut entry = json!({
                "tenant": tenant,
                "threadId": thread.thread_id,
                "turn": turn.map(|t| t.public_id.clone()),
                "agent": turn.map(|t| t.agent.clone()),
                "startedBy": row.started_by,
                "createdAt": iso8601(row.created_at_ms),
                "expiresAt": iso8601(row.expires_at_ms),
                "deciders": describe_deciders(&waiting.deciders, waiting.four_eyes),
                "fourEyes": waiting.four_eyes,
                "threadReadable": reads,
            });
            if decides {
                entry["interrupt"] = serde_json::to_value(waiting.shown(content, console.as_deref()))
                    // An AG-UI interrupt always serializes; were it not to, the entry says so.
                    .unwrap_or_default();
                inbox.mine.push(entry);
            } else {
                let mut shown = waiting.for_others(console.as_deref());
                if let (Value::Object(shown), Value::Object(entry)) = (&mut shown, &mut entry) {
                    // The turn is the entry's own (the stored view does not carry it).
                    shown.remove("turn");
                    entry.append(shown);
                }
                inbox.others.push(entry);
            }
        }
        Ok(inbox)
    }
}
