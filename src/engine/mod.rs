//! The turn engine: decides what a run follows (a new turn, the same turn again, or a refusal),
//! runs turns on their agents, and renders a turn's log as a stream of events for a run.
//!
//! Nothing here knows HTTP: the `http` layer turns [`EngineError`] into statuses and
//! [`StreamItem`]s into SSE frames. The log is the truth; a stream is a view of it.

pub mod agent;
pub mod board;
pub mod conversation;
pub mod history;
pub mod hub;
pub mod interrupts;
pub mod log;
pub mod stream;
pub mod turn;

pub use agent::{Agent, AgentRegistry};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::caller::Caller;
use crate::config::Config;
use crate::ids::{self, EventId, RunId, ThreadId};
use crate::metrics::{AgentLabel, CodeLabel, Metrics, OutcomeLabels};
use crate::protocol::input::ResumeEntry;
use crate::protocol::{now_ms, Event, RunAgentInput, PROTOCOL_VERSION};
use crate::store::{
    AuditEntry, Decided, Decision, EventKind, InterruptRow, NewTurn, StartTurn, Store, StoreError, StoredEvent,
    ThreadRow, TurnRow, TurnStatus,
};
use history::HistoryVerdict;
use hub::Hub;
use interrupts::{check_resume, EntryPlan, ResumedEvent, Viewer};
use log::EventLog;
use turn::{AgentError, Checkpoint, TokenBudget, TurnContext, TurnSetup, TurnSignal};

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
    /// 403 `permission_denied`: only a person decides; the message names where they can.
    #[error("only a person can answer interrupts{0}")]
    PersonOnly(String),
    /// A decision refused by the checks of §5.3 (409 with the code; 403 for `not_a_decider`).
    #[error("{}", .0.message)]
    DecisionRefused(Refusal),
    /// 500 `internal`: logged, never shown.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a run is refused after the request was accepted: a lone `RUN_ERROR` with this code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    /// `rawEvent.gateway` of the `RUN_ERROR`: a limit's `{scope, limit, used, resetsAt}`.
    pub figures: Option<Value>,
}

/// The fixed window of `length_secs` (aligned to the epoch) that `now_ms` falls in: its start and
/// its end (when a limit counted in it resets).
pub fn quota_window(now_ms: i64, length_secs: u64) -> (i64, i64) {
    let length_ms = i64::try_from(length_secs.max(1)).unwrap_or(i64::MAX / 1000) * 1000;
    let start = now_ms - now_ms.rem_euclid(length_ms);
    (start, start + length_ms)
}

/// A refusal for a limit (§8), its figures for the client.
pub fn quota_refusal(code: &'static str, scope: &str, limit: i64, used: i64, resets_at_ms: Option<i64>) -> Refusal {
    let resets_at = resets_at_ms.map(crate::protocol::iso8601);
    Refusal {
        code,
        message: format!("the tenant's {scope} limit is reached ({used} of {limit})"),
        figures: Some(json!({ "scope": scope, "limit": limit, "used": used, "resetsAt": resets_at })),
    }
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
    /// This run's answers to its resume entries (`CUSTOM gateway.resume`), when it resumed.
    pub resume_outcomes: Option<Vec<Value>>,
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
    /// The agent's editable keys the run's `state` writes, checked against their schemas
    /// (written when the run starts a turn).
    pub state_writes: serde_json::Map<String, Value>,
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
    agents: Arc<AgentRegistry>,
    /// Agents' card schemas (§3), by name.
    cards: Arc<HashMap<String, Value>>,
    /// Names this instance in turn leases.
    instance: String,
    /// False for a command's engine, which never runs turns.
    serving: bool,
    /// The turns this instance runs: the epoch each runner holds and its signal switch.
    running: Mutex<HashMap<i64, Runner>>,
    /// Set by [`Engine::hand_over`]: this instance takes no turn over and runs no new one.
    stopping: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
}

/// How a turn task begins.
enum TurnStart {
    /// A new turn: its log starts with `RUN_STARTED` and the board as it is now.
    New { thread_id: String, run_id: String, tenant: String, board: Vec<Value> },
    /// A turn another owner left unfinished: continue after its log, from its checkpoint.
    Takeover,
}

