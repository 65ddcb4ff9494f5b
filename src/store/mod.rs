//! Storage: one trait, [`Store`], with a PostgreSQL and a SQLite implementation, chosen once at
//! start-up from the database URL's scheme. SQL lives only in this folder.
//!
//! The event log is written only through [`Store::commit_batch`], which the group-commit writer
//! calls with many turns' events at once: one transaction per batch, never one per event.

#[macro_use]
mod common;
mod postgres;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// Errors of the storage layer. Each becomes a 500 (`internal`) or a `failed` RUN_ERROR; the
/// cause is kept so it is logged whole, never sent to a client.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database URL '{0}' (use sqlite://FILE or postgres://…)")]
    UnsupportedUrl(String),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// Whether the database was only briefly away (a dropped connection, a restart or
    /// failover, a deadlock victim): the same statement may succeed when tried again.
    pub fn is_transient(&self) -> bool {
        let StoreError::Database(error) = self else { return false };
        match error {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(error) => error.code().is_some_and(|code| {
                // 08…: connection exceptions; 57P01–57P03: the server is shutting down or
                // starting; 40001/40P01: a serialisation failure or deadlock victim.
                code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "40001" | "40P01")
            }),
            _ => false,
        }
    }

    /// Whether the database answered and refused the statement (a constraint, a type): trying
    /// the same statement again cannot succeed, unlike a [transient](StoreError::is_transient)
    /// error or a fault of the gateway's own.
    pub fn is_refused_by_database(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(_)))
    }
}

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

    fn parse(value: &str) -> Result<Self, StoreError> {
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

/// Where an interrupt is in its life (§5.1). Only `Open` interrupts can be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptStatus {
    Open,
    /// A person decided it (approved, denied, answered or cancelled).
    Decided,
    /// Its time ran out: the gateway denied it.
    Expired,
    /// The call it asked about changed since it was shown.
    Superseded,
}

impl InterruptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptStatus::Open => "open",
            InterruptStatus::Decided => "decided",
            InterruptStatus::Expired => "expired",
            InterruptStatus::Superseded => "superseded",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "open" => InterruptStatus::Open,
            "decided" => InterruptStatus::Decided,
            "expired" => InterruptStatus::Expired,
            "superseded" => InterruptStatus::Superseded,
            other => return Err(StoreError::Corrupt(format!("interrupt status '{other}'"))),
        })
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
    /// The ownership epoch: grows with each claim (start, takeover, resume). A runner's writes
    /// carry the epoch it was given and are refused once it is no longer the turn's.
    pub epoch: i64,
}

/// What kind of event a log row holds. Run-boundary events are re-rendered per run (they carry
/// the run's ids); the rest are sent as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Plain = 0,
    RunStarted = 1,
    RunFinished = 2,
    RunError = 3,
    StateSnapshot = 4,
    /// The turn waits for interrupts: rendered per caller (§5.2). Ends the run that reaches it
    /// for a caller who may decide something.
    Waiting = 5,
    /// Interrupts were decided (or client tool results arrived) and the turn goes on: the run
    /// that brought them starts here.
    Resumed = 6,
    /// The turn waits for the results of client-declared tools: the run ends `success` with
    /// `pendingToolCallIds` (§9.2).
    ClientWait = 7,
}

impl EventKind {
    pub fn from_i16(value: i16) -> Result<Self, StoreError> {
        Ok(match value {
            0 => EventKind::Plain,
            1 => EventKind::RunStarted,
            2 => EventKind::RunFinished,
            3 => EventKind::RunError,
            4 => EventKind::StateSnapshot,
            5 => EventKind::Waiting,
            6 => EventKind::Resumed,
            7 => EventKind::ClientWait,
            other => return Err(StoreError::Corrupt(format!("event kind {other}"))),
        })
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::RunFinished | EventKind::RunError)
    }
}

/// One row of the event log.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: i64,
    pub kind: EventKind,
    /// The event's JSON, as the agent produced it (run ids are added when rendered).
    pub body: Bytes,
    pub at_ms: i64,
}

