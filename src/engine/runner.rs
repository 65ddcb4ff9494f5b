//! Running turns on this instance: spawning a turn's task, running its agent from the start or
//! from its checkpoint, the map of the turns running here (with each runner's epoch and signal
//! switch), cancelling, and handing every turn over when the instance stops.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::board;
use super::errors::EngineError;
use super::shape::{Engine, Inner, Runner};
use super::turn::agent::Agent;
use super::turn::{AgentError, AgentOutput, Checkpoint, TurnContext, TurnSignal};
use crate::caller::Caller;
use crate::ids::{TenantId, ThreadId};
use crate::metrics::OutcomeLabels;
use crate::protocol::{Event, PROTOCOL_VERSION};
use crate::store::{EventKind, TurnRow, TurnStatus, WakeUp};

impl Engine {
    /// The first half of a stop (SIGTERM, §4.6): the turns running here go on to their end for
    /// up to `period`, while this instance takes on no turn (one started or resumed here now is
    /// handed to another instance at once, and none is taken over). Returns once no turn runs
    /// here, or when `period` has passed; [`Engine::hand_over`] then gives back what is left.
    pub async fn drain(&self, period: Duration) {
        self.inner.draining.store(true, std::sync::atomic::Ordering::Release);
        let deadline = tokio::time::Instant::now() + period;
        loop {
            let running = self.inner.running.lock().unwrap_or_else(|p| p.into_inner()).len();
            if running == 0 {
                tracing::info!("drained: no turn runs here any more");
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::info!(running, "the drain period ended with turns still running; they are handed over");
                return;
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }

    /// Whether this instance is stopping or draining (`readyz` says so: 503).
    pub fn is_draining(&self) -> bool {
        let inner = &self.inner;
        inner.draining.load(std::sync::atomic::Ordering::Acquire)
            || inner.stopping.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stops every turn this instance runs, commits what they said and gives the turns back
    /// (owner NULL), so other instances take them over at once; then gives the instance's own
    /// lease up. Waits at most `grace` for the turns.
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
                tracing::warn!("the grace period ended with turns still handing over; other instances take them now");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The instance's lease goes too: a turn that could not be handed over in time is
        // lapsed at once (its runner here is fenced off by the claim), and the row does not
        // outlive the process.
        if self.inner.serving {
            if let Err(error) = self.inner.store.retire_instance(&self.inner.instance).await {
                tracing::warn!(%error, "could not give this instance's lease back; it will lapse");
            }
        }
    }

    /// Runs a turn on this instance until it ends or must leave. The tenant's AI label leads
    /// every message the turn opens here: a new turn's, a resumed one's, and the answer a
    /// taken-over turn gives again in place of a cut one (a message it continues was labelled
    /// where it began).
    pub(super) fn spawn_turn(&self, turn: TurnRow, start: TurnStart) {
        let inner = self.inner.clone();
        // A turn that starts while the instance stops or drains is handed over at once.
        let stopping = inner.stopping.load(std::sync::atomic::Ordering::Acquire)
            || inner.draining.load(std::sync::atomic::Ordering::Acquire);
        // A turn whose cancel was asked for before this runner (its instance died after the
        // cancel, or a waiting turn was cancelled) ends `cancelled` here.
        let first = match (stopping, turn.cancel_requested) {
            (true, _) => TurnSignal::HandOver,
            (false, true) => TurnSignal::Cancel,
            (false, false) => TurnSignal::Run,
        };
        let (signal_tx, signal_rx) = watch::channel(first);
        let epoch = turn.epoch;
        {
            let mut running = inner.running.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(earlier) = running.get(&turn.pk) {
                if earlier.epoch >= epoch {
                    return;
                }
                // This instance claimed the turn again (it was given back while its runner here
                // was still stopping, or its lease lapsed):
                // the old runner is fenced off already; tell it to stop at once too.
                earlier.switch.send_replace(TurnSignal::Lost);
            }
            running.insert(turn.pk, Runner { epoch, switch: signal_tx });
            inner.metrics.turns_running.set(running.len() as i64);
        }
        // Holding the feed makes the writer keep this turn's events in memory for streams: held
        // from here, before a request that started (or resumed) the turn opens its stream, so
        // that stream waits on memory instead of reading a table the runner has not written yet.
        let feed = inner.hub.feed(turn.pk);
        match &start {
            TurnStart::New { .. } => feed.enter_at_start(),
            TurnStart::Takeover => feed.enter(),
        }
        // A child of the request's span when a request started it, so its log lines carry the
        // request id.
        let span = tracing::info_span!("turn", turn = %turn.public_id, agent = %turn.agent);
        let task = async move {
            // A cancel that committed after this turn's row was read looked for the runner
            // before it was registered above, and found none here: the row says so now. (The
            // cancel writes, then looks for the runner; the runner registers, then reads.)
            if !turn.cancel_requested {
                match inner.store.cancel_requested(turn.pk).await {
                    Ok(true) => {
                        inner.signal_cancel(turn.pk);
                    }
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, "whether the turn's cancel was asked could not be read"),
                }
            }
            // A new turn's tenant is known; a taken-over turn's is read from its thread. A turn
            // whose tenant cannot be read is not run (it would have no token budget and charge
            // no one): it is given back below, for a later takeover to try again.
            let tenant = match &start {
                TurnStart::New { tenant, .. } => Some(tenant.clone()),
                TurnStart::Takeover => tenant_of_thread(&inner, &turn, &signal_rx).await,
            };
            let finished = match tenant {
                Some(tenant) => {
                    let ai_label = inner.config.tenant(tenant.as_str()).and_then(|t| t.ai_label.clone());
                    let mut context =
                        TurnContext::new(inner.turn_services(), &turn, tenant, ai_label, signal_rx.clone());
                    let ending = run_turn(&inner, &mut context, &turn, start).await;
                    // Boxed: the ending's state is live for a moment at the end, but unboxed it
                    // would take its room in the task for all of the turn's life (a waiting
                    // turn's too).
                    Box::pin(context.finish(ending)).await
                }
                None => Ok(None),
            };
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
                        .turn_by_pk(turn.pk)
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

    /// Cancels the thread's unfinished turn (§4.1), running or waiting; the turn ends with
    /// outcome `cancelled`. The one path of the cancel route, CopilotKit's stop and the
    /// console's cancel (a thread's delete stops its turn the same way before it erases).
    pub async fn cancel(&self, tenant: &str, caller: &Caller, thread_id: &ThreadId) -> Result<String, EngineError> {
        let store = &self.inner.store;
        let thread = self.readable_thread(tenant, caller, thread_id).await?;
        let turns = store.thread_turns(thread.pk).await?;
        let Some(turn) = turns.last().filter(|t| !t.status.is_finished()) else {
            return Err(EngineError::NotRunning("no turn is running or waiting on this thread".into()));
        };
        if turn.status == TurnStatus::Waiting {
            // Its interrupts are withdrawn and it is set running, to be ended by a runner here.
            if let Some(epoch) = store.cancel_waiting_turn(turn.pk, &self.inner.instance, None).await? {
                self.go_on(turn.pk, epoch).await?;
                return Ok(turn.public_id.clone());
            }
            // Decided meanwhile: it runs now, and is cancelled as a running turn is.
        }
        if !self.request_cancel(turn.pk).await? {
            return Err(EngineError::NotRunning("the turn finished before it could be cancelled".into()));
        }
        Ok(turn.public_id.clone())
    }

    /// Asks the running turn `turn` to stop, on whichever instance runs it; false when it is
    /// not running (any more).
    pub(super) async fn request_cancel(&self, turn: i64) -> Result<bool, EngineError> {
        if !self.inner.store.request_cancel(turn).await? {
            return Ok(false);
        }
        if !self.inner.signal_cancel(turn) {
            // Another instance runs it: tell it through the shared wake-up channel.
            self.inner.bus.announce(&[WakeUp::Cancel { turn }]).await?;
        }
        Ok(true)
    }
}

impl Inner {
    /// Flips the cancel switch of a turn this instance runs; false if it runs elsewhere.
    pub(super) fn signal_cancel(&self, turn: i64) -> bool {
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
}

/// How often a drain looks whether the turns running here have ended.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// How long a taken-over turn waits for its thread to be read before it is given back.
const TENANT_PATIENCE: Duration = Duration::from_secs(30);

/// The tenant of a taken-over turn, from its thread: read again with backoff while the read
/// fails (the database away, the row briefly unreadable), for up to [`TENANT_PATIENCE`] or
/// until the turn must stop. `None`: the turn is not to run here now.
async fn tenant_of_thread(inner: &Inner, turn: &TurnRow, signal: &watch::Receiver<TurnSignal>) -> Option<TenantId> {
    let deadline = tokio::time::Instant::now() + TENANT_PATIENCE;
    let mut backoff = crate::retry::Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
    let mut signal = signal.clone();
    loop {
        let problem = match inner.store.thread_by_pk(turn.thread).await {
            Ok(Some(thread)) => match TenantId::parse(&thread.tenant) {
                Ok(tenant) => return Some(tenant),
                Err(why) => why,
            },
            Ok(None) => "the turn's thread is gone".to_string(),
            Err(error) => error.to_string(),
        };
        if *signal.borrow() != TurnSignal::Run || tokio::time::Instant::now() + backoff.peek() >= deadline {
            tracing::error!(turn = %turn.public_id, problem, "a taken-over turn's tenant could not be read; it is given back");
            return None;
        }
        tracing::warn!(turn = %turn.public_id, problem, "a taken-over turn's tenant could not be read; retrying");
        tokio::select! {
            _ = backoff.wait() => {}
            _ = signal.wait_for(|s| *s != TurnSignal::Run) => {}
        }
    }
}

/// How a turn task begins.
pub(super) enum TurnStart {
    /// A new turn: its log starts with `RUN_STARTED` and the board as it is now.
    New { thread_id: String, run_id: String, tenant: TenantId, board: Vec<Value> },
    /// A turn another owner left unfinished: continue after its log, from its checkpoint.
    Takeover,
}

/// Runs the agent of a new or taken-over turn.
pub(super) async fn run_turn(
    inner: &Inner,
    context: &mut TurnContext,
    turn: &TurnRow,
    start: TurnStart,
) -> Result<AgentOutput, AgentError> {
    // The opening is boxed and gone by the time the agent runs: only the agent's own future
    // stays in the turn's task while it runs or waits.
    let (agent, checkpoint) = Box::pin(open_turn(inner, context, turn, start)).await?;
    // Cancelled before its agent runs: its log is opened (what is open is known), then ended.
    context.check_cancelled()?;
    agent.run(context, checkpoint).await
}

/// What a turn's agent starts from: the turn's opening events logged (a new turn's, or what a
/// taken-over log lacks), its agent, and the checkpoint it goes on from.
async fn open_turn(
    inner: &Inner,
    context: &mut TurnContext,
    turn: &TurnRow,
    start: TurnStart,
) -> Result<(Arc<dyn Agent>, Checkpoint), AgentError> {
    let store = &inner.store;
    let what = "the turn's record could not be read";
    let (thread_id, run_id, board, opened) = match start {
        TurnStart::New { thread_id, run_id, board, .. } => (thread_id, run_id, Some(board), false),
        TurnStart::Takeover => {
            let events = context.patiently(what, || super::log::read_log(store.as_ref(), turn.pk)).await?;
            context.resume_from_log(&events);
            let opened = events.iter().any(|e| e.kind == EventKind::StateSnapshot);
            // Ids in a re-rendered RUN_STARTED are the following run's own.
            (String::new(), String::new(), None, opened)
        }
    };
    let notes = context.patiently(what, || store.notes(turn.thread)).await?;
    context.set_next_note_no(notes.len() as i64 + 1);
    // The board, and the editable keys runs wrote (§7): what a run opens with.
    let snapshot = |state: Option<String>, board: Vec<Value>| {
        let mut snapshot = board::stored_state(state.as_deref());
        snapshot.insert("board".into(), json!({ "notes": board }));
        Event::StateSnapshot { snapshot: Value::Object(snapshot), subagent_run_id: None }
    };
    let picked_up = !context.is_fresh();
    if !picked_up {
        let board = match board {
            Some(board) => board,
            // Taken over before it opened: the board of its own branch (§6).
            None => {
                let turns = context.patiently(what, || store.thread_turns(turn.thread)).await?;
                let branch = crate::store::branches::ending_at(&turns, turn.pk);
                board::from_stored(&board::on_branch(notes.clone(), &turns, &branch))
            }
        };
        let state = context.patiently(what, || store.thread_state(turn.thread)).await?;
        let started = Event::RunStarted {
            thread_id,
            run_id,
            protocol_version: Some(PROTOCOL_VERSION.to_string()),
            parent_run_id: None,
            input: None,
        };
        context.emit_together(vec![started, snapshot(state, board)]).await?;
    } else if !opened {
        // A log cut between its RUN_STARTED and its STATE_SNAPSHOT (written apart by an
        // earlier version): the run still opens with the board before anything else.
        let state = context.patiently(what, || store.thread_state(turn.thread)).await?;
        context.emit(snapshot(state, board::from_stored(&notes))).await?;
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
    if picked_up && !agent.continues_cut_items(&checkpoint) {
        context.close_cut_items().await?;
    }
    Ok((agent.clone(), checkpoint))
}
