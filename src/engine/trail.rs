//! A thread's audit trail (§8), as a tenant's admins read it (`GET /v1/threads/{thread}/audit`,
//! the console): the tenant's audit rows that name this thread or one of its turns — who
//! started each turn and through which door, who read the board's notes, who decided each
//! interrupt and how, the gateway's expiries — oldest first. The rows hold no message text.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::errors::EngineError;
use super::shape::Engine;
use crate::protocol::iso8601;
use crate::store::ThreadRow;

/// Audit rows of the tenant read per page while looking for a thread's.
const PAGE: i64 = 1_000;
/// The most of the tenant's rows one trail reads (from the thread's creation on): a trail of a
/// thread older than that many rows shows their first part.
const SCAN_LIMIT: usize = 50_000;
/// The most rows one trail shows.
pub const TRAIL_LIMIT: usize = 500;

impl Engine {
    /// The audit rows about `thread`, oldest first (see the module doc).
    pub async fn thread_audit(&self, thread: &ThreadRow) -> Result<Vec<Value>, EngineError> {
        let store = self.store();
        let turns: HashSet<String> =
            store.thread_turns(thread.pk).await?.into_iter().map(|turn| turn.public_id).collect();
        let mut trail = Vec::new();
        let mut since = thread.created_at_ms;
        let mut last_id = 0;
        let mut scanned = 0;
        loop {
            let page = store.audit_rows(Some(&thread.tenant), since, PAGE).await?;
            let full = page.len() as i64 == PAGE;
            let mut progressed = false;
            // A page starts at the last row's time again: the rows of that instant already read
            // are skipped by id (ids grow with time within a tenant's rows).
            let already_read = last_id;
            for row in page.into_iter().filter(|row| row.id > already_read) {
                scanned += 1;
                progressed = true;
                since = row.entry.at_ms;
                last_id = row.id;
                let detail: Value = serde_json::from_str(&row.entry.detail).unwrap_or(Value::Null);
                let ours = detail["thread"].as_str() == Some(thread.thread_id.as_str())
                    || detail["turn"].as_str().is_some_and(|turn| turns.contains(turn));
                if ours && trail.len() < TRAIL_LIMIT {
                    trail.push(json!({
                        "at": iso8601(row.entry.at_ms),
                        "action": row.entry.action,
                        "actor": row.entry.actor,
                        "via": row.entry.via,
                        "detail": detail,
                    }));
                }
            }
            // (A full page of one instant's rows already read: nothing more to find after it.)
            if !full || !progressed || scanned >= SCAN_LIMIT || trail.len() >= TRAIL_LIMIT {
                return Ok(trail);
            }
        }
    }
}
