//! The turn engine: decides what a run follows (a new turn, the same turn again, or a refusal),
//! runs turns on their agents, and renders a turn's log as a stream of events for a run.
//!
//! Nothing here knows HTTP: the `http` layer turns [`EngineError`] into statuses and
//! [`StreamItem`]s into SSE frames. The log is the truth; a stream is a view of it.

pub mod conversation;
pub mod history;
pub mod hub;
pub mod log;
pub mod stream;
pub mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::agents::Agent;
use crate::auth::Caller;
use crate::config::Config;
use crate::ids::{self, EventId, RunId, ThreadId};
use crate::protocol::{now_ms, Event, RunAgentInput, PROTOCOL_VERSION};
use crate::store::{AuditEntry, NewTurn, StartTurn, Store, StoreError, StoredEvent, ThreadRow, TurnRow, TurnStatus};
use history::HistoryVerdict;
use hub::Hub;
use log::EventLog;
use turn::{AgentError, Checkpoint, TurnContext, TurnSetup, TurnSignal};

pub use stream::{StreamItem, StreamOptions};

/// Marks a cancel request in the wake-up channel shared with other instances.
const CANCEL_SIGNAL: i64 = -1;

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
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `not_running`.
    #[error("{0}")]
    NotRunning(String),
    /// 500 `internal`: logged, never shown.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run is refused after the request was accepted: a lone `RUN_ERROR` with this code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
}

/// What a run streams: a turn's log from a position on, or a refusal.
#[derive(Debug, Clone)]
pub enum RunPlan {
    Follow(FollowPlan),
    Refused(Refusal),
}

#[derive(Debug, Clone)]
pub struct FollowPlan {
    pub thread_id: String,
    pub run_id: String,
    pub turn_pk: i64,
    pub turn_id: String,
    /// Stream the events after this sequence number (0: from the start).
    pub after_seq: i64,
}

/// One run request, after the HTTP layer validated its shape.
pub struct RunRequest<'a> {
    pub tenant: &'a str,
    pub caller: &'a Caller,
    pub agent: &'a str,
    pub thread_id: &'a ThreadId,
    pub run_id: &'a RunId,
    pub input: &'a RunAgentInput,
    pub last_event_id: Option<&'a EventId>,
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    log: EventLog,
    hub: Arc<Hub>,
    agents: HashMap<String, Agent>,
    /// Names this instance in turn leases.
    instance: String,
    /// Signal switches of the turns this instance runs.
    running: Mutex<HashMap<i64, watch::Sender<TurnSignal>>>,
}

/// How a turn task begins.
enum TurnStart {
    /// A new turn: its log starts with `RUN_STARTED` and the board as it is now.
    New { thread_id: String, run_id: String, board: Vec<Value> },
    /// A turn another owner left unfinished: continue after its log, from its checkpoint.
    Takeover,
}