impl Engine {
    /// Starts the log writers, the wake-ups from other instances (PostgreSQL) and the lease
    /// keeper; on SQLite, first takes over the turns an earlier start left running.
    pub async fn start(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StoreError> {
        Engine::start_with(config, store, agents, true).await
    }

    /// An engine for a one-off command next to serving instances: it neither takes turns over
    /// nor keeps leases (a decision it makes hands the turn to them).
    pub async fn start_passive(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StoreError> {
        Engine::start_with(config, store, agents, false).await
    }

    async fn start_with(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        serving: bool,
    ) -> Result<Engine, StoreError> {
        let hub = Arc::new(Hub::default());
        let shared = store.is_shared();
        let writers = if shared { config.event_log.writers } else { 1 };
        let metrics = Metrics::new();
        let log =
            EventLog::start(store.clone(), hub.clone(), writers, config.event_log.batch_max_events, metrics.clone());
        let cards = Arc::new(config.agents.iter().filter_map(|a| Some((a.name.clone(), a.card.clone()?))).collect());
        let instance = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                store: store.clone(),
                log,
                hub,
                agents,
                cards,
                instance,
                serving,
                running: Mutex::new(HashMap::new()),
                stopping: std::sync::atomic::AtomicBool::new(false),
                metrics,
            }),
        };
        if !serving {
            return Ok(engine);
        }
        if let Some(wakeups) = store.listen_for_appends().await? {
            engine.spawn_wakeup_listener(wakeups);
        }
        engine.spawn_lease_keeper();
        if !shared {
            // One instance only: every turn still marked running was left by an earlier start.
            engine.take_over_lapsed(i64::MAX, usize::MAX, false).await?;
        }
        Ok(engine)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
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
                        // On SQLite too: a turn released by a command-line decision is picked up.
                        if let Err(error) = engine.take_over_lapsed(now_ms(), 64, true).await {
                            tracing::warn!(%error, "looking for lapsed turns failed");
                        }
                        if let Err(error) = engine.expire_interrupts().await {
                            tracing::warn!(%error, "expiring interrupts failed");
                        }
                    }
                }
            }
        });
    }

    /// Claims up to `limit` running turns whose lease lapsed before `now` and continues them.
    /// `include_own`: a lapsed lease of this instance's own is claimed too (its runner here, if
    /// any, was too slow to renew it and is fenced off by the new epoch).
    async fn take_over_lapsed(&self, now: i64, limit: usize, include_own: bool) -> Result<(), StoreError> {
        let inner = &self.inner;
        // A stopping instance would only take back the turns it is handing over.
        if inner.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        for _ in 0..limit {
            let lease_until = now_ms() + inner.config.turns.lease_ms as i64;
            let Some(turn) = inner.store.claim_lapsed_turn(&inner.instance, now, lease_until, include_own).await? else {
                break;
            };
            tracing::info!(turn = %turn.public_id, "taking over a turn whose owner stopped");
            self.spawn_turn(turn, TurnStart::Takeover, None);
        }
        Ok(())
    }

    /// Stops every turn this instance runs, commits what they said and gives their leases
    /// back, so other instances take them over at once. Waits at most `grace`.
    pub async fn hand_over(&self, grace: Duration) {
        self.inner.stopping.store(true, std::sync::atomic::Ordering::Release);
        let switches: Vec<watch::Sender<TurnSignal>> =
            self.inner.running.lock().unwrap_or_else(|p| p.into_inner()).values().map(|r| r.switch.clone()).collect();
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

    /// Decides what a run streams (§2, §4, §5, §6). Starts a turn when the run brings a new
    /// message; decides interrupts when it brings a resume.
    pub async fn begin_run(&self, request: RunRequest<'_>) -> Result<RunPlan, EngineError> {
        let metrics = &self.inner.metrics;
        let reconnect = request.last_event_id.is_some();
        let agent = request.agent.to_string();
        let plan = self.plan_run(request).await?;
        match &plan {
            RunPlan::Follow(_) => {
                metrics.runs_started.get_or_create(&AgentLabel { agent }).inc();
                if reconnect {
                    metrics.reconnects.inc();
                }
            }
            RunPlan::Refused(refusal) => {
                metrics.runs_refused.get_or_create(&CodeLabel { code: refusal.code.to_string() }).inc();
            }
        }
        Ok(plan)
    }

    async fn plan_run(&self, request: RunRequest<'_>) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let store = &inner.store;
        let thread = store.find_thread(request.tenant, request.thread_id.as_str()).await?;
        if let Some(thread) = &thread {
            if !request.caller.may_read(thread) {
                return Err(EngineError::PermissionDenied);
            }
            if let Some((turn, start_seq)) = store.find_run(thread.pk, request.run_id.as_str()).await? {
                let entries = request.input.resume();
                if entries.is_empty() {
                    return self.follow(&request, thread, &turn, start_seq, None).await;
                }
                // Answers sent on the run that asked (as CopilotKit's useInterrupt sends them):
                // the resume is a run of its own, recorded under a key named by its answers, so
                // sending it again follows (or replays) that run.
                let mut answered: Vec<&str> = entries.iter().map(|e| e.interrupt_id.as_str()).collect();
                answered.sort_unstable();
                let key = format!("{}~resume:{}", request.run_id.as_str(), answered.join(","));
                if let Some((turn, start_seq)) = store.find_run(thread.pk, &key).await? {
                    return self.follow(&request, thread, &turn, start_seq, None).await;
                }
                let open = store.turn_interrupts(turn.pk).await?;
                let answers_open =
                    entries.iter().any(|e| open.iter().any(|i| i.id == e.interrupt_id && i.status == "open"));
                if !answers_open {
                    // A resume run sent again: its replay, as for any known runId.
                    return self.follow(&request, thread, &turn, start_seq, None).await;
                }
                let turns = store.thread_turns(thread.pk).await?;
                return self.resume(&request, Some(thread), &turns, &key).await;
            }
        }
        let turns = match &thread {
            Some(thread) => store.thread_turns(thread.pk).await?,
            None => Vec::new(),
        };
        if !request.input.resume().is_empty() {
            return self.resume(&request, thread.as_ref(), &turns, request.run_id.as_str()).await;
        }
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
                if latest.status == TurnStatus::Waiting {
                    if let Some(pending) = self.pending_client_calls(latest).await? {
                        let answers = request.input.messages.iter().any(|m| {
                            matches!(m, crate::protocol::InputMessage::Tool(t) if pending.contains(&t.tool_call_id))
                        });
                        if answers {
                            return self.continue_with_client_results(&request, thread, latest, pending).await;
                        }
                    }
                }
                // A reloaded page follows the turn from its latest decision (or its start); its
                // reconnect, from the latest decision before its Last-Event-ID. Nothing is recorded:
                // each reload brings a new runId, and its history finds the turn again.
                let interrupts = store.turn_interrupts(latest.pk).await?;
                let seen = request.last_event_id.map_or(i64::MAX, |id| id.seq);
                let decided = interrupts.iter().filter_map(|i| i.decided_seq).filter(|seq| *seq <= seen);
                let start = decided.max().map_or(0, |seq| seq - 1);
                self.follow(&request, thread, latest, start, None).await
            }
            HistoryVerdict::NewTurn { message_id, text } => {
                if let Some(last_event_id) = request.last_event_id {
                    return Err(EngineError::BadLastEventId(last_event_id.to_string()));
                }
                if let Some(latest) = turns.last() {
                    match latest.status {
                        TurnStatus::Running => {
                            return Ok(refuse(
                                "turn_in_progress",
                                "a turn is running on this thread; wait for it to finish",
                            ))
                        }
                        TurnStatus::Waiting => {
                            if let Some(pending) = self.pending_client_calls(latest).await? {
                                return Ok(refuse(
                                    "interrupts_pending",
                                    &format!("the turn waits for the results of the tool calls {}", pending.join(", ")),
                                ));
                            }
                            return self.refuse_while_waiting(&request, latest).await;
                        }
                        _ => {}
                    }
                }
                if let Some(refusal) = self.over_quota(request.tenant).await? {
                    return Ok(RunPlan::Refused(refusal));
                }
                self.start_turn(&request, thread.as_ref(), turns.len(), message_id, text).await
            }
        }
    }

    /// The tenant's limits (§8) for one more turn: the first one it would pass, as a refusal
    /// with its figures. (Counted, then started: instances starting turns at the same moment
    /// may each pass the last free place.)
    async fn over_quota(&self, tenant: &str) -> Result<Option<Refusal>, EngineError> {
        let Some(quotas) = self.inner.config.tenant(tenant).map(|t| t.quotas.clone()) else { return Ok(None) };
        if quotas.max_concurrent_turns.is_none()
            && quotas.turns_per_minute.is_none()
            && quotas.tokens_per_period.is_none()
        {
            return Ok(None);
        }
        let now = now_ms();
        let (minute, next_minute) = quota_window(now, 60);
        let (period, next_period) = quota_window(now, quotas.token_period_secs);
        let usage = self.inner.store.tenant_usage(tenant, minute, period).await?;
        let refusal = if let Some(limit) = quotas.max_concurrent_turns.filter(|l| usage.running_turns >= i64::from(*l))
        {
            Some(quota_refusal("concurrency_limit", "concurrent_turns", i64::from(limit), usage.running_turns, None))
        } else if let Some(limit) = quotas.turns_per_minute.filter(|l| usage.turns_started >= i64::from(*l)) {
            Some(quota_refusal(
                "quota_exceeded",
                "turns_per_minute",
                i64::from(limit),
                usage.turns_started,
                Some(next_minute),
            ))
        } else if let Some(limit) = quotas.tokens_per_period.filter(|l| usage.tokens >= *l as i64) {
            Some(quota_refusal("quota_exceeded", "tokens", limit as i64, usage.tokens, Some(next_period)))
        } else {
            None
        };
        if let Some(scope) = refusal.as_ref().and_then(|r| r.figures.as_ref()).and_then(|f| f["scope"].as_str()) {
            self.inner.metrics.quota_refusals.get_or_create(&CodeLabel { code: scope.into() }).inc();
        }
        Ok(refusal)
    }

    /// The tool calls a waiting turn needs the client's results of, when that is what it waits
    /// for (its last word is a client wait, with no interrupt open).
    async fn pending_client_calls(&self, turn: &TurnRow) -> Result<Option<Vec<String>>, EngineError> {
        let store = &self.inner.store;
        if store.turn_interrupts(turn.pk).await?.iter().any(|i| i.status == "open") {
            return Ok(None);
        }
        let log = read_log(store.as_ref(), turn.pk).await?;
        let Some(last) = log.iter().rev().find(|e| matches!(e.kind, EventKind::ClientWait | EventKind::Resumed)) else {
            return Ok(None);
        };
        if last.kind != EventKind::ClientWait {
            return Ok(None);
        }
        let value: Value = serde_json::from_slice(&last.body)
            .map_err(|e| StoreError::Corrupt(format!("a client-wait event does not parse: {e}")))?;
        let ids = value["value"]["pendingToolCallIds"]
            .as_array()
            .map(|ids| ids.iter().filter_map(|id| id.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        Ok(Some(ids))
    }

    /// The client's `role: "tool"` messages answer the calls the turn waits for: they are
    /// recorded with the turn, which goes on; the run follows it from there (§9.2).
    async fn continue_with_client_results(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        turn: &TurnRow,
        pending: Vec<String>,
    ) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let mut results = std::collections::BTreeMap::new();
        for message in &request.input.messages {
            if let crate::protocol::InputMessage::Tool(tool) = message {
                if pending.contains(&tool.tool_call_id) {
                    let content = match &tool.content {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    results.insert(tool.tool_call_id.clone(), content);
                }
            }
        }
        if let Some(missing) = pending.iter().find(|id| !results.contains_key(*id)) {
            return Ok(refuse(
                "history_mismatch",
                &format!("the turn waits for the result of tool call {missing}: send it as a role \"tool\" message"),
            ));
        }
        let Some(seq) = self.record(turn, &[], resumed_marker(&[], results, self.board(turn).await?)?, &[]).await? else {
            return Ok(refuse("turn_in_progress", "the results were already given"));
        };
        let start_seq = seq - 1;
        inner.store.add_run(thread.pk, request.run_id.as_str(), turn.pk, start_seq, now_ms()).await?;
        match inner.store.find_run(thread.pk, request.run_id.as_str()).await? {
            Some((turn, start_seq)) => self.follow(request, thread, &turn, start_seq, Some(Vec::new())).await,
            None => Err(StoreError::Corrupt("a run was not recorded".into()).into()),
        }
    }

    /// A new message on a thread whose turn waits: `interrupts_pending` when the caller may
    /// decide something, else `turn_waiting` naming who decides (§5.3.6).
    async fn refuse_while_waiting(&self, request: &RunRequest<'_>, latest: &TurnRow) -> Result<RunPlan, EngineError> {
        let viewer = viewer_of(request);
        let open: Vec<InterruptRow> =
            self.inner.store.turn_interrupts(latest.pk).await?.into_iter().filter(|i| i.status == "open").collect();
        let waiting: Vec<interrupts::Waiting> = open.iter().filter_map(waiting_of).collect();
        if waiting.iter().any(|w| w.may_be_decided_by(&viewer)) {
            let ids: Vec<&str> = waiting.iter().map(|w| w.interrupt.id.as_str()).collect();
            return Ok(refuse(
                "interrupts_pending",
                &format!("the turn waits for your decision on {}; answer with resume first", ids.join(", ")),
            ));
        }
        let who: Vec<String> =
            waiting.iter().map(|w| interrupts::describe_deciders(&w.deciders, w.four_eyes)).collect();
        Ok(refuse("turn_waiting", &format!("the turn waits for a decision by {}", who.join("; "))))
    }

    /// A resume (§5.3): every entry checked before any is decided; the decisions in one
    /// transaction; the run then follows the turn from the decision on.
    /// `run_key` is what the run is recorded as: its runId, or a key of its own when it answers
    /// on the run that asked.
    async fn resume(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
        turns: &[TurnRow],
        run_key: &str,
    ) -> Result<RunPlan, EngineError> {
        let Some(person) = request.caller.person_id() else {
            return Err(EngineError::PersonOnly(self.console_hint()));
        };
        let (Some(thread), Some(latest)) = (thread, turns.last()) else {
            return Ok(refuse("invalid_resume", "no interrupt is open on this thread"));
        };
        if !request.input.messages.is_empty()
            && history::check(&request.input.messages, turns) != HistoryVerdict::FollowLatest
        {
            return Ok(refuse("history_mismatch", "a resume adds no message; load the thread again"));
        }
        let interrupts = self.inner.store.turn_interrupts(latest.pk).await?;
        let viewer = viewer_of(request);
        let plans = match check_resume(request.input.resume(), &interrupts, person, &viewer.roles, now_ms(), true) {
            Ok(plans) => plans,
            Err(refusal) => return Ok(refuse(refusal.code, &refusal.message)),
        };
        let via = request.caller.via().unwrap_or("direct");
        let (outcomes, start_seq) = match self.decide(latest, &plans, person, via).await? {
            Some(result) => result,
            None => return Ok(refuse("invalid_resume", "nothing to decide")),
        };
        let started = self.inner.store.add_run(thread.pk, run_key, latest.pk, start_seq, now_ms()).await?;
        let (turn, start_seq) = match self.inner.store.find_run(thread.pk, run_key).await? {
            Some(found) if found.0.pk == started => found,
            _ => return Err(StoreError::Corrupt("a resume run was not recorded".into()).into()),
        };
        self.follow(request, thread, &turn, start_seq, Some(outcomes)).await
    }

    /// Records the decisions of `plans` for `turn` (all or nothing) and sets the turn going
    /// again when nothing of it stays open. Returns each entry's outcome and where the run that
    /// made them begins in the log; `None` when the plans decide nothing and name no decision.
    async fn decide(
        &self,
        turn: &TurnRow,
        plans: &[EntryPlan],
        person: &str,
        via: &str,
    ) -> Result<Option<(Vec<Value>, i64)>, EngineError> {
        let inner = &self.inner;
        let mut plans = plans.to_vec();
        loop {
            let decisions: Vec<Decision> = plans
                .iter()
                .filter_map(|plan| match plan {
                    EntryPlan::Decide { interrupt_id, decision, .. } => Some(Decision {
                        interrupt_id: interrupt_id.clone(),
                        status: "decided",
                        decision: decision.to_string(),
                        decided_by: person.to_string(),
                        decided_via: via.to_string(),
                    }),
                    EntryPlan::AlreadyDecided { .. } => None,
                })
                .collect();
            let outcomes: Vec<Value> = plans
                .iter()
                .map(|plan| match plan {
                    EntryPlan::Decide { interrupt_id, approved, .. } => {
                        json!({ "interruptId": interrupt_id, "outcome": "decided", "approved": approved })
                    }
                    EntryPlan::AlreadyDecided { interrupt_id, .. } => {
                        json!({ "interruptId": interrupt_id, "outcome": "already_decided" })
                    }
                })
                .collect();
            if decisions.is_empty() {
                let start = plans.iter().find_map(|plan| match plan {
                    EntryPlan::AlreadyDecided { decided_seq: Some(seq), .. } => Some(seq - 1),
                    _ => None,
                });
                return Ok(start.map(|start| (outcomes, start)));
            }
            let recorded: Vec<&Value> = outcomes.iter().filter(|o| o["outcome"] == "decided").collect();
            let audit =
                self.decision_audit(turn, &format!("person:{person}"), Some(via), "interrupt.decide", &recorded).await?;
            let marker = resumed_marker(&outcomes, Default::default(), self.board(turn).await?)?;
            if let Some(seq) = self.record(turn, &decisions, marker, &audit).await? {
                let decided = CodeLabel { code: "decided".into() };
                inner.metrics.interrupts_decided.get_or_create(&decided).inc_by(decisions.len() as u64);
                return Ok(Some((outcomes, seq - 1)));
            }
            // Someone decided one of these first: what they decided is already_decided here,
            // and the rest is tried again (each round turns at least one entry, so it ends).
            let stored = inner.store.turn_interrupts(turn.pk).await?;
            for plan in plans.iter_mut() {
                if let EntryPlan::Decide { interrupt_id, .. } = plan {
                    if let Some(row) = stored.iter().find(|i| i.id == *interrupt_id && i.status != "open") {
                        *plan = EntryPlan::AlreadyDecided {
                            interrupt_id: interrupt_id.clone(),
                            decided_seq: row.decided_seq,
                        };
                    }
                }
            }
        }
    }

    /// Records decisions (or client results) of one turn with their decision event, tells the
    /// streams, and sets the turn going when nothing of it stays open. `None` when someone
    /// decided one of them first (nothing was recorded); else the event's seq.
    /// `audit` holds the decisions' audit rows, committed in the same transaction.
    async fn record(
        &self,
        turn: &TurnRow,
        decisions: &[Decision],
        marker: StoredEvent,
        audit: &[AuditEntry],
    ) -> Result<Option<i64>, EngineError> {
        let inner = &self.inner;
        let lease_until = now_ms() + inner.config.turns.lease_ms as i64;
        match inner.store.decide_interrupts(turn.pk, decisions, &marker, audit, &inner.instance, lease_until).await? {
            Decided::Recorded { seq, resumed } => {
                inner.log.published(turn.pk, vec![StoredEvent { seq, ..marker }]);
                if let Some(epoch) = resumed {
                    self.go_on(turn.pk, epoch).await?;
                }
                Ok(Some(seq))
            }
            Decided::AlreadyDecided => Ok(None),
        }
    }

    /// The `board.read` audit row (§8) of a caller shown the text of any note; `None` when it
    /// is shown none.
    fn board_read_entry(
        caller: &Caller,
        tenant: &str,
        thread_id: &str,
        clearance: &board::Clearance,
        board: &[Value],
    ) -> Option<AuditEntry> {
        if !clearance.reads_text(board) {
            return None;
        }
        let shown: Vec<&Value> = board.iter().filter(|n| clearance.reads(n)).map(|n| &n["id"]).collect();
        Some(AuditEntry {
            tenant: tenant.to_string(),
            action: "board.read".into(),
            actor: caller.label(),
            via: caller.via().map(str::to_string),
            detail: json!({ "thread": thread_id, "notes": shown }).to_string(),
            at_ms: now_ms(),
        })
    }

    /// Writes the `board.read` audit row of a caller about to be shown notes' text. It must be
    /// in the trail before the notes are sent: when it cannot be written, the read fails.
    pub async fn audit_board_read(
        &self,
        caller: &Caller,
        thread: &ThreadRow,
        clearance: &board::Clearance,
        board: &[Value],
    ) -> Result<(), StoreError> {
        match Engine::board_read_entry(caller, &thread.tenant, &thread.thread_id, clearance, board) {
            Some(entry) => self.inner.store.append_audit(&entry).await,
            None => Ok(()),
        }
    }

    async fn board(&self, turn: &TurnRow) -> Result<Vec<Value>, StoreError> {
        self.thread_board(turn.thread).await
    }

    /// The thread's board: its notes folded in pin order (§7), whole (callers see it through
    /// their [`board::Clearance`]).
    pub async fn thread_board(&self, thread: i64) -> Result<Vec<Value>, StoreError> {
        let notes = self.inner.store.notes(thread).await?;
        Ok(board::from_stored(&notes))
    }

    /// Sets a turn that a decision (or client results) made runnable going, under the epoch
    /// the decision gave it: here on a serving engine; on a passive one (a command) its lease
    /// is given back for the serving instances.
    async fn go_on(&self, turn: i64, epoch: i64) -> Result<(), StoreError> {
        let inner = &self.inner;
        if !inner.serving {
            return inner.store.release_turn(turn, &inner.instance, epoch).await;
        }
        if let Some(mut turn) = inner.store.turn(turn).await? {
            // The row may already show a later claim; this runner holds the decision's epoch
            // and is fenced off if that claim happened.
            turn.epoch = epoch;
            self.spawn_turn(turn, TurnStart::Takeover, None);
        }
        Ok(())
    }

    /// One audit row per decision (§5.3.7): the person's (or the gateway's, for an expiry),
    /// with `via`. They commit with the decisions, so no decision stands unrecorded.
    async fn decision_audit(
        &self,
        turn: &TurnRow,
        actor: &str,
        via: Option<&str>,
        action: &str,
        outcomes: &[&Value],
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let Some(thread) = self.inner.store.thread_by_pk(turn.thread).await? else {
            return Err(StoreError::Corrupt(format!("turn {} names a missing thread", turn.public_id)));
        };
        Ok(outcomes
            .iter()
            .map(|outcome| AuditEntry {
                tenant: thread.tenant.clone(),
                action: action.to_string(),
                actor: actor.to_string(),
                via: via.map(str::to_string),
                detail: json!({ "turn": turn.public_id, "decision": outcome }).to_string(),
                at_ms: now_ms(),
            })
            .collect())
    }

    /// A person decides one interrupt out of band (`POST /v1/interrupts/{id}/decision`): the
    /// same checks as a resume, except that other open interrupts may stay open.
    pub async fn decide_out_of_band(
        &self,
        tenant: &str,
        caller: &Caller,
        entry: &ResumeEntry,
        via: &str,
    ) -> Result<Value, EngineError> {
        let Some(person) = caller.person_id() else {
            return Err(EngineError::PersonOnly(self.console_hint()));
        };
        let store = &self.inner.store;
        let Some(row) = store.find_interrupt(&entry.interrupt_id).await? else {
            return Err(EngineError::PermissionDenied);
        };
        let Some(turn) = store.turn(row.turn).await? else { return Err(EngineError::PermissionDenied) };
        let Some(thread) = self.thread_by_pk(tenant, row.thread).await? else {
            return Err(EngineError::PermissionDenied);
        };
        let roles = caller.roles().to_vec();
        // A decider named by the policy decides without reading the thread (four eyes: the
        // approver is someone else); anyone else learns nothing about the interrupt.
        // Who decides is the gateway's own record: unreadable, it is a fault, never "anyone".
        let deciders: interrupts::Deciders = serde_json::from_str(&row.deciders)
            .map_err(|e| StoreError::Corrupt(format!("interrupt {}'s deciders do not parse: {e}", row.id)))?;
        let decider = interrupts::may_decide(person, &roles, &deciders, row.four_eyes, &row.started_by);
        if !caller.may_read(&thread) && !decider {
            return Err(EngineError::PermissionDenied);
        }
        let interrupts = store.turn_interrupts(turn.pk).await?;
        let plans = check_resume(std::slice::from_ref(entry), &interrupts, person, &roles, now_ms(), false)
            .map_err(|r| EngineError::DecisionRefused(Refusal { code: r.code, message: r.message, figures: None }))?;
        let (outcomes, _) = self.decide(&turn, &plans, person, via).await?.unwrap_or_default();
        Ok(outcomes.into_iter().next().unwrap_or(Value::Null))
    }

    async fn thread_by_pk(&self, tenant: &str, pk: i64) -> Result<Option<ThreadRow>, EngineError> {
        Ok(self.inner.store.thread_by_pk(pk).await?.filter(|t| t.tenant == tenant))
    }

    /// The open interrupts of `turn` this caller may decide (every one, for an API key), as
    /// AG-UI interrupts.
    pub async fn open_interrupts_for(&self, caller: &Caller, turn: &TurnRow) -> Result<Vec<Value>, EngineError> {
        let viewer = Viewer {
            person: caller.person_id().map(str::to_string),
            roles: caller.roles().to_vec(),
            ..Viewer::default()
        };
        let rows = self.inner.store.turn_interrupts(turn.pk).await?;
        Ok(rows
            .iter()
            .filter(|row| row.status == "open")
            .filter_map(waiting_of)
            .filter(|waiting| viewer.person.is_none() || waiting.may_be_decided_by(&viewer))
            .filter_map(|waiting| serde_json::to_value(waiting.interrupt).ok())
            .collect())
    }

    /// Where a person can decide, for a caller who cannot (`gateway/console`).
    fn console_hint(&self) -> String {
        match self.inner.config.console_url.as_str() {
            "" => String::new(),
            url => format!(": decide at {url}"),
        }
    }

    /// Denies, exactly once across instances, every open interrupt past its expiry, and sets
    /// their turns going again (§5.1 `expiresAt`).
    async fn expire_interrupts(&self) -> Result<(), StoreError> {
        let store = &self.inner.store;
        for row in store.lapsed_interrupts(now_ms()).await? {
            let Some(turn) = store.turn(row.turn).await? else { continue };
            let plan = EntryPlan::Decide {
                interrupt_id: row.id.clone(),
                decision: json!({ "approved": false, "expired": true }),
                approved: false,
            };
            let decided = Box::pin(self.decide_expired(&turn, plan)).await;
            if let Err(error) = decided {
                tracing::warn!(%error, interrupt = %row.id, "could not expire an interrupt");
            }
        }
        Ok(())
    }

    async fn decide_expired(&self, turn: &TurnRow, plan: EntryPlan) -> Result<(), EngineError> {
        let inner = &self.inner;
        let EntryPlan::Decide { interrupt_id, decision, .. } = &plan else { return Ok(()) };
        let decisions = [Decision {
            interrupt_id: interrupt_id.clone(),
            status: "expired",
            decision: decision.to_string(),
            decided_by: "gateway".into(),
            decided_via: "expiry".into(),
        }];
        let outcomes = [json!({ "interruptId": interrupt_id, "outcome": "expired" })];
        let expired = outcomes.iter().collect::<Vec<_>>();
        let audit = self.decision_audit(turn, "gateway", None, "interrupt.expire", &expired).await?;
        let marker = resumed_marker(&outcomes, Default::default(), self.board(turn).await?)?;
        if self.record(turn, &decisions, marker, &audit).await?.is_some() {
            tracing::info!(interrupt = %interrupt_id, "an interrupt expired and was denied");
            inner.metrics.interrupts_decided.get_or_create(&CodeLabel { code: "expired".into() }).inc();
        }
        Ok(())
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
        // The run opens with the board (§3): reading its notes' text is audited with the start.
        let board = board::from_stored(&notes);
        let clearance = viewer_of(request).clearance;
        let board_read = Engine::board_read_entry(
            request.caller,
            request.tenant,
            request.thread_id.as_str(),
            &clearance,
            &board,
        );
        let new = NewTurn {
            audit: std::iter::once(audit).chain(board_read).collect(),
            tenant: request.tenant.to_string(),
            thread_id: request.thread_id.as_str().to_string(),
            owner: request.caller.owner(),
            run_id: request.run_id.as_str().to_string(),
            public_id,
            ordinal: i32::try_from(known_turns + 1).unwrap_or(i32::MAX),
            owner_instance: inner.instance.clone(),
            lease_until_ms: now_ms() + inner.config.turns.lease_ms as i64,
            client_tools: match request.input.tools() {
                [] => None,
                tools => serde_json::to_string(tools).ok(),
            },
            agent: request.agent.to_string(),
            user_message_id: message_id,
            user_text: text,
            started_by: request.caller.label(),
            at_ms: now_ms(),
        };
        match inner.store.start_turn(&new).await? {
            StartTurn::Started { thread, turn } => {
                if !request.state_writes.is_empty() {
                    let mut state = board::stored_state(inner.store.thread_state(thread.pk).await?.as_deref());
                    state.extend(request.state_writes.clone());
                    inner.store.set_thread_state(thread.pk, &Value::Object(state).to_string()).await?;
                }
                let plan = FollowPlan {
                    thread_id: thread.thread_id.clone(),
                    thread_pk: thread.pk,
                    run_id: new.run_id.clone(),
                    turn_pk: turn.pk,
                    turn_id: turn.public_id.clone(),
                    run_start_seq: 0,
                    after_seq: 0,
                    skip_parts: 0,
                    viewer: viewer_of(request),
                    resume_outcomes: None,
                };
                let ai_label = inner.config.tenant(request.tenant).and_then(|t| t.ai_label.clone());
                let start = TurnStart::New {
                    thread_id: thread.thread_id.clone(),
                    run_id: new.run_id.clone(),
                    tenant: request.tenant.to_string(),
                    board,
                };
                self.spawn_turn(turn, start, ai_label);
                Ok(RunPlan::Follow(plan))
            }
            StartTurn::RunExists(turn, start_seq) => match inner.store.turn(turn.pk).await? {
                Some(turn) => {
                    let thread = inner.store.thread_by_pk(turn.thread).await?.ok_or(EngineError::PermissionDenied)?;
                    self.follow(request, &thread, &turn, start_seq, None).await
                }
                None => Err(EngineError::PermissionDenied),
            },
            StartTurn::Conflict => Ok(refuse("turn_in_progress", "another turn started on this thread first")),
            StartTurn::NotOwner => Err(EngineError::PermissionDenied),
        }
    }

    /// A run that follows `turn` from `start_seq`, after the client's `Last-Event-ID` when it
    /// sent one (which must be an event of this run: at or after its start).
    async fn follow(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        turn: &TurnRow,
        start_seq: i64,
        resume_outcomes: Option<Vec<Value>>,
    ) -> Result<RunPlan, EngineError> {
        let (after_seq, skip_parts) = match request.last_event_id {
            None => (start_seq, 0),
            Some(id) => {
                let last = self.inner.store.last_seq(turn.pk).await?;
                if id.turn != turn.public_id || id.seq > last || id.seq <= start_seq {
                    return Err(EngineError::BadLastEventId(id.to_string()));
                }
                match id.part {
                    0 => (id.seq, 0),
                    part => (id.seq - 1, part),
                }
            }
        };
        Ok(RunPlan::Follow(FollowPlan {
            thread_id: request.thread_id.as_str().to_string(),
            thread_pk: thread.pk,
            run_id: request.run_id.as_str().to_string(),
            turn_pk: turn.pk,
            turn_id: turn.public_id.clone(),
            run_start_seq: start_seq,
            after_seq,
            skip_parts,
            viewer: viewer_of(request),
            resume_outcomes,
        }))
    }

    /// Runs a turn on this instance until it ends or must leave. The AI label comes from the
    /// tenant of a new turn; a taken-over turn's labelled messages are in its log already.
    fn spawn_turn(&self, turn: TurnRow, start: TurnStart, ai_label: Option<String>) {
        let inner = self.inner.clone();
        // A turn that starts while the instance stops is handed over at once.
        let stopping = inner.stopping.load(std::sync::atomic::Ordering::Acquire);
        let (signal_tx, signal_rx) = watch::channel(if stopping { TurnSignal::HandOver } else { TurnSignal::Run });
        let epoch = turn.epoch;
        {
            let mut running = inner.running.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(earlier) = running.get(&turn.pk) {
                if earlier.epoch >= epoch {
                    return;
                }
                // This instance claimed the turn again (its runner here let the lease lapse):
                // the old runner is fenced off already; tell it to stop at once too.
                earlier.switch.send_replace(TurnSignal::Lost);
            }
            running.insert(turn.pk, Runner { epoch, switch: signal_tx });
            inner.metrics.turns_running.set(running.len() as i64);
        }
        // A child of the request's span when a request started it, so its log lines carry the
        // request id.
        let span = tracing::info_span!("turn", turn = %turn.public_id, agent = %turn.agent);
        let task = async move {
            // Holding the feed makes the writer keep this turn's events in memory for streams.
            let feed = inner.hub.feed(turn.pk);
            feed.enter();
            // A new turn's tenant is known; a taken-over turn's is read from its thread.
            let tenant = match &start {
                TurnStart::New { tenant, .. } => tenant.clone(),
                TurnStart::Takeover => match inner.store.thread_by_pk(turn.thread).await {
                    Ok(Some(thread)) => thread.tenant,
                    _ => String::new(),
                },
            };
            let token_budget = inner.config.tenant(&tenant).and_then(|t| {
                let quotas = &t.quotas;
                quotas.tokens_per_period.map(|limit| TokenBudget { limit, period_secs: quotas.token_period_secs })
            });
            let mut context = TurnContext::new(TurnSetup {
                log: inner.log.clone(),
                turn_pk: turn.pk,
                epoch,
                thread_pk: turn.thread,
                turn_id: turn.public_id.clone(),
                agent: turn.agent.clone(),
                user_text: turn.user_text.clone(),
                ai_label,
                max_event_bytes: inner.config.limits.max_event_bytes,
                signal: signal_rx.clone(),
                next_seq: 1,
                next_note_no: 1,
                store: inner.store.clone(),
                started_by: turn.started_by.strip_prefix("person:").unwrap_or_default().to_string(),
                client_tools: turn
                    .client_tools
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_default(),
                tenant,
                token_budget,
                agents: inner.agents.clone(),
                cards: inner.cards.clone(),
            });
            let ending = run_turn(&inner, &mut context, &turn, start).await;
            let finished = context.finish(ending).await;
            let ended = matches!(finished, Ok(Some(_)));
            match finished {
                Ok(Some(status)) => {
                    tracing::info!(outcome = status.as_str(), "turn ended");
                    let labels = OutcomeLabels { agent: turn.agent.clone(), outcome: status.as_str().to_string() };
                    inner.metrics.turns_finished.get_or_create(&labels).inc();
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::error!(turn = %turn.public_id, %error, "a turn could not be finished in the log")
                }
            }
            // A turn handed over, stopped as lost, or left unfinished (its log refused an
            // append, e.g. after another instance took it over) is released if its row still
            // names this instance: someone then takes it over from the log.
            let signal = *signal_rx.borrow();
            let unfinished = matches!(signal, TurnSignal::HandOver | TurnSignal::Lost)
                || (!ended
                    && inner
                        .store
                        .turn(turn.pk)
                        .await
                        .is_ok_and(|row| row.is_some_and(|r| r.status == TurnStatus::Running)));
            if unfinished {
                if let Err(error) = inner.store.release_turn(turn.pk, &inner.instance, epoch).await {
                    tracing::warn!(turn = %turn.public_id, %error, "could not give a lease back; it will lapse");
                }
            }
            // Streams here must not wait on this instance's memory for the turn's next events
            // any more: another instance may write them now.
            feed.leave();
            let mut running = inner.running.lock().unwrap_or_else(|p| p.into_inner());
            // A later claim of this instance's may run the turn now: leave its entry alone.
            if running.get(&turn.pk).is_some_and(|runner| runner.epoch == epoch) {
                running.remove(&turn.pk);
            }
            inner.metrics.turns_running.set(running.len() as i64);
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
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
        stream::follow(self.inner.store.clone(), self.inner.hub.clone(), self.inner.metrics.clone(), plan, options)
    }
}

impl Inner {
    /// Flips the cancel switch of a turn this instance runs; false if it runs elsewhere.
    fn signal_cancel(&self, turn: i64) -> bool {
        match self.running.lock().unwrap_or_else(|p| p.into_inner()).get(&turn) {
            Some(runner) => {
                runner.switch.send_if_modified(|signal| {
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

    /// Extends the leases of the turns this instance runs, each under its runner's epoch. A
    /// running turn missing from the renewal was claimed by another runner (this one was away
    /// too long) and stops; the store would refuse its writes anyway.
    async fn renew_leases(&self) {
        let until = now_ms() + self.config.turns.lease_ms as i64;
        let held: Vec<(i64, i64)> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(turn, runner)| (*turn, runner.epoch))
            .collect();
        match self.store.renew_leases(&self.instance, until, &held).await {
            Ok(renewed) => {
                let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                for (turn, epoch) in held {
                    if renewed.contains(&turn) {
                        continue;
                    }
                    // Only the runner asked about: a later claim's may have replaced it.
                    if let Some(runner) = running.get(&turn).filter(|r| r.epoch == epoch) {
                        if *runner.switch.borrow() == TurnSignal::Run {
                            tracing::warn!(turn, "lost the lease of a running turn; stopping it here");
                            runner.switch.send_replace(TurnSignal::Lost);
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "could not renew turn leases"),
        }
    }
}

/// A turn this instance runs: the ownership epoch its runner holds, and its signal switch.
struct Runner {
    epoch: i64,
    switch: watch::Sender<TurnSignal>,
}

/// Runs the agent of a new or taken-over turn.
async fn run_turn(
    inner: &Inner,
    context: &mut TurnContext,
    turn: &TurnRow,
    start: TurnStart,
) -> Result<turn::AgentOutput, AgentError> {
    let store = &inner.store;
    let what = "the turn's record could not be read";
    let (thread_id, run_id, board) = match start {
        TurnStart::New { thread_id, run_id, board, .. } => (thread_id, run_id, Some(board)),
        TurnStart::Takeover => {
            let events = context.patiently(what, || read_log(store.as_ref(), turn.pk)).await?;
            context.resume_from_log(&events);
            // Ids in a re-rendered RUN_STARTED are the following run's own.
            (String::new(), String::new(), None)
        }
    };
    let notes = context.patiently(what, || store.notes(turn.thread)).await?;
    context.set_next_note_no(notes.len() as i64 + 1);
    if context.is_fresh() {
        let board = board.unwrap_or_else(|| board::from_stored(&notes));
        context
            .emit(Event::RunStarted {
                thread_id,
                run_id,
                protocol_version: Some(PROTOCOL_VERSION.to_string()),
                parent_run_id: None,
                input: None,
            })
            .await?;
        // The board, and the editable keys runs wrote (§7).
        let state = context.patiently(what, || store.thread_state(turn.thread)).await?;
        let mut snapshot = board::stored_state(state.as_deref());
        snapshot.insert("board".into(), json!({ "notes": board }));
        context.emit(Event::StateSnapshot { snapshot: Value::Object(snapshot), subagent_run_id: None }).await?;
    } else {
        context.close_cut_items().await?;
    }
    let Some(agent) = inner.agents.get(&turn.agent) else {
        return Err(AgentError::Failed(format!("agent '{}' is no longer configured", turn.agent)));
    };
    // A checkpoint the gateway wrote that does not read back is a fault, never a fresh start:
    // running the agent from its first step again would repeat what the turn already did.
    let checkpoint = match turn.checkpoint.as_deref() {
        None => Checkpoint::default(),
        Some(stored) => serde_json::from_str::<Checkpoint>(stored).map_err(|error| {
            tracing::error!(turn = %turn.public_id, %error, "a stored checkpoint does not parse");
            AgentError::Internal("the turn's stored checkpoint is unreadable".into())
        })?,
    };
    agent.run(context, checkpoint).await
}

/// A turn's whole log, read in pages.
pub(crate) async fn read_log(store: &dyn Store, turn: i64) -> Result<Vec<StoredEvent>, StoreError> {
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

/// Who a run's stream is rendered for.
fn viewer_of(request: &RunRequest<'_>) -> Viewer {
    Viewer {
        person: request.caller.person_id().map(str::to_string),
        roles: request.caller.roles().to_vec(),
        pre_1_0: request.input.is_pre_1_0_client(),
        clearance: board::Clearance::of(request.caller),
    }
}

/// The waiting view of a stored interrupt.
fn waiting_of(row: &InterruptRow) -> Option<interrupts::Waiting> {
    Some(interrupts::Waiting {
        interrupt: serde_json::from_str(&row.shown).ok()?,
        deciders: serde_json::from_str(&row.deciders).ok()?,
        four_eyes: row.four_eyes,
        started_by: row.started_by.clone(),
        turn: String::new(),
    })
}

/// The decision event: what was decided, and the board then, for the resume run that starts
/// there. (The turn waits while it is decided, so nothing pins a note meanwhile.)
fn resumed_marker(
    outcomes: &[Value],
    tool_results: std::collections::BTreeMap<String, String>,
    board: Vec<Value>,
) -> Result<StoredEvent, StoreError> {
    let at_ms = now_ms();
    let event = Event::Custom {
        name: RESUMED_EVENT.into(),
        value: json!(ResumedEvent { decisions: outcomes.to_vec(), tool_results, board: Some(board) }),
        subagent_run_id: None,
    };
    let body = serde_json::to_vec(&crate::protocol::events::Envelope::new(event, at_ms))
        .map_err(|e| StoreError::Corrupt(format!("a decision event could not be encoded: {e}")))?;
    Ok(StoredEvent { seq: 0, kind: EventKind::Resumed, body: body.into(), at_ms })
}

/// The `CUSTOM` name under which a decision event is logged (rendered per run, never as is).
pub const RESUMED_EVENT: &str = "gateway.resumed-event";

fn refuse(code: &'static str, message: &str) -> RunPlan {
    RunPlan::Refused(Refusal { code, message: message.to_string(), figures: None })
}

impl Engine {
    /// The thread's conversation as AG-UI messages (see [`conversation`]).
    pub async fn messages(&self, thread: &ThreadRow) -> Result<Vec<crate::protocol::InputMessage>, EngineError> {
        Ok(conversation::load(self.inner.store.as_ref(), thread.pk).await?)
    }
}
