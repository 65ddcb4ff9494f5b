//! The rows of threads, turns and runs as the gateway reads them, and what starting a turn
//! or erasing a thread answers: the vocabulary of [`super::ThreadStore`].

use super::audit::AuditEntry;
use super::usage::TenantUsage;
use crate::store::error::StoreError;

/// Who owns a thread: a person (private to them) or the tenant (created with an API key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub kind: OwnerKind,
    pub id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerKind {
    Person,
    Tenant,
}

impl OwnerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::Person => "person",
            OwnerKind::Tenant => "tenant",
        }
    }

    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        match value {
            "person" => Ok(OwnerKind::Person),
            "tenant" => Ok(OwnerKind::Tenant),
            other => Err(StoreError::Corrupt(format!("owner kind '{other}'"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub pk: i64,
    pub tenant: String,
    pub thread_id: String,
    pub owner: Owner,
    pub created_at_ms: i64,
}

/// Which of a tenant's threads a list shows: the same rule as `Caller::may_read`, stated for
/// the database (the caller module builds it; the store knows no callers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// Every thread of the tenant (an operator at the command line).
    All,
    /// The tenant's own threads (those created with an API key), and this person's when `Some`.
    TenantAnd(Option<String>),
}

/// One page of a tenant's threads, newest activity first (`GET /v1/threads`).
#[derive(Debug, Clone)]
pub struct ThreadQuery {
    pub tenant: String,
    pub visibility: Visibility,
    /// Only threads whose latest turn ran this agent.
    pub agent: Option<String>,
    /// Only threads whose latest turn is in this status.
    pub status: Option<TurnStatus>,
    /// Only threads after this `(updated_at_ms, pk)` in the order: the last one of the
    /// previous page.
    pub after: Option<(i64, i64)>,
    pub limit: i64,
}

/// A thread as a list shows it: the latest turn's agent and status, the first user message.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadSummary {
    pub thread: ThreadRow,
    pub updated_at_ms: i64,
    pub agent: String,
    pub status: TurnStatus,
    /// The text of the thread's first user message (content: shown only to content holders).
    pub first_user_text: String,
}

/// What [`ThreadStore::delete_thread`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteThread {
    /// Erased, with this many turns.
    Deleted { turns: i64 },
    /// A turn of the thread runs or waits: nothing was changed.
    Busy(TurnStatus),
    /// No such thread (any more).
    Missing,
    /// The erase asked for an idle thread ([`StillIdle`]) and the thread was active since:
    /// nothing was changed.
    Active,
}

/// What a retention erase checks again under its locks (§10): the thread is still idle, as the
/// pass that listed it saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StillIdle {
    /// Its last activity (a turn's start, wait or end) is before this.
    pub before_ms: i64,
    /// The waiting turn this erase cancelled itself, when it did: that turn's end is the
    /// erase's own doing, not activity, as long as it is still the thread's latest turn.
    pub cancelled: Option<i64>,
}

/// Where a turn is in its life. Only `Running` turns have a task appending to their log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Running,
    /// Waiting for interrupts to be decided; no task runs it.
    Waiting,
    Succeeded,
    Failed,
    Cancelled,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Running => "running",
            TurnStatus::Waiting => "waiting",
            TurnStatus::Succeeded => "succeeded",
            TurnStatus::Failed => "failed",
            TurnStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "running" => TurnStatus::Running,
            "waiting" => TurnStatus::Waiting,
            "succeeded" => TurnStatus::Succeeded,
            "failed" => TurnStatus::Failed,
            "cancelled" => TurnStatus::Cancelled,
            other => return Err(StoreError::Corrupt(format!("turn status '{other}'"))),
        })
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, TurnStatus::Running | TurnStatus::Waiting)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow {
    pub pk: i64,
    pub public_id: String,
    pub thread: i64,
    pub ordinal: i32,
    pub agent: String,
    pub status: TurnStatus,
    /// The id the client gave the user message that started the turn.
    pub user_message_id: String,
    pub user_text: String,
    pub started_by: String,
    pub created_at_ms: i64,
    pub checkpoint: Option<String>,
    pub cancel_requested: bool,
    /// The client-declared tools admitted when the turn started, as JSON (AG-UI `Tool`s).
    pub client_tools: Option<String>,
    /// The client's `context` and `forwardedProps` of the run that started the turn, as JSON.
    pub client_input: Option<String>,
    /// The user message's content parts, as JSON, when it held parts besides text.
    pub user_parts: Option<String>,
    /// The ownership epoch: grows with each claim (start, takeover, resume). A runner's writes
    /// carry the epoch it was given and are refused once it is no longer the turn's.
    pub epoch: i64,
    /// The turn whose answer the client had last when this one started (§6); `None` for a
    /// first turn. A regenerate or an edit shares its sibling's parent.
    pub parent: Option<i64>,
}

