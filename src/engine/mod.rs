//! The turn engine: decides what a run follows (a new turn, the same turn again, or a refusal),
//! runs turns on their agents, and renders a turn's log as a stream of events for a run.
//!
//! Nothing here knows HTTP: the `http` layer turns [`EngineError`] into statuses and
//! [`StreamItem`]s into SSE frames. The log is the truth; a stream is a view of it.
//!
//! This file holds the engine's shape ([`Engine`], its state, its errors and the plan types a
//! run is answered with). The engine's rooms are folders whose files own their code:
//! [`request`] answers a run request (plan → decide → follow, with the history, quota and
//! resume checks); [`turn`] is a turn as an agent answers it ([`turn::TurnContext`], the words
//! it says, what it reads, the [`turn::agent::Agent`] trait and what an agent answers with);
//! [`log`] is the event log ([`log::LogWriter`], its writer loop, batch stages and recovery,
//! and the gateway's own [`log::events`]); [`stream`] is how the log becomes a caller's events
//! (the hub, following other instances' turns, catch-up pages, a run's tail and a connect
//! stream). Below them all, [`interrupts`] is the interrupt vocabulary every room speaks.
//! Beside them, as `impl Engine` blocks of their own: [`runner`] (the turns running here),
//! [`sweeper`] (leases, takeovers, expiries, wake-ups), [`audit`] (audit rows) and [`threads`]
//! (lists, erasure, retention); with [`board`] and [`conversation`].

mod audit;
pub mod board;
#[cfg(test)]
mod clock_tests;
pub mod conversation;
pub mod inbox;
pub mod interrupts;
pub mod log;
#[cfg(test)]
mod reasoning_tests;
pub mod request;
#[cfg(test)]
mod round_trip_tests;
mod runner;
pub mod stream;
mod sweeper;
#[cfg(test)]
mod test_engine;
pub mod thread_titles;
pub mod threads;
pub mod trail;
pub mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::bus::Bus;
use crate::caller::Caller;
use crate::clock::Clock;
use crate::config::Config;
use crate::ids::{EventId, RunId, TenantId, ThreadId};
use crate::metrics::Metrics;
/// The one set of error codes (HTTP bodies and `RUN_ERROR`s alike), by which the engine names
/// its refusals and how a turn failed.
pub use crate::protocol::ErrorCode;
use crate::protocol::RunAgentInput;
use crate::store::{branches, Store, StoreError, StoredEvent, ThreadRow, TurnRow};
use interrupts::Viewer;
use log::LogWriter;
use runner::Runner;
use stream::hub::Hub;
use turn::agent::AgentRegistry;

pub(crate) use log::read_log;
pub use request::{quota_refusal, quota_window};
pub use stream::connect::{ConnectPlan, ConnectRequest};
pub use stream::tail::StreamItem;

