//! Threads as a person manages them (SPEC §10): the list of a caller's threads, newest activity
//! first in cursor pages; a thread's erasure, with everything stored for it and one audit row
//! that names who and when but holds no content (an unfinished turn of it cancelled first); and the optional retention sweep, which erases
//! threads idle longer than `retention.thread_idle_days`, a small batch per pass.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::json;

use super::errors::EngineError;
use super::shape::Engine;
use crate::caller::Caller;
use crate::store::{
    AuditEntry, DeleteThread, StillIdle, StoreError, ThreadQuery, ThreadRow, ThreadSummary, TurnStatus, Visibility,
};

/// Threads per page when the caller names no `limit`.
pub const DEFAULT_PAGE: u32 = 50;
/// The largest page a caller may ask for.
pub const MAX_PAGE: u32 = 200;
/// A thread's title is its first user message, cut to this many characters.
pub const TITLE_CHARS: usize = 80;

/// Which unfinished turn of a thread its erase cancels first (any other refuses the erase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnsToStop {
    /// A running or a waiting one (a person's or an operator's delete).
    Any,
    /// A waiting one only, and only while the thread is still idle, its last activity before
    /// `idle_before_ms` (retention: a thread whose turn runs is not idle, nor one a turn
    /// started on since the pass listed it). Checked again in the erase's own transaction.
    Waiting { idle_before_ms: i64 },
}

/// How often an erase that cancelled a turn looks whether it has ended.
const STOP_POLL: Duration = Duration::from_millis(20);

/// How long an erase waits for the turn it cancelled to end: a turn whose instance died ends
/// once another takes it over, within about two leases.
fn stop_patience(lease_ms: u64) -> Duration {
    Duration::from_millis(lease_ms.saturating_mul(3)).max(Duration::from_secs(5))
}

/// What a list asks for besides the tenant and who asks.
#[derive(Debug, Clone, Default)]
pub struct ThreadFilter {
    pub agent: Option<String>,
    /// `running`, `waiting`, `succeeded`, `failed` or `cancelled`: the latest turn's.
    pub status: Option<String>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
    pub limit: Option<u32>,
}

/// One page of threads, and the cursor of the next one (none after the last page).
#[derive(Debug, Clone)]
pub struct ThreadPage {
    pub threads: Vec<ThreadSummary>,
    pub next_cursor: Option<String>,
}

/// The cursor after `summary`: opaque to clients, its position in the order.
fn cursor_after(summary: &ThreadSummary) -> String {
    URL_SAFE_NO_PAD.encode(format!("v1:{}:{}", summary.updated_at_ms, summary.thread.pk))
}

/// The position a cursor names; `None` for anything this gateway did not hand out.
fn parse_cursor(cursor: &str) -> Option<(i64, i64)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let mut parts = text.split(':');
    let (Some("v1"), Some(at), Some(pk), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    Some((at.parse().ok()?, pk.parse().ok()?))
}

fn parse_status(status: &str) -> Option<TurnStatus> {
    [TurnStatus::Running, TurnStatus::Waiting, TurnStatus::Succeeded, TurnStatus::Failed, TurnStatus::Cancelled]
        .into_iter()
        .find(|s| s.as_str() == status)
}

