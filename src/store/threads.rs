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
use super::error::StoreError;
use super::rows::audit::AuditEntry;
use super::rows::threads::{
    DeleteThread, NewRun, NewTurn, Owner, OwnerKind, StartTurn, StillIdle, ThreadQuery, ThreadRow, ThreadSummary,
    TurnRow, TurnStatus, Visibility,
};
use super::rows::usage::TenantUsage;
use super::sql::{Arg, Record, SqlDb, Stmt};
use super::usage::TENANT_USAGE;

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
    /// and where its run begins (an earlier one's, if the id was already used).
    async fn add_run(&self, run: &NewRun<'_>) -> Result<(i64, i64), StoreError>;

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

/// The turn a run id follows and where the run begins (`run_start_seq`), in one statement.
fn find_run_statement() -> String {
    format!(
        "SELECT {TURN_COLUMNS}, run_start_seq FROM turns JOIN (SELECT turn AS run_turn, start_seq AS run_start_seq \
         FROM runs WHERE thread = $1 AND run_id = $2) AS run ON run.run_turn = turns.id"
    )
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
    "DELETE FROM event_segments WHERE turn IN (SELECT id FROM turns WHERE thread = $1)",
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
        // The run and its turn in one statement: a request finds its run before anything else.
        let Some(row) =
            Stmt::new(&find_run_statement()).bind(thread).bind(run_id).fetch_optional(self.read_pool()).await?
        else {
            return Ok(None);
        };
        Ok(Some((turn_row(&row)?, row.get("run_start_seq")?)))
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

    async fn add_run(&self, run: &NewRun<'_>) -> Result<(i64, i64), StoreError> {
        let NewRun { thread, run_id, turn, start_seq, at_ms } = *run;
        let added = Stmt::new(INSERT_RUN)
            .bind(thread)
            .bind(run_id)
            .bind(turn)
            .bind(start_seq)
            .bind(at_ms)
            .execute(self.write_pool())
            .await?;
        if added == 1 {
            return Ok((turn, start_seq));
        }
        // The id was recorded before: the run it names.
        let row = Stmt::new(RUN_TURN).bind(thread).bind(run_id).fetch_one(self.write_pool()).await?;
        Ok((row.get("turn")?, row.get("start_seq")?))
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
