//! Threads, their turns and runs, a thread's editable state and its notes: [`ThreadStore`].
//!
//! A thread is found by its tenant and public id ([`ThreadStore::find_thread`]); everything
//! else here takes a thread's or a turn's primary key, which the gateway only has from such a
//! tenant-scoped lookup (or from a row it read that way), never from a client.

use async_trait::async_trait;

use super::audit::insert_audit;
use super::backend::Backend;
use super::sql::{Record, SqlDb, Stmt};
use super::{AuditEntry, StoreError};

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
    /// The ownership epoch: grows with each claim (start, takeover, resume). A runner's writes
    /// carry the epoch it was given and are refused once it is no longer the turn's.
    pub epoch: i64,
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
    /// The instance that will run the turn (its lease is the instance's own, in `instances`).
    pub owner_instance: String,
    /// The `run.start` audit row (and a `board.read` one when the run opens with notes the
    /// caller may read), written in the same transaction when the turn starts.
    pub audit: Vec<AuditEntry>,
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
}

pub(super) const TURN_COLUMNS: &str = "id, public_id, thread, ordinal, agent, status, user_message_id, \
     user_text, started_by, created_at_ms, checkpoint, cancel_requested, client_tools, client_input, epoch";

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

fn insert_turn_returning() -> String {
    format!(
        "INSERT INTO turns (public_id, thread, ordinal, agent, status, user_message_id, user_text, \
         started_by, created_at_ms, owner_instance, lease_until_ms, client_tools, client_input) \
         VALUES ($1, $2, $3, $4, 'running', $5, $6, $7, $8, $9, $10, $11, $12) \
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
        epoch: row.get("epoch")?,
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
        Stmt::new(FIND_THREAD)
            .bind(tenant)
            .bind(thread_id)
            .fetch_optional(self.read_pool())
            .await?
            .as_ref()
            .map(thread_row)
            .transpose()
    }

    async fn thread_by_pk(&self, pk: i64) -> Result<Option<ThreadRow>, StoreError> {
        Stmt::new(THREAD_BY_PK).bind(pk).fetch_optional(self.read_pool()).await?.as_ref().map(thread_row).transpose()
    }

    async fn thread_turns(&self, thread: i64) -> Result<Vec<TurnRow>, StoreError> {
        Stmt::new(&select_turns("thread = $1 ORDER BY ordinal"))
            .bind(thread)
            .fetch_all(self.read_pool())
            .await?
            .iter()
            .map(turn_row)
            .collect()
    }

    async fn find_run(&self, thread: i64, run_id: &str) -> Result<Option<(TurnRow, i64)>, StoreError> {
        let Some(run) = Stmt::new(RUN_TURN).bind(thread).bind(run_id).fetch_optional(self.read_pool()).await? else {
            return Ok(None);
        };
        let (turn, start_seq): (i64, i64) = (run.get("turn")?, run.get("start_seq")?);
        Ok(self.turn_by_pk(turn).await?.map(|turn| (turn, start_seq)))
    }

    async fn turn_by_pk(&self, pk: i64) -> Result<Option<TurnRow>, StoreError> {
        Stmt::new(&select_turns("id = $1"))
            .bind(pk)
            .fetch_optional(self.read_pool())
            .await?
            .as_ref()
            .map(turn_row)
            .transpose()
    }

    async fn start_turn(&self, new: &NewTurn) -> Result<StartTurn, StoreError> {
        let mut tx = self.write_pool().begin().await?;
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
            .bind(super::leases::HELD_BY_INSTANCE)
            .bind(&new.client_tools)
            .bind(&new.client_input)
            .fetch_optional(&mut tx)
            .await?;
        let Some(turn_row) = inserted else {
            return Ok(StartTurn::Conflict);
        };
        let turn = self::turn_row(&turn_row)?;
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
}