/// A thread's title: its first user message on one line, cut on a character boundary to
/// [`TITLE_CHARS`] (an ellipsis marks the cut).
pub fn title(first_user_text: &str) -> String {
    let line = first_user_text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

impl Engine {
    /// One page of the tenant's threads that `visibility` shows, newest activity first. A
    /// malformed filter or a cursor this gateway did not hand out is a `BadRequest`.
    pub async fn list_threads(
        &self,
        tenant: &str,
        visibility: Visibility,
        filter: &ThreadFilter,
    ) -> Result<ThreadPage, EngineError> {
        let bad = |field: &'static str, message: &str| EngineError::BadRequest { field, message: message.to_string() };
        let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(bad("limit", &format!("must be from 1 to {MAX_PAGE}")));
        }
        let status = match filter.status.as_deref() {
            Some(text) => Some(
                parse_status(text)
                    .ok_or_else(|| bad("status", "must be running, waiting, succeeded, failed or cancelled"))?,
            ),
            None => None,
        };
        if let Some(agent) = filter.agent.as_deref() {
            if !crate::ids::is_valid_name(agent) {
                return Err(bad("agent", "is not an agent name"));
            }
        }
        let after = match filter.cursor.as_deref() {
            Some(cursor) => Some(parse_cursor(cursor).ok_or_else(|| bad("cursor", "is not a cursor of this list"))?),
            None => None,
        };
        let query = ThreadQuery {
            tenant: tenant.to_string(),
            visibility,
            agent: filter.agent.clone(),
            status,
            after,
            // One more than asked: whether there is a next page, without counting.
            limit: i64::from(limit) + 1,
        };
        let mut threads = self.inner.store.list_threads(&query).await?;
        let next_cursor = if threads.len() > limit as usize {
            threads.truncate(limit as usize);
            threads.last().map(cursor_after)
        } else {
            None
        };
        Ok(ThreadPage { threads, next_cursor })
    }

    /// Erases a thread the caller may read, when the caller is its owner (see
    /// [`Caller::may_delete`]); a turn of it that runs or waits is cancelled first.
    pub async fn delete_thread(&self, caller: &Caller, thread: &ThreadRow) -> Result<(), EngineError> {
        if !caller.may_read(thread) || !caller.may_delete(thread) {
            return Err(EngineError::PermissionDenied);
        }
        self.erase_thread(thread, &caller.label(), caller.via(), "request", TurnsToStop::Any).await
    }

    /// Erases `thread` with everything stored for it, and appends the `thread.delete` audit row
    /// (`actor`, `via`, why) in the same transaction. The row names the thread, never its
    /// content. An unfinished turn of it that `stop` names is cancelled first — a waiting one's
    /// interrupts withdrawn — and the erase waits for it to end, so every stream following it
    /// ends as on a cancel (outcome `cancelled`), up to [`stop_patience`]; any other refuses
    /// the erase (`turn_in_progress`).
    pub async fn erase_thread(
        &self,
        thread: &ThreadRow,
        actor: &str,
        via: Option<&str>,
        reason: &str,
        stop: TurnsToStop,
    ) -> Result<(), EngineError> {
        let audit = AuditEntry {
            tenant: thread.tenant.clone(),
            action: "thread.delete".into(),
            actor: actor.to_string(),
            via: via.map(str::to_string),
            detail: json!({ "thread": thread.thread_id, "reason": reason }).to_string(),
            at_ms: self.now_ms(),
        };
        let deadline = tokio::time::Instant::now() + stop_patience(self.inner.config.turns.lease_ms);
        let idle_before = match stop {
            TurnsToStop::Any => None,
            TurnsToStop::Waiting { idle_before_ms } => Some(idle_before_ms),
        };
        // The waiting turn this erase cancelled itself (retention): its end is not activity.
        let mut cancelled = None;
        loop {
            let idle = idle_before.map(|before_ms| StillIdle { before_ms, cancelled });
            let erased = match self.inner.store.delete_thread(thread.pk, &audit, idle).await {
                // A request writing to the thread at the same moment (a run's record, a turn's
                // start) can make PostgreSQL break a deadlock by failing the erase: it goes
                // again, as it does after a turn it stopped.
                Err(error) if error.is_transient() && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%error, "an erase met a write to its thread; trying again");
                    tokio::time::sleep(STOP_POLL).await;
                    continue;
                }
                other => other?,
            };
            let status = match erased {
                DeleteThread::Deleted { turns } => {
                    tracing::info!(tenant = %thread.tenant, turns, reason, "a thread was erased");
                    return Ok(());
                }
                DeleteThread::Missing => {
                    return Err(EngineError::NotFound(format!("thread '{}' not found", thread.thread_id)))
                }
                DeleteThread::Active => {
                    return Err(EngineError::TurnInProgress(
                        "a turn of this thread started since: it is not idle".into(),
                    ))
                }
                DeleteThread::Busy(status) => status,
            };
            let stoppable = status == TurnStatus::Waiting || stop == TurnsToStop::Any;
            if !stoppable || tokio::time::Instant::now() >= deadline {
                return Err(EngineError::TurnInProgress(if stoppable {
                    "the thread's turn was asked to stop and has not yet: try again".to_string()
                } else {
                    format!("a turn of this thread is {}: it is not idle", status.as_str())
                }));
            }
            if let Some(turn) = self.stop_turn(thread.pk, idle_before, deadline).await? {
                cancelled = Some(turn);
            }
        }
    }

    /// Cancels the thread's unfinished turn (a waiting one is set running to be ended by its
    /// runner; with `idle_before`, only while its thread is still idle) and waits, until
    /// `deadline`, for it to end or to wait again (a cancel that met a resume: the erase then
    /// cancels the wait). Returns the waiting turn it cancelled, if it did.
    async fn stop_turn(
        &self,
        thread: i64,
        idle_before: Option<i64>,
        deadline: tokio::time::Instant,
    ) -> Result<Option<i64>, EngineError> {
        let store = &self.inner.store;
        let Some(turn) = store.thread_turns(thread).await?.into_iter().rev().find(|t| !t.status.is_finished()) else {
            return Ok(None);
        };
        let mut cancelled = None;
        if turn.status == TurnStatus::Waiting {
            let Some(epoch) = store.cancel_waiting_turn(turn.pk, &self.inner.instance, idle_before).await? else {
                // Decided, or (retention) the thread active since: the erase looks again.
                return Ok(None);
            };
            cancelled = Some(turn.pk);
            self.go_on(turn.pk, epoch).await?;
        } else {
            self.request_cancel(turn.pk).await?;
        }
        while tokio::time::Instant::now() < deadline {
            match store.turn_by_pk(turn.pk).await? {
                Some(row) if row.status == TurnStatus::Running => tokio::time::sleep(STOP_POLL).await,
                _ => break,
            }
        }
        Ok(cancelled)
    }

    /// One pass of the retention sweep: erases up to `retention.batch` threads idle for longer
    /// than `retention.thread_idle_days` (none when it is 0), oldest first, each in its own
    /// transaction; a thread whose turn runs is not idle and is never touched, one whose turn
    /// waits has it cancelled first (its interrupts withdrawn). Returns how many it erased.
    pub async fn sweep_retention(&self) -> Result<usize, StoreError> {
        let retention = &self.inner.config.retention;
        if retention.thread_idle_days == 0 {
            return Ok(0);
        }
        let idle_ms = i64::try_from(retention.thread_idle_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        let before = self.now_ms().saturating_sub(idle_ms);
        let batch = i64::try_from(retention.batch).unwrap_or(i64::MAX);
        let listed = self.inner.store.idle_threads(before, batch).await?;
        self.erase_idle_threads(&listed, before).await
    }

    /// Erases the threads a retention pass listed as idle since before `idle_before_ms`, each in
    /// its own transaction that checks again that it still is: a thread a turn started on since
    /// the listing (or whose waiting turn was decided) is left, and its turn is never cancelled.
    /// Returns how many it erased.
    pub async fn erase_idle_threads(&self, listed: &[ThreadRow], idle_before_ms: i64) -> Result<usize, StoreError> {
        let mut erased = 0;
        for thread in listed {
            let stop = TurnsToStop::Waiting { idle_before_ms };
            match self.erase_thread(thread, "gateway", None, "retention", stop).await {
                Ok(()) => erased += 1,
                // A turn started since, or another instance erased it first: left for later.
                Err(EngineError::TurnInProgress(_) | EngineError::NotFound(_)) => {}
                Err(EngineError::Store(error)) => return Err(error),
                Err(other) => tracing::warn!(error = %other, "retention could not erase a thread"),
            }
        }
        Ok(erased)
    }

    /// Runs [`Engine::sweep_retention`] every `retention.interval_secs` while the engine lives,
    /// when retention is on.
    pub(super) fn spawn_retention(&self) {
        let retention = &self.inner.config.retention;
        if retention.thread_idle_days == 0 {
            return;
        }
        let every = Duration::from_secs(retention.interval_secs.max(1));
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                match (Engine { inner }).sweep_retention().await {
                    Ok(0) => {}
                    Ok(erased) => tracing::info!(erased, "retention erased idle threads"),
                    Err(error) => tracing::warn!(%error, "the retention sweep failed"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_message_on_one_line_cut_on_a_character_boundary() {
        assert_eq!(title("  what is\nnew?  "), "what is new?");
        let long = "é".repeat(100);
        let cut = title(&long);
        assert_eq!(cut.chars().count(), TITLE_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(title(&"a".repeat(TITLE_CHARS)), "a".repeat(TITLE_CHARS));
    }

    #[test]
    fn a_cursor_reads_back_and_anything_else_is_refused() {
        let text = URL_SAFE_NO_PAD.encode("v1:1700000000000:42");
        assert_eq!(parse_cursor(&text), Some((1_700_000_000_000, 42)));
        for bad in ["", "!!", "djE6eDo0Mg", &URL_SAFE_NO_PAD.encode("v2:1:2"), &URL_SAFE_NO_PAD.encode("v1:1:2:3")] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
    }
}