/// One runner's writes for its turn, fenced by the ownership epoch the runner holds: the store
/// writes them only while `epoch` is the turn's current one and the turn runs, checked inside
/// the committing transaction. An append that ends the turn (its terminal event, a wait) seals
/// it: nothing after it in the same batch is written either.
#[derive(Debug, Clone)]
pub struct TurnWrites {
    pub turn: i64,
    pub epoch: i64,
    pub ops: Vec<WriteOp>,
}

impl TurnWrites {
    /// Whether these writes end the runner's hold on the turn (it finishes or waits).
    fn seals(&self) -> bool {
        self.ops.iter().any(|op| {
            matches!(op, WriteOp::FinishTurn { .. } | WriteOp::WaitTurn { .. } | WriteOp::OpenInterrupt(_))
                || matches!(op, WriteOp::Event { event, .. } if event.kind.is_terminal())
        })
    }
}

/// Which appends of a batch the store refused because their epoch was stale or their turn had
/// ended (their indexes in the batch); everything else was committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub refused: Vec<usize>,
}

impl BatchOutcome {
    /// The ops of the appends the fence let through, in batch order: what the store writes.
    pub(crate) fn admitted<'a>(&self, batch: &'a [TurnWrites]) -> Vec<&'a WriteOp> {
        batch
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.refused.contains(index))
            .flat_map(|(_, writes)| writes.ops.iter())
            .collect()
    }
}

/// Decides, from the turns' rows as locked by the committing transaction (`(id, epoch,
/// status)`), which appends of a batch may be written: those whose epoch is current on a running
/// turn, up to and including the first append that seals the turn.
pub(crate) fn fence_batch(batch: &[TurnWrites], current: &[(i64, i64, String)]) -> BatchOutcome {
    let mut sealed: std::collections::HashSet<i64> = std::collections::HashSet::new();
    let mut refused = Vec::new();
    for (index, writes) in batch.iter().enumerate() {
        // An empty append only waits for what was queued before it: it writes nothing to fence.
        if writes.ops.is_empty() {
            continue;
        }
        let current_ok = current
            .iter()
            .any(|(id, epoch, status)| *id == writes.turn && *epoch == writes.epoch && status == "running");
        if !current_ok || sealed.contains(&writes.turn) {
            refused.push(index);
            continue;
        }
        if writes.seals() {
            sealed.insert(writes.turn);
        }
    }
    BatchOutcome { refused }
}

/// The distinct turns of a batch, in ascending order: rows are locked in this order so two
/// transactions locking overlapping sets never deadlock.
pub(crate) fn batch_turns(batch: &[TurnWrites]) -> Vec<i64> {
    let mut turns: Vec<i64> = batch.iter().map(|w| w.turn).collect();
    turns.sort_unstable();
    turns.dedup();
    turns
}

/// One write of a group-committed batch. A batch commits whole or not at all.
#[derive(Debug, Clone)]
pub enum WriteOp {
    Event {
        turn: i64,
        event: StoredEvent,
    },
    PinNote {
        thread: i64,
        note_no: i64,
        body: String,
    },
    Checkpoint {
        turn: i64,
        checkpoint: String,
    },
    FinishTurn {
        turn: i64,
        status: TurnStatus,
        at_ms: i64,
    },
    /// An interrupt opens; its turn is marked waiting in the same batch.
    OpenInterrupt(InterruptRow),
    /// The turn waits for something other than an interrupt (client tool results).
    WaitTurn {
        turn: i64,
    },
}

/// An interrupt as stored (§5.1).
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRow {
    pub id: String,
    pub thread: i64,
    pub turn: i64,
    /// The AG-UI `Interrupt` shown to clients, as JSON.
    pub shown: String,
    /// `{"persons": [...], "roles": [...]}`; both empty: the person who started the turn.
    pub deciders: String,
    pub four_eyes: bool,
    pub started_by: String,
    pub expires_at_ms: i64,
    pub status: InterruptStatus,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub decided_seq: Option<i64>,
    pub created_at_ms: i64,
}

