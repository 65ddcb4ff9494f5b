//! Threads, their turns and runs, a thread's editable state and its notes: [`ThreadStore`].
//!
//! A thread is found by its tenant and public id ([`ThreadStore::find_thread`]); everything
//! else here takes a thread's or a turn's primary key, which the gateway only has from such a
//! tenant-scoped lookup (or from a row it read that way), never from a client. Lists of threads
//! ([`ThreadStore::list_threads`]) take the tenant and what the caller may see
//! ([`Visibility`]); a thread is erased whole, with everything stored for it, by
//! [`ThreadStore::delete_thread`].

use async_trait::async_trait;

use super::audit::insert_audit;
use super::backend::Backend;
use super::sql::{Arg, Record, SqlDb, Stmt};
use super::usage::TENANT_USAGE;
use super::{AuditEntry, StoreError, TenantUsage};

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

    fn parse(value: &str) -> Result<Self, StoreError> {
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

#[async_trait]
pub trait ThreadStore: Send + Sync {
    /// The tenant's thread with this public id: the one lookup of a thread a client names.
    async fn find_thread(&self, tenant: &str, thread_id: &str) -> Result<Option<ThreadRow>, StoreError>;
    /// A thread by primary key, for a row already read through a tenant-scoped lookup.
    async fn thread_by_pk(&self, pk: i64) -> Result<Option<ThreadRow>, StoreError>;
    /// The thread's turns, oldest first.
    async fn thread_turns(&self, thread: i64) -> Result<Vec<TurnRow>, StoreError>;
    /// The turn a run id follows in the thread, and where in its log the run begins.
    async fn find_run(&self, thread: i64, run_id: &str) -> Result<Option<(TurnRow, i64)>, StoreError>;
    /// A turn by primary key, for a row already read through a tenant-scoped lookup.
    async fn turn_by_pk(&self, pk: i64) -> Result<Option<TurnRow>, StoreError>;

    /// Creates the thread when absent, then the turn and its run, in one transaction.
    async fn start_turn(&self, new: &NewTurn) -> Result<StartTurn, StoreError>;
    /// Records another run id following an existing turn; returns the turn that run id follows
    /// (an earlier one, if the id was already used).
    async fn add_run(
        &self,
        thread: i64,
        run_id: &str,
        turn: i64,
        start_seq: i64,
        at_ms: i64,
    ) -> Result<i64, StoreError>;

    /// The thread's notes, by number.
    async fn notes(&self, thread: i64) -> Result<Vec<String>, StoreError>;
    /// The thread's editable state (§7) as JSON, when a run wrote any.
    async fn thread_state(&self, thread: i64) -> Result<Option<String>, StoreError>;
    /// Replaces the thread's editable state.
    async fn set_thread_state(&self, thread: i64, state: &str) -> Result<(), StoreError>;

    /// One page of the tenant's threads the query may see, newest activity first.
    async fn list_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadSummary>, StoreError>;
    /// Erases the thread and everything stored for it (turns, runs, events, interrupts, notes,
    /// state) and appends `audit`, in one transaction; nothing at all while a turn of it runs or
    /// waits. The tokens its turns used stay counted in the tenant's budget.
    /// With `idle`, erases only a thread still idle as it says (retention), checked under the
    /// same locks as the erase: a turn started since makes it [`DeleteThread::Active`].
    async fn delete_thread(
        &self,
        thread: i64,
        audit: &AuditEntry,
        idle: Option<StillIdle>,
    ) -> Result<DeleteThread, StoreError>;
    /// Up to `limit` threads of any tenant whose last activity is before `before_ms` and that
    /// have no turn running (a waiting one is idle), oldest activity first (the retention
    /// sweep's batch).
    async fn idle_threads(&self, before_ms: i64, limit: i64) -> Result<Vec<ThreadRow>, StoreError>;
}

/// What a held turn's `lease_until_ms` says: "ask the owner's instance row" — never lapsed by
/// the per-turn test of earlier versions.
pub(super) const HELD_BY_INSTANCE: i64 = i64::MAX;

pub(super) const TURN_COLUMNS: &str = "id, public_id, thread, ordinal, agent, status, user_message_id, \
     user_text, started_by, created_at_ms, checkpoint, cancel_requested, client_tools, client_input, user_parts, epoch, parent";

/// `SELECT <turn columns> FROM turns WHERE <condition>`.
pub(super) fn select_turns(condition: &str) -> String {
    format!("SELECT {TURN_COLUMNS} FROM turns WHERE {condition}")
}

const FIND_THREAD: &str = "SELECT * FROM threads WHERE tenant = $1 AND thread_id = $2";
const THREAD_BY_PK: &str = "SELECT * FROM threads WHERE id = $1";
const INSERT_THREAD: &str = "INSERT INTO threads (tenant, thread_id, owner_kind, owner_id, created_at_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, thread_id) DO NOTHING";
const INSERT_RUN: &str = "INSERT INTO runs (thread, run_id, turn, start_seq, created_at_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread, run_id) DO NOTHING";
const RUN_TURN: &str = "SELECT turn, start_seq FROM runs WHERE thread = $1 AND run_id = $2";
const NOTES: &str = "SELECT body FROM notes WHERE thread = $1 ORDER BY note_no";
const THREAD_STATE: &str = "SELECT state FROM threads WHERE id = $1";
const SET_THREAD_STATE: &str = "UPDATE threads SET state = $2 WHERE id = $1";
/// A new turn is its thread's latest activity.
const TOUCH_THREAD: &str = "UPDATE threads SET updated_at_ms = $2 WHERE id = $1 AND updated_at_ms < $2";

/// A page of threads: each with its latest turn (agent, status) and its first turn (the
/// title), in the order of the `threads_by_activity` index. `$2` shows every thread, `$3` the
/// person whose threads are shown besides the tenant's; `$4`..`$7` are the optional filters and
/// the cursor.
const LIST_THREADS: &str = "SELECT t.id, t.tenant, t.thread_id, t.owner_kind, t.owner_id, t.created_at_ms, \
     t.updated_at_ms, lt.agent AS latest_agent, lt.status AS latest_status, \
     COALESCE(ft.user_text, '') AS first_user_text \
     FROM threads t \
     JOIN turns lt ON lt.thread = t.id AND lt.ordinal = (SELECT MAX(m.ordinal) FROM turns m WHERE m.thread = t.id) \
     LEFT JOIN turns ft ON ft.thread = t.id AND ft.ordinal = 1 \
     WHERE t.tenant = $1 \
     AND ($2 OR t.owner_kind = 'tenant' OR (t.owner_kind = 'person' AND t.owner_id = $3)) \
     AND ($4 IS NULL OR lt.agent = $4) \
     AND ($5 IS NULL OR lt.status = $5) \
     AND ($6 IS NULL OR t.updated_at_ms < $6 OR (t.updated_at_ms = $6 AND t.id < $7)) \
     ORDER BY t.updated_at_ms DESC, t.id DESC LIMIT $8";
const IDLE_THREADS: &str = "SELECT * FROM threads t WHERE t.updated_at_ms < $1 \
     AND NOT EXISTS (SELECT 1 FROM turns u WHERE u.thread = t.id AND u.status = 'running') \
     ORDER BY t.updated_at_ms, t.id LIMIT $2";
const BUSY_TURN: &str =
    "SELECT status FROM turns WHERE thread = $1 AND status IN ('running', 'waiting') ORDER BY ordinal DESC LIMIT 1";
const COUNT_TURNS: &str = "SELECT COUNT(*) AS turns FROM turns WHERE thread = $1";
const LATEST_TURN: &str = "SELECT id FROM turns WHERE thread = $1 ORDER BY ordinal DESC LIMIT 1";
/// Everything stored for a thread, children first (the foreign keys point at turns and
/// threads). `token_usage` is left: the tokens were spent, and stay counted in the budget.
const ERASE_THREAD: &[&str] = &[
    "DELETE FROM events WHERE turn IN (SELECT id FROM turns WHERE thread = $1)",
    "DELETE FROM interrupts WHERE thread = $1",
    "DELETE FROM runs WHERE thread = $1",
    "DELETE FROM notes WHERE thread = $1",
    "DELETE FROM turns WHERE thread = $1",
    "DELETE FROM threads WHERE id = $1",
];

fn insert_turn_returning() -> String {
    format!(
        "INSERT INTO turns (public_id, thread, ordinal, agent, status, user_message_id, user_text, \
         started_by, created_at_ms, owner_instance, lease_until_ms, client_tools, client_input, user_parts, parent) \
         VALUES ($1, $2, $3, $4, 'running', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (thread, ordinal) DO NOTHING RETURNING {TURN_COLUMNS}"
    )
}

pub(super) fn turn_row<DB: SqlDb>(row: &Record<DB>) -> Result<TurnRow, StoreError> {
    Ok(TurnRow {
        pk: row.get("id")?,
        public_id: row.get("public_id")?,
        thread: row.get("thread")?,
        ordinal: row.get("ordinal")?,
        agent: row.get("agent")?,
        status: TurnStatus::parse(&row.get::<String>("status")?)?,
        user_message_id: row.get("user_message_id")?,
        user_text: row.get("user_text")?,
        started_by: row.get("started_by")?,
        created_at_ms: row.get("created_at_ms")?,
        checkpoint: row.get("checkpoint")?,
        cancel_requested: row.get("cancel_requested")?,
        client_tools: row.get("client_tools")?,
        client_input: row.get("client_input")?,
        user_parts: row.get("user_parts")?,
        epoch: row.get("epoch")?,
        parent: row.get("parent")?,
    })
}

fn thread_row<DB: SqlDb>(row: &Record<DB>) -> Result<ThreadRow, StoreError> {
    Ok(ThreadRow {
        pk: row.get("id")?,
        tenant: row.get("tenant")?,
        thread_id: row.get("thread_id")?,
        owner: Owner { kind: OwnerKind::parse(&row.get::<String>("owner_kind")?)?, id: row.get("owner_id")? },
        created_at_ms: row.get("created_at_ms")?,
    })
}

#[async_trait]
impl<B: Backend> ThreadStore for B {
    async fn find_thread(&self, tenant: &str, thread_id: &str) -> Result<Option<ThreadRow>, StoreError> {
        Stmt::new(FIND_THREAD).bind(tenant).bind(thread_id).fetch_optional_as(self.read_pool(), thread_row).await
    }

    async fn thread_by_pk(&self, pk: i64) -> Result<Option<ThreadRow>, StoreError> {
        Stmt::new(THREAD_BY_PK).bind(pk).fetch_optional_as(self.read_pool(), thread_row).await
    }

    async fn thread_turns(&self, thread: i64) -> Result<Vec<TurnRow>, StoreError> {
        Stmt::new(&select_turns("thread = $1 ORDER BY ordinal"))
            .bind(thread)
            .fetch_all_as(self.read_pool(), turn_row)
            .await
    }

    async fn find_run(&self, thread: i64, run_id: &str) -> Result<Option<(TurnRow, i64)>, StoreError> {
        let Some(run) = Stmt::new(RUN_TURN).bind(thread).bind(run_id).fetch_optional(self.read_pool()).await? else {
            return Ok(None);
        };
        let (turn, start_seq): (i64, i64) = (run.get("turn")?, run.get("start_seq")?);
        Ok(self.turn_by_pk(turn).await?.map(|turn| (turn, start_seq)))
    }

    async fn turn_by_pk(&self, pk: i64) -> Result<Option<TurnRow>, StoreError> {
        Stmt::new(&select_turns("id = $1")).bind(pk).fetch_optional_as(self.read_pool(), turn_row).await
    }

    async fn start_turn(&self, new: &NewTurn) -> Result<StartTurn, StoreError> {
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        if let Some(limits) = &new.limits {
            // Counted after every start of the tenant before this one committed, and before
            // anything is written: a refused start leaves no row (§8).
            if !B::LOCK_TENANT.is_empty() {
                Stmt::new(B::LOCK_TENANT).bind(&new.tenant).execute(&mut tx).await?;
            }
            let row = Stmt::new(TENANT_USAGE)
                .bind(&new.tenant)
                .bind(limits.started_since_ms)
                .bind(limits.tokens_since_ms)
                .fetch_one(&mut tx)
                .await?;
            let usage = TenantUsage::read(&row)?;
            if limits.reached_by(&usage) {
                tx.rollback().await?;
                return Ok(StartTurn::OverLimit(usage));
            }
        }
        Stmt::new(INSERT_THREAD)
            .bind(&new.tenant)
            .bind(&new.thread_id)
            .bind(new.owner.kind.as_str())
            .bind(&new.owner.id)
            .bind(new.at_ms)
            .execute(&mut tx)
            .await?;
        let thread_row = Stmt::new(FIND_THREAD).bind(&new.tenant).bind(&new.thread_id).fetch_one(&mut tx).await?;
        let thread = self::thread_row(&thread_row)?;
        if thread.owner != new.owner {
            return Ok(StartTurn::NotOwner);
        }
        let existing = Stmt::new(RUN_TURN).bind(thread.pk).bind(&new.run_id).fetch_optional(&mut tx).await?;
        if existing.is_some() {
            tx.rollback().await?;
            return match self.find_run(thread.pk, &new.run_id).await? {
                Some((turn, start_seq)) => Ok(StartTurn::RunExists(turn, start_seq)),
                None => Ok(StartTurn::Conflict),
            };
        }
        let inserted = Stmt::new(&insert_turn_returning())
            .bind(&new.public_id)
            .bind(thread.pk)
            .bind(new.ordinal)
            .bind(&new.agent)
            .bind(&new.user_message_id)
            .bind(&new.user_text)
            .bind(&new.started_by)
            .bind(new.at_ms)
            .bind(&new.owner_instance)
            .bind(HELD_BY_INSTANCE)
            .bind(&new.client_tools)
            .bind(&new.client_input)
            .bind(&new.user_parts)
            .bind(new.parent)
            .fetch_optional(&mut tx)
            .await?;
        let Some(turn_row) = inserted else {
            return Ok(StartTurn::Conflict);
        };
        let turn = self::turn_row(&turn_row)?;
        Stmt::new(TOUCH_THREAD).bind(thread.pk).bind(new.at_ms).execute(&mut tx).await?;
        for audit in &new.audit {
            insert_audit(&mut tx, audit).await?;
        }
        let run_added = Stmt::new(INSERT_RUN)
            .bind(thread.pk)
            .bind(&new.run_id)
            .bind(turn.pk)
            .bind(0_i64)
            .bind(new.at_ms)
            .execute(&mut tx)
            .await?;
        if run_added == 0 {
            // The same run id raced us in another transaction: drop ours, follow theirs.
            tx.rollback().await?;
            return match self.find_run(thread.pk, &new.run_id).await? {
                Some((turn, start_seq)) => Ok(StartTurn::RunExists(turn, start_seq)),
                None => Ok(StartTurn::Conflict),
            };
        }
        tx.commit().await?;
        Ok(StartTurn::Started { thread, turn })
    }

    async fn add_run(
        &self,
        thread: i64,
        run_id: &str,
        turn: i64,
        start_seq: i64,
        at_ms: i64,
    ) -> Result<i64, StoreError> {
        Stmt::new(INSERT_RUN)
            .bind(thread)
            .bind(run_id)
            .bind(turn)
            .bind(start_seq)
            .bind(at_ms)
            .execute(self.write_pool())
            .await?;
        let row = Stmt::new(RUN_TURN).bind(thread).bind(run_id).fetch_one(self.write_pool()).await?;
        row.get("turn")
    }

    async fn notes(&self, thread: i64) -> Result<Vec<String>, StoreError> {
        let found = Stmt::new(NOTES).bind(thread).fetch_all(self.read_pool()).await?;
        found.iter().map(|row| row.get("body")).collect()
    }

    async fn thread_state(&self, thread: i64) -> Result<Option<String>, StoreError> {
        match Stmt::new(THREAD_STATE).bind(thread).fetch_optional(self.read_pool()).await? {
            Some(row) => row.get("state"),
            None => Ok(None),
        }
    }

    async fn set_thread_state(&self, thread: i64, state: &str) -> Result<(), StoreError> {
        Stmt::new(SET_THREAD_STATE).bind(thread).bind(state).execute(self.write_pool()).await?;
        Ok(())
    }

    async fn list_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadSummary>, StoreError> {
        let (all, person) = match &query.visibility {
            Visibility::All => (true, None),
            Visibility::TenantAnd(person) => (false, person.as_deref()),
        };
        let status = query.status.map(TurnStatus::as_str);
        let rows = Stmt::new(LIST_THREADS)
            .bind(query.tenant.as_str())
            .bind(all)
            .bind(Arg::OptText(person))
            .bind(&query.agent)
            .bind(Arg::OptText(status))
            .bind(query.after.map(|(at, _)| at))
            .bind(query.after.map(|(_, pk)| pk))
            .bind(query.limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ThreadSummary {
                    thread: thread_row(row)?,
                    updated_at_ms: row.get("updated_at_ms")?,
                    agent: row.get("latest_agent")?,
                    status: TurnStatus::parse(&row.get::<String>("latest_status")?)?,
                    first_user_text: row.get("first_user_text")?,
                })
            })
            .collect()
    }

    async fn delete_thread(
        &self,
        thread: i64,
        audit: &AuditEntry,
        idle: Option<StillIdle>,
    ) -> Result<DeleteThread, StoreError> {
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        // The thread's turns first, then the thread: the order the log writer locks them in
        // when a turn ends, so the two never wait for each other in a circle. A turn that starts
        // meanwhile waits for this transaction (its row references the locked thread).
        let lock_turns = format!("SELECT id FROM turns WHERE thread = $1 ORDER BY id {}", B::LOCK_ROW);
        Stmt::new(&lock_turns).bind(thread).fetch_all(&mut tx).await?;
        let lock_thread = format!("SELECT id, updated_at_ms FROM threads WHERE id = $1 {}", B::LOCK_ROW);
        let Some(locked) = Stmt::new(&lock_thread).bind(thread).fetch_optional(&mut tx).await? else {
            tx.rollback().await?;
            return Ok(DeleteThread::Missing);
        };
        // Retention's listing is older than these locks: a turn started since (the thread's
        // activity moves with every start, wait and end) makes the thread active again.
        if let Some(idle) = idle {
            let idle_still = locked.get::<i64>("updated_at_ms")? < idle.before_ms || {
                let latest = Stmt::new(LATEST_TURN).bind(thread).fetch_optional(&mut tx).await?;
                let latest: Option<i64> = latest.map(|row| row.get("id")).transpose()?;
                latest.is_some() && latest == idle.cancelled
            };
            if !idle_still {
                tx.rollback().await?;
                return Ok(DeleteThread::Active);
            }
        }
        // Read again under the locks: a turn that started before they were taken is seen here.
        if let Some(busy) = Stmt::new(BUSY_TURN).bind(thread).fetch_optional(&mut tx).await? {
            let status = TurnStatus::parse(&busy.get::<String>("status")?)?;
            tx.rollback().await?;
            return Ok(DeleteThread::Busy(status));
        }
        let turns: i64 = Stmt::new(COUNT_TURNS).bind(thread).fetch_one(&mut tx).await?.get("turns")?;
        for statement in ERASE_THREAD {
            Stmt::new(statement).bind(thread).execute(&mut tx).await?;
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(DeleteThread::Deleted { turns })
    }

    async fn idle_threads(&self, before_ms: i64, limit: i64) -> Result<Vec<ThreadRow>, StoreError> {
        Stmt::new(IDLE_THREADS).bind(before_ms).bind(limit).fetch_all_as(self.read_pool(), thread_row).await
    }
}