/// Errors that stop a request before its stream opens; each documents its HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// 403 `permission_denied`: never says whether the thread exists.
    #[error("permission denied")]
    PermissionDenied,
    /// 400 `bad_last_event_id`.
    #[error("Last-Event-ID is not an event of this run: {0}")]
    BadLastEventId(String),
    /// 400 `bad_request`, naming the field.
    #[error("{field}: {message}")]
    BadRequest { field: &'static str, message: String },
    /// 400 `bad_request`: the run changes an editable state key to a value its schema refuses.
    #[error("state.{key}: {message}")]
    BadState { key: String, message: String },
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `not_running`.
    #[error("{0}")]
    NotRunning(String),
    /// 409 `turn_in_progress`: a turn of the thread runs or waits.
    #[error("{0}")]
    TurnInProgress(String),
    /// 403 `permission_denied`: only a person decides; the message names where they can.
    #[error("only a person can answer interrupts{0}")]
    PersonOnly(String),
    /// A decision refused by the checks of §5.3 (409 with the code; 403 for `not_a_decider`).
    #[error("{}", .0.message)]
    DecisionRefused(Refusal),
    /// 500 `internal`: logged, never shown.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// 500 `internal`: the wake-up bus failed (logged, never shown).
    #[error(transparent)]
    Bus(#[from] crate::bus::BusError),
    /// 500 `internal`: JSON the gateway wrote itself (a checkpoint, a decision, who decides)
    /// does not read back: the engine's fault to report, not the store's (logged, never shown).
    #[error("{what}")]
    Unreadable {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// 500 `internal`: an event the engine writes could not be encoded (logged, never shown).
    #[error("{what} could not be encoded")]
    Encoding {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// Why an engine could not start: its database, or its wake-up bus.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bus(#[from] crate::bus::BusError),
}

/// Why a run is refused after the request was accepted: a lone `RUN_ERROR` with this code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    /// `rawEvent.gateway` of the `RUN_ERROR`: a limit's `{scope, limit, used, resetsAt}`.
    pub figures: Option<Value>,
}

/// What a run streams: a turn's log from a position on, or a refusal (one per request: no box).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum RunPlan {
    Follow(FollowPlan),
    Refused(Refusal),
}

#[derive(Debug, Clone)]
pub struct FollowPlan {
    pub thread_id: String,
    pub thread_pk: i64,
    pub run_id: String,
    pub turn_pk: i64,
    pub turn_id: String,
    /// Where in the turn's log this run begins: 0, or just before the decision it resumed with.
    pub run_start_seq: i64,
    /// Stream the events after this sequence number.
    pub after_seq: i64,
    /// SSE events of the event at `after_seq + 1` the client already has (a part id).
    pub skip_parts: u32,
    /// Who the stream is rendered for.
    pub viewer: Viewer,
    /// Whether the run restates the conversation (`MESSAGES_SNAPSHOT`) right after its
    /// `RUN_STARTED`: when the thread had turns before this one (or on a connect stream) and
    /// the caller may read content.
    pub snapshot_on_open: bool,
    /// This run's answers to its resume entries (`CUSTOM gateway.resume`), when it resumed.
    pub resume_outcomes: Option<Vec<Value>>,
    /// Where people decide (`gateway/console`, `console_url`), when one is configured.
    pub console: Option<String>,
    /// What the plan read or wrote that the stream needs, not to read it again (`None`: it reads
    /// it). The thread's turns, the run's own among them, for the conversation the run restates
    /// when it opens (they hold: a thread takes one turn at a time).
    pub turns: Option<Arc<[TurnRow]>>,
    /// The first event at or after `after_seq` when that is past the run's start, as a
    /// reconnect read it to check its `Last-Event-ID`: whether the run already ended there.
    pub at_position: Option<StoredEvent>,
    /// The event the run opens with, when the plan wrote it itself (a resume's decision).
    pub opening: Option<StoredEvent>,
}

impl FollowPlan {
    /// A run following `turn` of `thread` (its id and key) from the turn's start for `viewer`,
    /// restating the conversation when the thread had turns before and the viewer may read
    /// content. What differs (a later start, a connect stream, rows read) each caller sets.
    pub(crate) fn new(
        thread: (&str, i64),
        run_id: &str,
        turn: &TurnRow,
        viewer: Viewer,
        console: Option<String>,
    ) -> FollowPlan {
        FollowPlan {
            thread_id: thread.0.to_string(),
            thread_pk: thread.1,
            run_id: run_id.to_string(),
            turn_pk: turn.pk,
            turn_id: turn.public_id.clone(),
            run_start_seq: 0,
            after_seq: 0,
            skip_parts: 0,
            snapshot_on_open: turn.ordinal > 1 && viewer.clearance.content,
            viewer,
            resume_outcomes: None,
            console,
            turns: None,
            at_position: None,
            opening: None,
        }
    }
}

/// One run request, after the HTTP layer validated its shape.
pub struct RunRequest<'a> {
    pub tenant: &'a TenantId,
    pub caller: &'a Caller,
    pub agent: &'a str,
    pub thread_id: &'a ThreadId,
    pub run_id: &'a RunId,
    pub input: &'a RunAgentInput,
    pub last_event_id: Option<&'a EventId>,
    /// The agent's editable keys in the run's `state`, as the client sent them: the engine
    /// takes those it changed, checked against their schemas (written when the run starts a
    /// turn; an echo of what the thread holds is no edit).
    pub state_writes: serde_json::Map<String, Value>,
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    /// How this instance and the others sharing the database wake each other.
    bus: Arc<dyn Bus>,
    /// Turns another instance runs that streams here follow (on a shared store).
    followers: Option<Arc<stream::followers::Followers>>,
    log: LogWriter,
    hub: Arc<Hub>,
    agents: Arc<AgentRegistry>,
    /// Agents' card schemas (§3), by name.
    cards: Arc<HashMap<String, Value>>,
    /// Names this instance: its lease (its `instances` row) and the turns it owns.
    instance: String,
    /// False for a command's engine, which never runs turns.
    serving: bool,
    /// The turns this instance runs: the epoch each runner holds and its signal switch.
    running: Mutex<HashMap<i64, Runner>>,
    /// Set by [`Engine::hand_over`]: this instance takes no turn over and runs no new one.
    stopping: std::sync::atomic::AtomicBool,
    /// Set when this instance's lease was found lapsed: the next heartbeat checks which turns
    /// it still holds (until a check succeeds).
    must_reconcile: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
    /// What time it is, for every decision by the time of day (leases, expiries, quota
    /// windows) and every timestamp written.
    clock: Arc<dyn Clock>,
}