impl Engine {
    /// Starts the log writers; on a shared database the wake-ups from other instances and the
    /// lease keeper; on SQLite, takes over the turns an earlier start left running.
    pub async fn start(config: Arc<Config>, store: Arc<dyn Store>) -> Result<Engine, StoreError> {
        let hub = Arc::new(Hub::default());
        let shared = !config.database.url.starts_with("sqlite:");
        let writers = if shared { config.event_log.writers } else { 1 };
        let log = EventLog::start(store.clone(), hub.clone(), writers, config.event_log.batch_max_events);
        let agents = config.agents.iter().map(|a| (a.name.clone(), Agent::from_config(a))).collect();
        let instance = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                store: store.clone(),
                log,
                hub,
                agents,
                instance,
                running: Mutex::new(HashMap::new()),
            }),
        };
        if let Some(wakeups) = store.listen_for_appends().await? {
            engine.spawn_wakeup_listener(wakeups);
        }
        if shared {
            engine.spawn_lease_keeper();
        } else {
            // One instance only: every turn still marked running was left by an earlier start.
            engine.take_over_lapsed(i64::MAX, usize::MAX).await?;
        }
        Ok(engine)
    }

    /// This instance's name in turn leases.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// Renews the leases of this instance's turns every heartbeat, stops turns whose lease was
    /// lost, and takes over turns whose owner stopped renewing.
    fn spawn_lease_keeper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let turns = self.inner.config.turns.clone();
        tokio::spawn(async move {
            let mut heartbeat = tokio::time::interval(Duration::from_millis(turns.heartbeat_ms));
            heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sweep = tokio::time::interval(Duration::from_millis(turns.sweep_ms));
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = heartbeat.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        inner.renew_leases().await;
                    }
                    _ = sweep.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        let engine = Engine { inner };
                        if let Err(error) = engine.take_over_lapsed(now_ms(), 64).await {
                            tracing::warn!(%error, "looking for lapsed turns failed");
                        }
                    }
                }
            }
        });
    }

    /// Claims up to `limit` running turns whose lease lapsed before `now` and continues them.
    async fn take_over_lapsed(&self, now: i64, limit: usize) -> Result<(), StoreError> {
        let inner = &self.inner;
        for _ in 0..limit {
            let lease_until = now_ms() + inner.config.turns.lease_ms as i64;
            let Some(turn) = inner.store.claim_lapsed_turn(&inner.instance, now, lease_until).await? else { break };
            tracing::info!(turn = %turn.public_id, "taking over a turn whose owner stopped");
            self.spawn_turn(turn, TurnStart::Takeover, None);
        }
        Ok(())
    }

    /// Stops every turn this instance runs, commits what they said and gives their leases
    /// back, so other instances take them over at once. Waits at most `grace`.
    pub async fn hand_over(&self, grace: Duration) {
        let switches: Vec<watch::Sender<TurnSignal>> =
            self.inner.running.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        for switch in &switches {
            switch.send_if_modified(|signal| {
                let running = *signal == TurnSignal::Run;
                if running {
                    *signal = TurnSignal::HandOver;
                }
                running
            });
        }
        let deadline = tokio::time::Instant::now() + grace;
        while !self.inner.running.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("the grace period ended with turns still handing over; their leases will lapse");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.inner.config
    }

    fn spawn_wakeup_listener(&self, mut wakeups: tokio::sync::mpsc::Receiver<Vec<(i64, i64)>>) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(pairs) = wakeups.recv().await {
                let Some(inner) = inner.upgrade() else { return };
                // An empty list means notifications may have been lost: wake every stream.
                let wake_all = pairs.is_empty();
                let (cancels, appends): (Vec<_>, Vec<_>) =
                    pairs.into_iter().partition(|(_, seq)| *seq == CANCEL_SIGNAL);
                for (turn, _) in cancels {
                    inner.signal_cancel(turn);
                }
                if wake_all || !appends.is_empty() {
                    inner.hub.wake(&appends);
                }
            }
        });
    }

    /// Decides what a run streams (§2, §4, §6). Starts a turn when the run brings a new message.
    pub async fn begin_run(&self, request: RunRequest<'_>) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let store = &inner.store;
        let thread = store.find_thread(request.tenant, request.thread_id.as_str()).await?;
        if let Some(thread) = &thread {
            if !request.caller.may_read(thread) {
                return Err(EngineError::PermissionDenied);
            }
            if let Some(turn) = store.find_run(thread.pk, request.run_id.as_str()).await? {
                return self.follow(&request, &turn).await;
            }
        }
        if !request.input.resume().is_empty() {
            return Ok(refuse("invalid_resume", "no interrupt is open on this thread"));
        }
        let turns = match &thread {
            Some(thread) => store.thread_turns(thread.pk).await?,
            None => Vec::new(),
        };
        match history::check(&request.input.messages, &turns) {
            HistoryVerdict::NoUserMessage => {
                Err(EngineError::BadRequest { field: "messages", message: "a run needs a user message".into() })
            }
            HistoryVerdict::Mismatch(why) => Ok(refuse(
                "history_mismatch",
                &format!("the history differs from the thread's ({why}); load the thread again"),
            )),
            HistoryVerdict::FollowLatest => {
                let (Some(thread), Some(latest)) = (&thread, turns.last()) else {
                    return Ok(refuse("history_mismatch", "the thread has no turn to follow; load the thread again"));
                };
                let followed = store.add_run(thread.pk, request.run_id.as_str(), latest.pk, now_ms()).await?;
                let turn = if followed == latest.pk { latest.clone() } else { self.turn(followed).await? };
                self.follow(&request, &turn).await
            }
            HistoryVerdict::NewTurn { message_id, text } => {
                if let Some(last_event_id) = request.last_event_id {
                    return Err(EngineError::BadLastEventId(last_event_id.to_string()));
                }
                if turns.last().is_some_and(|t| t.status == TurnStatus::Running) {
                    return Ok(refuse("turn_in_progress", "a turn is running on this thread; wait for it to finish"));
                }
                self.start_turn(&request, thread.as_ref(), turns.len(), message_id, text).await
            }
        }
    }

    async fn turn(&self, pk: i64) -> Result<TurnRow, EngineError> {
        self.inner
            .store
            .turn(pk)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("run names missing turn {pk}")).into())
    }

    async fn start_turn(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
        known_turns: usize,
        message_id: String,
        text: String,
    ) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let notes = match thread {
            Some(thread) => inner.store.notes(thread.pk).await?,
            None => Vec::new(),
        };
        let public_id = ids::new_turn_id();
        // Auth (§8): who started the turn, through which door, is an audit row of its own.
        let audit = AuditEntry {
            tenant: request.tenant.to_string(),
            action: "run.start".into(),
            actor: request.caller.label(),
            via: request.caller.via().map(str::to_string),
            detail: json!({
                "thread": request.thread_id.as_str(),
                "turn": public_id,
                "agent": request.agent,
                "via": request.caller.via().unwrap_or("direct"),
                "door": "agui",
            })
            .to_string(),
            at_ms: now_ms(),
        };
        let new = NewTurn {
            audit: Some(audit),
            tenant: request.tenant.to_string(),
            thread_id: request.thread_id.as_str().to_string(),
            owner: request.caller.owner(),
            run_id: request.run_id.as_str().to_string(),
            public_id,
            ordinal: i32::try_from(known_turns + 1).unwrap_or(i32::MAX),
            owner_instance: inner.instance.clone(),
            lease_until_ms: now_ms() + inner.config.turns.lease_ms as i64,
            agent: request.agent.to_string(),
            user_message_id: message_id,
            user_text: text,
            started_by: request.caller.label(),
            at_ms: now_ms(),
        };
        match inner.store.start_turn(&new).await? {
            StartTurn::Started { thread, turn } => {
                let board: Vec<Value> = notes.iter().filter_map(|n| serde_json::from_str(n).ok()).collect();
                let plan = FollowPlan {
                    thread_id: thread.thread_id.clone(),
                    run_id: new.run_id.clone(),
                    turn_pk: turn.pk,
                    turn_id: turn.public_id.clone(),
                    after_seq: 0,
                };
                let ai_label = inner.config.tenant(request.tenant).and_then(|t| t.ai_label.clone());
                let start = TurnStart::New { thread_id: thread.thread_id.clone(), run_id: new.run_id.clone(), board };
                self.spawn_turn(turn, start, ai_label);
                Ok(RunPlan::Follow(plan))
            }
            StartTurn::RunExists(turn) => self.follow(request, &turn).await,
            StartTurn::Conflict => Ok(refuse("turn_in_progress", "another turn started on this thread first")),
            StartTurn::NotOwner => Err(EngineError::PermissionDenied),
        }
    }

    /// A run that follows `turn`, after the client's `Last-Event-ID` when it sent one.
    async fn follow(&self, request: &RunRequest<'_>, turn: &TurnRow) -> Result<RunPlan, EngineError> {
        let after_seq = match request.last_event_id {
            None => 0,
            Some(id) => {
                let last = self.inner.store.last_seq(turn.pk).await?;
                if id.turn != turn.public_id || id.seq > last {
                    return Err(EngineError::BadLastEventId(id.to_string()));
                }
                id.seq
            }
        };
        Ok(RunPlan::Follow(FollowPlan {
            thread_id: request.thread_id.as_str().to_string(),
            run_id: request.run_id.as_str().to_string(),
            turn_pk: turn.pk,
            turn_id: turn.public_id.clone(),
            after_seq,
        }))
    }

    /// Runs a turn on this instance until it ends or must leave. The AI label comes from the
    /// tenant of a new turn; a taken-over turn's labelled messages are in its log already.
    fn spawn_turn(&self, turn: TurnRow, start: TurnStart, ai_label: Option<String>) {
        let inner = self.inner.clone();
        let (signal_tx, signal_rx) = watch::channel(TurnSignal::Run);
        {
            let mut running = inner.running.lock().unwrap_or_else(|p| p.into_inner());
            if running.contains_key(&turn.pk) {
                return;
            }
            running.insert(turn.pk, signal_tx);
        }
        tokio::spawn(async move {
            // Holding the feed makes the writer keep this turn's events in memory for streams.
            let _feed = inner.hub.feed(turn.pk);
            let mut context = TurnContext::new(TurnSetup {
                log: inner.log.clone(),
                turn_pk: turn.pk,
                thread_pk: turn.thread,
                turn_id: turn.public_id.clone(),
                agent: turn.agent.clone(),
                user_text: turn.user_text.clone(),
                ai_label,
                max_event_bytes: inner.config.limits.max_event_bytes,
                signal: signal_rx.clone(),
                next_seq: 1,
                next_note_no: 1,
            });
            let ending = run_turn(&inner, &mut context, &turn, start).await;
            if let Err(error) = context.finish(ending).await {
                tracing::error!(turn = %turn.public_id, %error, "a turn could not be finished in the log");
            }
            if *signal_rx.borrow() == TurnSignal::HandOver {
                if let Err(error) = inner.store.release_turn(turn.pk, &inner.instance).await {
                    tracing::warn!(turn = %turn.public_id, %error, "could not give a lease back; it will lapse");
                }
            }
            inner.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&turn.pk);
        });
    }

    /// Cancels the thread's running turn (§4.1); the turn ends with outcome `cancelled`.
    pub async fn cancel(&self, tenant: &str, caller: &Caller, thread_id: &ThreadId) -> Result<String, EngineError> {
        let store = &self.inner.store;
        let thread = self.readable_thread(tenant, caller, thread_id).await?;
        let turns = store.thread_turns(thread.pk).await?;
        let Some(turn) = turns.last().filter(|t| t.status == TurnStatus::Running) else {
            return Err(EngineError::NotRunning("no turn is running on this thread".into()));
        };
        if !store.request_cancel(turn.pk).await? {
            return Err(EngineError::NotRunning("the turn finished before it could be cancelled".into()));
        }
        if !self.inner.signal_cancel(turn.pk) {
            // Another instance runs it: tell it through the shared wake-up channel.
            store.announce_appends(&[(turn.pk, CANCEL_SIGNAL)]).await?;
        }
        Ok(turn.public_id.clone())
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
    pub fn stream(
        &self,
        plan: FollowPlan,
        options: StreamOptions,
    ) -> impl futures_util::Stream<Item = StreamItem> + Send + 'static {
        stream::follow(self.inner.store.clone(), self.inner.hub.clone(), plan, options)
    }
}