/// One decision of a resume, the decision route or the expiry sweeper.
#[derive(Debug, Clone)]
pub struct Decision {
    pub interrupt_id: String,
    /// [`InterruptStatus::Decided`] or [`InterruptStatus::Expired`].
    pub status: InterruptStatus,
    /// What was decided, as JSON (`{"approved", "comment", "editedArgs", "answer"}`).
    pub decision: String,
    pub decided_by: String,
    pub decided_via: String,
}

/// What [`Store::decide_interrupts`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// All decisions recorded; the decision event is at `seq`; `resumed` (with the turn's new
    /// ownership epoch) when nothing of the turn is open any more and it was handed to the
    /// deciding instance to run on.
    Recorded { seq: i64, resumed: Option<i64> },
    /// One of them was decided by someone else first: nothing was recorded.
    AlreadyDecided,
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
    /// The instance that will run the turn, and until when its lease holds.
    pub owner_instance: String,
    pub lease_until_ms: i64,
    /// The `run.start` audit row (and a `board.read` one when the run opens with notes the
    /// caller may read), written in the same transaction when the turn starts.
    pub audit: Vec<AuditEntry>,
}

/// What [`Store::start_turn`] did.
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

/// Counts of every table, for tests that check a refused request changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowCounts {
    pub threads: i64,
    pub turns: i64,
    pub runs: i64,
    pub events: i64,
    pub notes: i64,
    pub audit: i64,
}

/// One row to append to the audit trail (§8).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub tenant: String,
    /// `run.start`, `key.create`, `key.revoke`, `token.exchange`, `auth.failures`.
    pub action: String,
    /// `person:<id>`, `key:<id>`, `cli` or `gateway`.
    pub actor: String,
    /// `app:<id>` when an app acted for the person.
    pub via: Option<String>,
    /// JSON text.
    pub detail: String,
    pub at_ms: i64,
}

/// A stored audit row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub id: i64,
    pub entry: AuditEntry,
}

/// A tenant's use of its limits (§8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUsage {
    pub running_turns: i64,
    pub turns_started: i64,
    pub tokens: i64,
}

/// What kind of credential an API key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A tenant API key: a bearer credential with no person behind it.
    Tenant,
    /// A registered app's key: accepted only by the token exchange.
    App,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Tenant => "tenant",
            KeyKind::App => "app",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
        match value {
            "tenant" => Ok(KeyKind::Tenant),
            "app" => Ok(KeyKind::App),
            other => Err(StoreError::Corrupt(format!("key kind '{other}'"))),
        }
    }
}