impl Engine {
    /// Starts the log writers, the wake-ups from other instances (PostgreSQL) and the lease
    /// keeper; on SQLite, first takes over the turns an earlier start left running.
    pub async fn start(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, crate::clock::system(), true, None).await
    }

    /// [`Engine::start`] on a wake-up bus already connected ([`crate::bus::connect`]): a server
    /// connects it before it migrates the database, so that a bus it cannot reach stops the
    /// start before anything was changed. Reads the time from `clock` (the machine's, or a
    /// test's).
    pub async fn start_on_bus(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, clock, true, Some(bus)).await
    }

    /// [`Engine::start`] reading the time from `clock` (a test's, moved by hand).
    pub async fn start_with_clock(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, clock, true, None).await
    }

    /// An engine for a one-off command next to serving instances: it neither takes turns over
    /// nor holds a lease (a turn a decision of its sets going names it only until it is
    /// released for them, and is lapsed meanwhile, as its owner has no lease).
    pub async fn start_passive(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, crate::clock::system(), false, None).await
    }

    async fn start_with(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        clock: Arc<dyn Clock>,
        serving: bool,
        bus: Option<Arc<dyn Bus>>,
    ) -> Result<Engine, StartError> {
        let hub = Arc::new(Hub::default());
        let shared = store.is_shared();
        let bus = match bus {
            Some(bus) => bus,
            None => crate::bus::connect(&config.bus, store.clone()).await?,
        };
        let followers = (shared && serving)
            .then(|| stream::followers::Followers::start(store.clone(), clock.clone(), bus.clone(), &hub));
        let writers = if shared { config.event_log.writers } else { 1 };
        let metrics = Metrics::new();
        let batching = log::Batching {
            batch_max_events: config.event_log.batch_max_events,
            pipeline_depth: config.event_log.pipeline_depth,
        };
        let log = LogWriter::start(
            store.clone(),
            clock.clone(),
            bus.clone(),
            hub.clone(),
            writers,
            batching,
            metrics.clone(),
        );
        let cards = Arc::new(config.agents.iter().filter_map(|a| Some((a.name.clone(), a.card.clone()?))).collect());
        let instance = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                store: store.clone(),
                bus: bus.clone(),
                followers,
                log,
                hub,
                agents,
                cards,
                instance,
                serving,
                running: Mutex::new(HashMap::new()),
                stopping: std::sync::atomic::AtomicBool::new(false),
                must_reconcile: std::sync::atomic::AtomicBool::new(false),
                metrics,
                clock,
            }),
        };
        if !serving {
            return Ok(engine);
        }
        // The lease first: a turn this instance starts is lapsed while its owner has no row.
        let now = engine.now_ms();
        let until = now + engine.inner.config.turns.lease_ms as i64;
        store.register_instance(&engine.inner.instance, now, until).await?;
        if let Some(wakeups) = bus.listen().await? {
            engine.spawn_wakeup_listener(wakeups);
        }
        engine.spawn_lease_keeper();
        engine.spawn_retention();
        if !shared {
            // One instance only: every turn still marked running was left by an earlier start.
            engine.take_over_lapsed(i64::MAX, usize::MAX, false).await?;
        }
        Ok(engine)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// This instance's name: the id of its lease and the owner its turns name.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.inner.config
    }

    /// The clock the engine decides by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Milliseconds since the epoch, by the engine's clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The thread's board as its current branch sees it: its notes folded in pin order (§7), whole (callers see it through
    /// their [`board::Clearance`]).
    pub async fn thread_board(&self, thread: i64) -> Result<Vec<Value>, StoreError> {
        let store = &self.inner.store;
        let turns = store.thread_turns(thread).await?;
        Ok(board::current(store.notes(thread).await?, &turns))
    }

    /// The thread, when it exists and the caller may read it. A thread the caller may not read
    /// is reported exactly like a missing one.
    pub async fn readable_thread(
        &self,
        tenant: &str,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<ThreadRow, EngineError> {
        match self.inner.store.find_thread(tenant, thread_id.as_str()).await? {
            Some(thread) if caller.may_read(&thread) => Ok(thread),
            Some(_) => Err(EngineError::PermissionDenied),
            None => Err(EngineError::NotFound(format!("thread '{thread_id}' not found"))),
        }
    }

    /// The run's events as a stream (see [`stream::follow`]).
    pub fn stream(&self, plan: FollowPlan) -> impl futures_util::Stream<Item = StreamItem> + Send + 'static {
        stream::tail::follow(
            self.inner.store.clone(),
            self.inner.clock.clone(),
            self.inner.hub.clone(),
            self.inner.metrics.clone(),
            plan,
        )
    }

    /// The thread's conversation as AG-UI messages (see [`conversation`]), without activity.
    pub async fn messages(&self, thread: &ThreadRow) -> Result<Vec<crate::protocol::InputMessage>, EngineError> {
        Ok(conversation::load(self.inner.store.as_ref(), thread.pk, conversation::Activity::Left).await?)
    }

    /// A branch of the thread (§6): the current one, or the one ending at the turn `head` (its
    /// public id; one not of this thread: [`EngineError::NotFound`]), with the alternatives of
    /// each of its user messages; with the activity its turns showed when `activity` says so.
    pub async fn branch_view(
        &self,
        thread: &ThreadRow,
        head: Option<&str>,
        activity: conversation::Activity,
    ) -> Result<BranchView, EngineError> {
        let store = self.inner.store.as_ref();
        let turns = store.thread_turns(thread.pk).await?;
        let branch = match head {
            None => branches::current(&turns),
            Some(head) => {
                let turn = turns
                    .iter()
                    .find(|t| t.public_id == head)
                    .ok_or_else(|| EngineError::NotFound(format!("turn '{head}' not found in this thread")))?;
                branches::ending_at(&turns, turn.pk)
            }
        };
        let messages = match branch.last() {
            Some(last) => conversation::load_branch(store, thread.pk, last.pk, activity).await?,
            None => Vec::new(),
        };
        let alternatives = alternatives_of(&turns, &branch, &messages);
        Ok(BranchView {
            head: branch.last().map(|t| t.public_id.clone()),
            current: branch.last().map(|t| t.pk) == branches::newest(&turns).map(|t| t.pk),
            messages,
            alternatives,
        })
    }

    /// The thread's turns with their parents, oldest first (§6), each saying whether it is on
    /// the current branch.
    pub async fn turn_tree(&self, thread: &ThreadRow) -> Result<Vec<TreeTurn>, EngineError> {
        let turns = self.inner.store.thread_turns(thread.pk).await?;
        let current = branches::current(&turns);
        let public = |pk: i64| turns.iter().find(|t| t.pk == pk).map(|t| t.public_id.clone());
        Ok(turns
            .iter()
            .map(|turn| TreeTurn {
                id: turn.public_id.clone(),
                parent: turn.parent.and_then(public),
                agent: turn.agent.clone(),
                status: turn.status.as_str(),
                created_at_ms: turn.created_at_ms,
                on_current_branch: current.iter().any(|c| c.pk == turn.pk),
            })
            .collect())
    }
}