impl Inner {
    /// Flips the cancel switch of a turn this instance runs; false if it runs elsewhere.
    fn signal_cancel(&self, turn: i64) -> bool {
        match self.running.lock().unwrap_or_else(|p| p.into_inner()).get(&turn) {
            Some(switch) => {
                switch.send_if_modified(|signal| {
                    let running = *signal == TurnSignal::Run;
                    if running {
                        *signal = TurnSignal::Cancel;
                    }
                    running
                });
                true
            }
            None => false,
        }
    }

    /// Extends this instance's leases. A running turn missing from the renewal lost its lease
    /// to another instance (this one was away too long) and must stop without writing.
    async fn renew_leases(&self) {
        let until = now_ms() + self.config.turns.lease_ms as i64;
        match self.store.renew_leases(&self.instance, until).await {
            Ok(owned) => {
                let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                for (turn, switch) in running.iter() {
                    if !owned.contains(turn) && *switch.borrow() == TurnSignal::Run {
                        tracing::warn!(turn, "lost the lease of a running turn; stopping it here");
                        switch.send_replace(TurnSignal::Lost);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "could not renew turn leases"),
        }
    }
}

/// Runs the agent of a new or taken-over turn.
async fn run_turn(
    inner: &Inner,
    context: &mut TurnContext,
    turn: &TurnRow,
    start: TurnStart,
) -> Result<turn::AgentOutput, AgentError> {
    let store = &inner.store;
    let failed = |error: StoreError| AgentError::Failed(format!("the turn's record could not be read: {error}"));
    let (thread_id, run_id, board) = match start {
        TurnStart::New { thread_id, run_id, board } => (thread_id, run_id, Some(board)),
        TurnStart::Takeover => {
            let events = read_log(store.as_ref(), turn.pk).await.map_err(failed)?;
            context.resume_from_log(&events);
            // Ids in a re-rendered RUN_STARTED are the following run's own.
            (String::new(), String::new(), None)
        }
    };
    let notes = store.notes(turn.thread).await.map_err(failed)?;
    context.set_next_note_no(notes.len() as i64 + 1);
    if context.is_fresh() {
        let board = board.unwrap_or_else(|| notes.iter().filter_map(|n| serde_json::from_str(n).ok()).collect());
        context
            .emit(Event::RunStarted {
                thread_id,
                run_id,
                protocol_version: Some(PROTOCOL_VERSION.to_string()),
                parent_run_id: None,
                input: None,
            })
            .await?;
        context
            .emit(Event::StateSnapshot { snapshot: json!({ "board": { "notes": board } }), subagent_run_id: None })
            .await?;
    } else {
        context.close_cut_items().await?;
    }
    let Some(agent) = inner.agents.get(&turn.agent) else {
        return Err(AgentError::Failed(format!("agent '{}' is no longer configured", turn.agent)));
    };
    let checkpoint =
        turn.checkpoint.as_deref().and_then(|c| serde_json::from_str::<Checkpoint>(c).ok()).unwrap_or_default();
    agent.run(context, checkpoint).await
}

/// A turn's whole log, read in pages.
async fn read_log(store: &dyn Store, turn: i64) -> Result<Vec<StoredEvent>, StoreError> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.seq);
        let page = store.events_after(turn, after, 1000).await?;
        if page.is_empty() {
            return Ok(events);
        }
        events.extend(page);
    }
}

fn refuse(code: &'static str, message: &str) -> RunPlan {
    RunPlan::Refused(Refusal { code, message: message.to_string() })
}

impl Engine {
    /// The thread's conversation as AG-UI messages (see [`conversation`]).
    pub async fn messages(&self, thread: &ThreadRow) -> Result<Vec<crate::protocol::InputMessage>, EngineError> {
        let store = &self.inner.store;
        let mut messages = Vec::new();
        for turn in store.thread_turns(thread.pk).await? {
            let events = read_log(store.as_ref(), turn.pk).await?;
            conversation::fold_turn(&mut messages, &turn, &events);
        }
        Ok(messages)
    }
}