/// An API key as stored: never its secret, only the secret's SHA-256.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRow {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub kind: KeyKind,
    /// Space-separated gateway scopes.
    pub scopes: String,
    pub secret_sha256: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies the migrations of this store's kind.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Checks the database answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError>;
    /// Connections held by the pool, and how many of them are idle.
    fn pool_stats(&self) -> (u32, usize);
    /// Whether other instances may share this database (PostgreSQL), or this instance is its
    /// only user (SQLite): a shared store runs several log writers and hears other instances'
    /// wake-ups; an unshared one takes over every turn an earlier start left running.
    fn is_shared(&self) -> bool;

    async fn find_thread(&self, tenant: &str, thread_id: &str) -> Result<Option<ThreadRow>, StoreError>;
    async fn thread_by_pk(&self, pk: i64) -> Result<Option<ThreadRow>, StoreError>;
    /// The thread's turns, oldest first.
    async fn thread_turns(&self, thread: i64) -> Result<Vec<TurnRow>, StoreError>;
    /// The turn a run id follows and where in its log the run begins.
    async fn find_run(&self, thread: i64, run_id: &str) -> Result<Option<(TurnRow, i64)>, StoreError>;
    async fn find_turn(&self, thread: i64, public_id: &str) -> Result<Option<TurnRow>, StoreError>;
    async fn turn(&self, pk: i64) -> Result<Option<TurnRow>, StoreError>;

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

    /// Group commit: every runner's writes in one transaction, each fenced by its epoch (see
    /// [`TurnWrites`]); the refused ones write nothing and are named in the outcome.
    async fn commit_batch(&self, batch: &[TurnWrites]) -> Result<BatchOutcome, StoreError>;

    /// Up to `limit` events of a turn after `after_seq`, in order.
    async fn events_after(&self, turn: i64, after_seq: i64, limit: i64) -> Result<Vec<StoredEvent>, StoreError>;
    async fn last_seq(&self, turn: i64) -> Result<i64, StoreError>;

    /// The thread's notes, by number.
    async fn notes(&self, thread: i64) -> Result<Vec<String>, StoreError>;

    /// What a tenant has used (§8 limits): turns running now, turns started since `since_ms`,
    /// and tokens reported since `tokens_since_ms`.
    async fn tenant_usage(&self, tenant: &str, since_ms: i64, tokens_since_ms: i64) -> Result<TenantUsage, StoreError>;

    /// The thread's editable state (§7) as JSON, when a run wrote any.
    async fn thread_state(&self, thread: i64) -> Result<Option<String>, StoreError>;

    /// Replaces the thread's editable state.
    async fn set_thread_state(&self, thread: i64, state: &str) -> Result<(), StoreError>;

    /// Records tokens an agent reported for a turn (the tenant's token budget).
    async fn add_tokens(&self, tenant: &str, turn: i64, tokens: i64, at_ms: i64) -> Result<(), StoreError>;

    /// Marks a turn for cancellation; false when it is not running.
    async fn request_cancel(&self, turn: i64) -> Result<bool, StoreError>;

    /// Takes over one running turn whose lease lapsed before `now_ms`, for `instance` until
    /// `lease_until_ms`, with a new ownership epoch (in the returned row). Of instances racing
    /// for a turn exactly one gets it. `include_own`: also a lapsed turn whose row names
    /// `instance` (false at start-up, where every lease counts as lapsed).
    async fn claim_lapsed_turn(
        &self,
        instance: &str,
        now_ms: i64,
        lease_until_ms: i64,
        include_own: bool,
    ) -> Result<Option<TurnRow>, StoreError>;
    /// Extends the leases of the turns `instance` runs, each `(turn, epoch)` only while that
    /// epoch is current; returns the turns renewed (one missing from the answer was lost).
    async fn renew_leases(
        &self,
        instance: &str,
        lease_until_ms: i64,
        held: &[(i64, i64)],
    ) -> Result<Vec<i64>, StoreError>;
    /// Gives a turn's lease up at once, so another instance takes it without waiting; only
    /// while `epoch` is still the turn's.
    async fn release_turn(&self, turn: i64, instance: &str, epoch: i64) -> Result<(), StoreError>;

    /// The turn's interrupts, oldest first.
    async fn turn_interrupts(&self, turn: i64) -> Result<Vec<InterruptRow>, StoreError>;
    async fn find_interrupt(&self, id: &str) -> Result<Option<InterruptRow>, StoreError>;
    /// Open interrupts past their expiry at `now_ms`.
    async fn lapsed_interrupts(&self, now_ms: i64) -> Result<Vec<InterruptRow>, StoreError>;
    /// Records `decisions` of one waiting turn in one transaction, all or nothing, with the
    /// decision event `marker` (its seq is assigned here) and the decisions' `audit` rows. When
    /// no interrupt of the turn stays open the turn runs again, leased to `instance` until
    /// `lease_until_ms` under a new epoch. A turn that no longer waits records nothing.
    async fn decide_interrupts(
        &self,
        turn: i64,
        decisions: &[Decision],
        marker: &StoredEvent,
        audit: &[AuditEntry],
        instance: &str,
        lease_until_ms: i64,
    ) -> Result<Decided, StoreError>;

    async fn row_counts(&self) -> Result<RowCounts, StoreError>;

    /// Stores a new key and its `key.create` audit row in one transaction.
    async fn create_api_key(&self, key: &ApiKeyRow, audit: &AuditEntry) -> Result<(), StoreError>;
    /// A key by its public id, in any tenant: a credential names its tenant, and the caller's
    /// `?tenant=` is then compared with it (another tenant's key is 403, not 401).
    async fn find_api_key(&self, id: &str) -> Result<Option<ApiKeyRow>, StoreError>;
    /// The tenant's keys (every tenant's with `None`), oldest first.
    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRow>, StoreError>;
    /// Revokes a key of the tenant and appends the `key.revoke` audit row, in one transaction;
    /// false when the tenant has no such key or it was revoked already.
    async fn revoke_api_key(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;
    /// Ids of keys revoked at or after `since_ms`, of every tenant (the revocation watcher's
    /// one query per interval, shared by all open streams).
    async fn revoked_keys_since(&self, since_ms: i64) -> Result<Vec<String>, StoreError>;
    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;
    /// Audit rows at or after `since_ms`, oldest first, at most `limit`.
    async fn audit_rows(&self, tenant: Option<&str>, since_ms: i64, limit: i64) -> Result<Vec<AuditRow>, StoreError>;

    /// Wake-ups from other instances sharing the database: `(turn, seq)` pairs. `None` where
    /// the store serves one instance only (SQLite).
    async fn listen_for_appends(&self) -> Result<Option<tokio::sync::mpsc::Receiver<Vec<(i64, i64)>>>, StoreError>;
    /// Tells other instances that these turns' logs grew (one notification per batch).
    async fn announce_appends(&self, appended: &[(i64, i64)]) -> Result<(), StoreError>;
}