/// The alternatives of each user message of `branch` (whose conversation is `messages`).
fn alternatives_of(
    turns: &[TurnRow],
    branch: &[TurnRow],
    messages: &[crate::protocol::InputMessage],
) -> Vec<Alternatives> {
    // Each turn of the branch opens with its user message, in order.
    let user_ids = messages.iter().filter(|m| matches!(m, crate::protocol::InputMessage::User(_))).map(|m| m.id());
    branch
        .iter()
        .zip(user_ids)
        .map(|(turn, message_id)| {
            let (place, siblings) = branches::alternatives(turns, turn);
            Alternatives {
                message_id: message_id.to_string(),
                turn: turn.public_id.clone(),
                index: place + 1,
                count: siblings.len(),
                turns: siblings
                    .iter()
                    .map(|sibling| {
                        let head = branches::latest_through(turns, sibling);
                        let head = turns.iter().find(|t| t.pk == head).map_or(&sibling.public_id, |t| &t.public_id);
                        AlternativeTurn { turn: sibling.public_id.clone(), head: head.clone() }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The name of the `CUSTOM` event that follows a `MESSAGES_SNAPSHOT` of a branch whose user
/// messages have alternatives (§6): `{"turn", "alternatives"}`, as `GET …/messages` gives them.
pub const BRANCHES_EVENT: &str = "gateway.branches";

/// The `CUSTOM gateway.branches` event for a snapshot of the branch ending at turn `head` of the
/// thread whose turns are `turns` (`messages` being that snapshot's); `None` when none of its
/// user messages has an alternative.
pub(crate) fn branches_event(
    turns: &[TurnRow],
    head: i64,
    messages: &[crate::protocol::InputMessage],
) -> Option<crate::protocol::Event> {
    let branch = branches::ending_at(turns, head);
    let alternatives = alternatives_of(turns, &branch, messages);
    if alternatives.iter().all(|a| a.count < 2) {
        return None;
    }
    let value = serde_json::json!({
        "turn": branch.last().map(|t| t.public_id.clone()),
        "alternatives": alternatives,
    });
    Some(crate::protocol::Event::Custom { name: BRANCHES_EVENT.into(), value, subagent_run_id: None })
}

/// A branch of a thread as `GET /v1/threads/{thread}/messages` shows it (§6).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchView {
    /// The branch's last turn; `None` for a thread with no turn.
    pub head: Option<String>,
    /// Whether this is the thread's current branch (the one a run without a choice goes on).
    pub current: bool,
    pub messages: Vec<crate::protocol::InputMessage>,
    /// One entry per user message of the branch, in order.
    pub alternatives: Vec<Alternatives>,
}

/// The alternatives of one user message: the turns that share its parent (regenerates and
/// edits), so a client can show "‹ index / count ›" and open any of them.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alternatives {
    pub message_id: String,
    /// The branch's turn this message started.
    pub turn: String,
    /// Its place among the alternatives, from 1.
    pub index: usize,
    pub count: usize,
    /// Every alternative, oldest first: its turn, and the head to open (`?turn=`) to see it as
    /// it was last continued.
    pub turns: Vec<AlternativeTurn>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AlternativeTurn {
    pub turn: String,
    pub head: String,
}

/// One turn of a thread's tree (`GET /v1/threads/{thread}/turns`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeTurn {
    pub id: String,
    /// The turn it went on from; `None` for a first turn.
    pub parent: Option<String>,
    pub agent: String,
    pub status: &'static str,
    pub created_at_ms: i64,
    pub on_current_branch: bool,
}