impl TurnRow {
    /// The user message's recorded content parts (`user_parts`); empty for a message of words
    /// only, or a record that no longer reads as parts.
    pub fn user_content_parts(&self) -> Vec<crate::protocol::ContentPart> {
        self.user_parts.as_deref().and_then(|parts| serde_json::from_str(parts).ok()).unwrap_or_default()
    }
}

/// Another run following an existing turn of `thread` from `start_seq` on (a reconnect, a
/// resume, a second tab's run id).
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    pub thread: i64,
    pub run_id: &'a str,
    pub turn: i64,
    pub start_seq: i64,
    pub at_ms: i64,
}

/// A new turn, with the run that starts it and, on a thread's first run, the thread.
#[derive(Debug, Clone)]
pub struct NewTurn {
    pub tenant: String,
    pub thread_id: String,
    pub owner: Owner,
    pub run_id: String,
    pub public_id: String,
    pub ordinal: i32,
    pub agent: String,
    pub user_message_id: String,
    pub user_text: String,
    pub started_by: String,
    pub at_ms: i64,
    /// Admitted client-declared tools, as JSON; `None` when the client declared none.
    pub client_tools: Option<String>,
    /// The client's `context` and `forwardedProps`, as JSON; `None` when it sent neither.
    pub client_input: Option<String>,
    /// The user message's content parts, as JSON; `None` when it was words only.
    pub user_parts: Option<String>,
    /// The turn it goes on from (§6): the last turn of the branch the client carried, or the
    /// parent of the turn it regenerates or edits; `None` for a first turn.
    pub parent: Option<i64>,
    /// The instance that will run the turn (its lease is the instance's own, in `instances`).
    pub owner_instance: String,
    /// The `run.start` audit row (and a `board.read` one when the run opens with notes the
    /// caller may read), written in the same transaction when the turn starts.
    pub audit: Vec<AuditEntry>,
    /// The tenant's limits the turn must pass, counted in the transaction that starts it (§8);
    /// `None`: the tenant has none.
    pub limits: Option<TurnLimits>,
}

/// The tenant's limits on starting a turn (§8), as counts the store checks: counted in the
/// same transaction as the turn's insert, after every other start of the tenant committed, so
/// a burst of starts never passes a limit together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnLimits {
    /// At most this many turns of the tenant running at once.
    pub max_running: Option<i64>,
    /// At most this many turns started since `started_since_ms`.
    pub max_started: Option<i64>,
    pub started_since_ms: i64,
    /// At most this many tokens reported since `tokens_since_ms`.
    pub max_tokens: Option<i64>,
    pub tokens_since_ms: i64,
}

impl TurnLimits {
    /// Whether one more turn would pass a limit, given what the tenant used.
    pub fn reached_by(&self, usage: &TenantUsage) -> bool {
        self.max_running.is_some_and(|limit| usage.running_turns >= limit)
            || self.max_started.is_some_and(|limit| usage.turns_started >= limit)
            || self.max_tokens.is_some_and(|limit| usage.tokens >= limit)
    }
}

/// What [`ThreadStore::start_turn`] did.
#[derive(Debug, Clone)]
pub enum StartTurn {
    Started {
        thread: ThreadRow,
        turn: TurnRow,
    },
    /// The (thread, runId) already names a turn: follow it from where that run began (a retry
    /// never starts a second turn).
    RunExists(TurnRow, i64),
    /// Another turn took this ordinal first: one turn at a time.
    Conflict,
    /// The thread exists and belongs to someone else.
    NotOwner,
    /// The tenant reached one of [`NewTurn::limits`] (what it used, as counted): nothing was
    /// written.
    OverLimit(TenantUsage),
}