/// Opens the store named by `url`'s scheme, with `max_connections` per pool.
pub async fn connect(url: &str, max_connections: u32) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::connect(url, max_connections).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    } else {
        Err(StoreError::UnsupportedUrl(crate::redact::redact_url(url)))
    }
}

/// Row mapping shared by both stores: the column names are the same in both schemas.
mod rows {
    use super::*;
    use sqlx::{ColumnIndex, Decode, Row, Type};

    pub(super) const TURN_COLUMNS: &str = "id, public_id, thread, ordinal, agent, status, user_message_id, \
         user_text, started_by, created_at_ms, checkpoint, cancel_requested, client_tools, epoch";

    /// A row type both stores' rows satisfy.
    pub(super) trait AnyRow: Row
    where
        Self: Sized,
    {
        fn field<'r, T: Decode<'r, Self::Database> + Type<Self::Database>>(
            &'r self,
            column: &str,
        ) -> Result<T, StoreError>;
    }

    impl<R: Row> AnyRow for R
    where
        for<'c> &'c str: ColumnIndex<R>,
    {
        fn field<'r, T: Decode<'r, Self::Database> + Type<Self::Database>>(
            &'r self,
            column: &str,
        ) -> Result<T, StoreError> {
            Ok(self.try_get(column)?)
        }
    }

    pub(super) fn turn<'r, R: AnyRow>(row: &'r R) -> Result<TurnRow, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        i32: Decode<'r, R::Database> + Type<R::Database>,
        bool: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(TurnRow {
            pk: row.field("id")?,
            public_id: row.field("public_id")?,
            thread: row.field("thread")?,
            ordinal: row.field("ordinal")?,
            agent: row.field("agent")?,
            status: TurnStatus::parse(&row.field::<String>("status")?)?,
            user_message_id: row.field("user_message_id")?,
            user_text: row.field("user_text")?,
            started_by: row.field("started_by")?,
            created_at_ms: row.field("created_at_ms")?,
            checkpoint: row.field("checkpoint")?,
            cancel_requested: row.field("cancel_requested")?,
            client_tools: row.field("client_tools")?,
            epoch: row.field("epoch")?,
        })
    }

    pub(super) fn thread<'r, R: AnyRow>(row: &'r R) -> Result<ThreadRow, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(ThreadRow {
            pk: row.field("id")?,
            tenant: row.field("tenant")?,
            thread_id: row.field("thread_id")?,
            owner: Owner { kind: OwnerKind::parse(&row.field::<String>("owner_kind")?)?, id: row.field("owner_id")? },
            created_at_ms: row.field("created_at_ms")?,
        })
    }

    pub(super) fn event<'r, R: AnyRow>(row: &'r R) -> Result<StoredEvent, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        i16: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(StoredEvent {
            seq: row.field("seq")?,
            kind: EventKind::from_i16(row.field("kind")?)?,
            body: Bytes::from(row.field::<String>("body")?),
            at_ms: row.field("at_ms")?,
        })
    }

    pub(super) fn interrupt<'r, R: AnyRow>(row: &'r R) -> Result<InterruptRow, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        bool: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Option<String>: Decode<'r, R::Database> + Type<R::Database>,
        Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(InterruptRow {
            id: row.field("id")?,
            thread: row.field("thread")?,
            turn: row.field("turn")?,
            shown: row.field("shown")?,
            deciders: row.field("deciders")?,
            four_eyes: row.field("four_eyes")?,
            started_by: row.field("started_by")?,
            expires_at_ms: row.field("expires_at_ms")?,
            status: InterruptStatus::parse(&row.field::<String>("status")?)?,
            decision: row.field("decision")?,
            decided_by: row.field("decided_by")?,
            decided_seq: row.field("decided_seq")?,
            created_at_ms: row.field("created_at_ms")?,
        })
    }

    pub(super) fn counts<'r, R: AnyRow>(row: &'r R) -> Result<RowCounts, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(RowCounts {
            threads: row.field("threads")?,
            turns: row.field("turns")?,
            runs: row.field("runs")?,
            events: row.field("events")?,
            notes: row.field("notes")?,
            audit: row.field("audit")?,
        })
    }

    pub(super) fn api_key<'r, R: AnyRow>(row: &'r R) -> Result<ApiKeyRow, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(ApiKeyRow {
            id: row.field("id")?,
            tenant: row.field("tenant")?,
            name: row.field("name")?,
            kind: KeyKind::parse(&row.field::<String>("kind")?)?,
            scopes: row.field("scopes")?,
            secret_sha256: row.field("secret_sha256")?,
            created_by: row.field("created_by")?,
            created_at_ms: row.field("created_at_ms")?,
            revoked_at_ms: row.field("revoked_at_ms")?,
        })
    }

    pub(super) fn audit<'r, R: AnyRow>(row: &'r R) -> Result<AuditRow, StoreError>
    where
        i64: Decode<'r, R::Database> + Type<R::Database>,
        String: Decode<'r, R::Database> + Type<R::Database>,
        Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    {
        Ok(AuditRow {
            id: row.field("id")?,
            entry: AuditEntry {
                tenant: row.field("tenant")?,
                action: row.field("action")?,
                actor: row.field("actor")?,
                via: row.field("via")?,
                detail: row.field("detail")?,
                at_ms: row.field("at_ms")?,
            },
        })
    }

    /// Statements whose text is the same for both databases (`$n` parameters in order).
    pub(super) mod sql {
        pub const FIND_THREAD: &str = "SELECT * FROM threads WHERE tenant = $1 AND thread_id = $2";
        pub const THREAD_BY_PK: &str = "SELECT * FROM threads WHERE id = $1";
        pub const INSERT_THREAD: &str = "INSERT INTO threads (tenant, thread_id, owner_kind, owner_id, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, thread_id) DO NOTHING";
        pub const INSERT_RUN: &str = "INSERT INTO runs (thread, run_id, turn, start_seq, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (thread, run_id) DO NOTHING";
        pub const RUN_TURN: &str = "SELECT turn, start_seq FROM runs WHERE thread = $1 AND run_id = $2";
        pub const INSERT_NOTE: &str = "INSERT INTO notes (thread, note_no, body) VALUES ($1, $2, $3)";
        pub const SET_CHECKPOINT: &str = "UPDATE turns SET checkpoint = $1 WHERE id = $2";
        pub const FINISH_TURN: &str = "UPDATE turns SET status = $1, finished_at_ms = $2 WHERE id = $3";
        /// Sequence numbers are dense within a turn, so a page is a key range: the planner reads
        /// at most `$3` rows whatever its statistics say (an open-ended `seq > $2` was planned,
        /// on a fresh table, as a scan and sort of the turn's whole rest).
        pub const EVENTS_IN_RANGE: &str = "SELECT seq, kind, body, at_ms FROM events \
             WHERE turn = $1 AND seq > $2 AND seq <= $2 + $3 ORDER BY seq";
        /// The fallback when a range comes back empty: a gap (events of a batch that failed)
        /// must not stall a stream.
        pub const EVENTS_AFTER: &str =
            "SELECT seq, kind, body, at_ms FROM events WHERE turn = $1 AND seq > $2 ORDER BY seq LIMIT $3";
        pub const LAST_SEQ: &str = "SELECT COALESCE(MAX(seq), 0) AS last FROM events WHERE turn = $1";
        pub const NOTES: &str = "SELECT body FROM notes WHERE thread = $1 ORDER BY note_no";
        pub const TENANT_USAGE: &str = "SELECT \
             (SELECT COUNT(*) FROM turns t JOIN threads h ON h.id = t.thread \
               WHERE h.tenant = $1 AND t.status = 'running') AS running_turns, \
             (SELECT COUNT(*) FROM turns t JOIN threads h ON h.id = t.thread \
               WHERE h.tenant = $1 AND t.created_at_ms >= $2) AS turns_started, \
             (SELECT CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM token_usage WHERE tenant = $1 AND at_ms >= $3) AS tokens";
        pub const ADD_TOKENS: &str = "INSERT INTO token_usage (tenant, turn, tokens, at_ms) VALUES ($1, $2, $3, $4)";
        pub const INSERT_INTERRUPT: &str = "INSERT INTO interrupts (id, thread, turn, shown, deciders, four_eyes, \
             started_by, expires_at_ms, status, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'open', $9)";
        pub const WAIT_TURN: &str = "UPDATE turns SET status = 'waiting', owner_instance = NULL, lease_until_ms = 0 \
             WHERE id = $1";
        pub const TURN_INTERRUPTS: &str = "SELECT * FROM interrupts WHERE turn = $1 ORDER BY created_at_ms, id";
        pub const FIND_INTERRUPT: &str = "SELECT * FROM interrupts WHERE id = $1";
        pub const LAPSED_INTERRUPTS: &str =
            "SELECT * FROM interrupts WHERE status = 'open' AND expires_at_ms < $1 ORDER BY expires_at_ms LIMIT 100";
        pub const DECIDE_INTERRUPT: &str = "UPDATE interrupts SET status = $1, decision = $2, decided_by = $3, \
             decided_via = $4, decided_at_ms = $5 WHERE id = $6 AND turn = $7 AND status = 'open'";
        pub const MARK_DECIDED_SEQ: &str = "UPDATE interrupts SET decided_seq = $1 WHERE id = $2";
        pub const OPEN_INTERRUPTS_LEFT: &str =
            "SELECT COUNT(*) AS open FROM interrupts WHERE turn = $1 AND status = 'open'";
        pub const RESUME_TURN: &str = "UPDATE turns SET status = 'running', owner_instance = $1, lease_until_ms = $2, \
             epoch = epoch + 1 WHERE id = $3 AND status = 'waiting' RETURNING epoch";
        pub const INSERT_EVENT: &str = "INSERT INTO events (turn, seq, kind, body, at_ms) VALUES ($1, $2, $3, $4, $5)";
        pub const RENEW_LEASE: &str = "UPDATE turns SET lease_until_ms = $1 \
             WHERE id = $2 AND epoch = $3 AND owner_instance = $4 AND status = 'running' RETURNING id";
        pub const RELEASE_TURN: &str = "UPDATE turns SET owner_instance = NULL, lease_until_ms = 0 \
             WHERE id = $1 AND owner_instance = $2 AND epoch = $3";
        pub const ROW_COUNTS: &str = "SELECT (SELECT COUNT(*) FROM threads) AS threads, \
             (SELECT COUNT(*) FROM turns) AS turns, (SELECT COUNT(*) FROM runs) AS runs, \
             (SELECT COUNT(*) FROM events) AS events, (SELECT COUNT(*) FROM notes) AS notes, \
             (SELECT COUNT(*) FROM audit) AS audit";
        pub const INSERT_AUDIT: &str = "INSERT INTO audit (at_ms, tenant, action, actor, via, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        pub const INSERT_API_KEY: &str = "INSERT INTO api_keys (id, tenant, name, kind, scopes, secret_sha256, \
             created_by, created_at_ms, revoked_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
        pub const FIND_API_KEY: &str = "SELECT * FROM api_keys WHERE id = $1";
        pub const TENANT_API_KEYS: &str = "SELECT * FROM api_keys WHERE tenant = $1 ORDER BY created_at_ms, id";
        pub const ALL_API_KEYS: &str = "SELECT * FROM api_keys ORDER BY tenant, created_at_ms, id";
        pub const REVOKE_API_KEY: &str = "UPDATE api_keys SET revoked_at_ms = $1 \
             WHERE tenant = $2 AND id = $3 AND revoked_at_ms IS NULL";
        pub const REVOKED_SINCE: &str = "SELECT id FROM api_keys WHERE revoked_at_ms >= $1";
        pub const TENANT_AUDIT: &str =
            "SELECT * FROM audit WHERE tenant = $1 AND at_ms >= $2 ORDER BY at_ms, id LIMIT $3";
        pub const ALL_AUDIT: &str = "SELECT * FROM audit WHERE at_ms >= $1 ORDER BY at_ms, id LIMIT $2";
    }

    /// `SELECT <turn columns> FROM turns WHERE <condition>`.
    pub(super) fn select_turns(condition: &str) -> String {
        format!("SELECT {TURN_COLUMNS} FROM turns WHERE {condition}")
    }

    pub(super) fn insert_turn_returning() -> String {
        format!(
            "INSERT INTO turns (public_id, thread, ordinal, agent, status, user_message_id, user_text, \
             started_by, created_at_ms, owner_instance, lease_until_ms, client_tools) \
             VALUES ($1, $2, $3, $4, 'running', $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (thread, ordinal) DO NOTHING RETURNING {TURN_COLUMNS}"
        )
    }

    /// One conditional update: the lapsed turn is locked while claimed (`FOR UPDATE SKIP
    /// LOCKED` where the database has it) and re-checked, so two instances never both win.
    /// Never a turn the claiming instance holds: at start-up every lease counts as lapsed, and
    /// a turn just claimed must not be found again.
    ///
    /// The claim gives the turn a new epoch, which fences off every write of its previous
    /// runner that commits after the claim.
    pub(super) fn claim_lapsed_turn(skip_locked: &str, include_own: bool) -> String {
        let whose = if include_own { "" } else { "AND (owner_instance IS NULL OR owner_instance <> $1)" };
        format!(
            "UPDATE turns SET owner_instance = $1, lease_until_ms = $2, epoch = epoch + 1 \
             WHERE status = 'running' AND lease_until_ms < $3 AND id = \
             (SELECT id FROM turns WHERE status = 'running' AND lease_until_ms < $3 \
              {whose} ORDER BY id LIMIT 1 {skip_locked}) \
             RETURNING {TURN_COLUMNS}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_statuses_read_back_as_written_and_an_unknown_one_is_corrupt() {
        for status in
            [InterruptStatus::Open, InterruptStatus::Decided, InterruptStatus::Expired, InterruptStatus::Superseded]
        {
            assert_eq!(InterruptStatus::parse(status.as_str()).ok(), Some(status));
        }
        assert!(matches!(InterruptStatus::parse("approved"), Err(StoreError::Corrupt(_))));
    }

    #[tokio::test]
    async fn a_sqlite_store_serves_one_instance() {
        let file = std::env::temp_dir().join(format!("agui-shared-{}.db", uuid::Uuid::new_v4().simple()));
        let store = connect(&format!("sqlite://{}?mode=rwc", file.display()), 1).await.expect("sqlite opens");
        assert!(!store.is_shared());
        let _ = std::fs::remove_file(file);
    }
}
