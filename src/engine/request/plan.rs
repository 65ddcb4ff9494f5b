//! What a run follows: a new turn, the same turn again (a replay, a reconnect, a reload), a
//! resume, or a refusal. [`Engine::begin_run`] is the one entry; a resume or client tool
//! results are handed to [`super::decide`], and every path that ends in a stream goes through
//! [`super::follow`]. The thread, its turns and a turn's interrupts are read here once and
//! handed on with the request, never read again on its way to the first event.

use serde_json::Value;

use super::follow::{refuse, viewer_of, Following};
use super::history::{self, Branching, HistoryVerdict};
use crate::engine::board;
use crate::engine::errors::EngineError;
use crate::engine::interrupts::{self, waiting_of};
use crate::engine::plans::{FollowPlan, RunPlan, RunRequest};
use crate::engine::runner::TurnStart;
use crate::engine::shape::Engine;
use crate::ids::{self};
use crate::metrics::{AgentLabel, CodeLabel};
use crate::protocol::ErrorCode;
use crate::store::{
    branches, InterruptRow, InterruptStatus, NewTurn, StartTurn, ThreadRow, TurnRow, TurnStatus, WakeUp,
};

impl Engine {
    /// Decides what a run streams (§2, §4, §5, §6). Starts a turn when the run brings a new
    /// message; decides interrupts when it brings a resume.
    pub async fn begin_run(&self, request: RunRequest<'_>) -> Result<RunPlan, EngineError> {
        let metrics = &self.inner.metrics;
        let reconnect = request.last_event_id.is_some();
        let agent = request.agent.to_string();
        // Every stream that opens on notes' text is in the trail before it shows them (§8): its
        // `board.read` row is written with what the run records, or before its plan is made.
        let plan = self.plan_run(request).await?;
        match &plan {
            RunPlan::Follow(_) => {
                metrics.runs_started.get_or_create(&AgentLabel { agent }).inc();
                if reconnect {
                    metrics.reconnects.inc();
                }
            }
            RunPlan::Refused(refusal) => {
                metrics.runs_refused.get_or_create(&CodeLabel { code: refusal.code.as_str().to_string() }).inc();
            }
        }
        Ok(plan)
    }

    async fn plan_run(&self, mut request: RunRequest<'_>) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let store = &inner.store;
        let thread = store.find_thread(request.tenant.as_str(), request.thread_id.as_str()).await?;
        if let Some(thread) = &thread {
            if !request.caller.may_read(thread) {
                return Err(EngineError::PermissionDenied);
            }
        }
        request.state_writes = self.changed_state(&request, thread.as_ref()).await?;
        if let Some(thread) = &thread {
            if let Some((turn, start_seq)) = store.find_run(thread.pk, request.run_id.as_str()).await? {
                let entries = request.input.resume();
                if entries.is_empty() {
                    return self.follow(&request, Following::of(thread, &turn, start_seq)).await;
                }
                // Answers sent on the run that asked (as CopilotKit's useInterrupt sends them):
                // the resume is a run of its own, recorded under a key named by its answers, so
                // sending it again follows (or replays) that run.
                let mut answered: Vec<&str> = entries.iter().map(|e| e.interrupt_id.as_str()).collect();
                answered.sort_unstable();
                let key = format!("{}~resume:{}", request.run_id.as_str(), answered.join(","));
                if let Some((turn, start_seq)) = store.find_run(thread.pk, &key).await? {
                    return self.follow(&request, Following::of(thread, &turn, start_seq)).await;
                }
                let asked = store.turn_interrupts(turn.pk).await?;
                let answers_open = entries
                    .iter()
                    .any(|e| asked.iter().any(|i| i.id == e.interrupt_id && i.status == InterruptStatus::Open));
                if !answers_open {
                    // A resume run sent again: its replay, as for any known runId.
                    return self.follow(&request, Following::of(thread, &turn, start_seq)).await;
                }
                let turns = store.thread_turns(thread.pk).await?;
                return self.resume(&request, Some(thread), turns, &key, Some((turn.pk, asked))).await;
            }
        }
        let turns = match &thread {
            Some(thread) => store.thread_turns(thread.pk).await?,
            None => Vec::new(),
        };
        if !request.input.resume().is_empty() {
            return self.resume(&request, thread.as_ref(), turns, request.run_id.as_str(), None).await;
        }
        let copy = super::actions::read(request.input, &turns);
        match history::check(&copy.messages, &turns) {
            HistoryVerdict::NoUserMessage => {
                Err(EngineError::BadRequest { field: "messages", message: "a run needs a user message".into() })
            }
            HistoryVerdict::Mismatch(why) => Ok(refuse(
                ErrorCode::HistoryMismatch,
                &format!("the history differs from the thread's ({why}); load the thread again"),
            )),
            HistoryVerdict::Follow(pk) => self.follow_recorded(&request, thread.as_ref(), &turns, pk).await,
            HistoryVerdict::NewTurn { message_id, text, parts, parent, kind } => {
                tracing::debug!(?kind, "a run adds a turn");
                if let Some(last_event_id) = request.last_event_id {
                    // A reload's reconnect after the turn it followed ended: it reads as a
                    // regenerate now, but its Last-Event-ID names the turn it was following.
                    let followed = turns.iter().find(|t| t.public_id == last_event_id.turn && t.parent == parent);
                    if let (Branching::Regenerate, Some(followed)) = (kind, followed) {
                        return self.follow_recorded(&request, thread.as_ref(), &turns, followed.pk).await;
                    }
                    return Err(EngineError::BadLastEventId(last_event_id.to_string()));
                }
                // One turn at a time per thread, whichever branch it is on (§6): the newest
                // turn is the only one that may still run or wait.
                if let Some(latest) = branches::newest(&turns) {
                    match latest.status {
                        TurnStatus::Running => return Ok(refuse_while_running()),
                        TurnStatus::Waiting => {
                            let interrupts = store.turn_interrupts(latest.pk).await?;
                            if let Some(pending) = self.pending_client_calls(latest, &interrupts).await? {
                                return Ok(refuse(
                                    ErrorCode::InterruptsPending,
                                    &format!("the turn waits for the results of the tool calls {}", pending.join(", ")),
                                ));
                            }
                            return Ok(refuse_while_waiting(&request, &interrupts));
                        }
                        _ => {}
                    }
                }
                // A person's action answers a surface the branch it goes on showed (§3);
                // anything else is refused before a thing is recorded.
                let action = copy.actions.get(&message_id).cloned();
                if let Some(action) = &action {
                    let shown = match (&thread, parent) {
                        (Some(thread), Some(head)) => {
                            super::actions::surface_shown(self.inner.store.as_ref(), thread.pk, head, action).await?
                        }
                        _ => false,
                    };
                    if !shown {
                        return Ok(refuse(
                            ErrorCode::UnknownSurface,
                            &format!(
                                "the action is on surface '{}', which this conversation never showed",
                                crate::protocol::a2ui::surface_of(action).unwrap_or("")
                            ),
                        ));
                    }
                }
                if let Some(refusal) = self.over_quota(request.tenant.as_str()).await? {
                    return Ok(RunPlan::Refused(refusal));
                }
                let id = if copy.forwarded.as_ref() == Some(&message_id) { String::new() } else { message_id };
                let message = NewMessage { id, text, parts, parent, action, app_request: None };
                self.start_turn(&request, thread.as_ref(), turns, message).await
            }
        }
    }

    /// Follows a recorded turn the run's history ends at (§4.3): a reloaded page, from the
    /// turn's latest decision (or its start); its reconnect, from the latest decision before its
    /// Last-Event-ID; a waiting turn's client tool results go on with it.
    async fn follow_recorded(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
        turns: &[TurnRow],
        pk: i64,
    ) -> Result<RunPlan, EngineError> {
        let (Some(thread), Some(turn)) = (thread, turns.iter().find(|t| t.pk == pk)) else {
            return Ok(refuse(ErrorCode::HistoryMismatch, "the thread has no turn to follow; load the thread again"));
        };
        let interrupts = self.inner.store.turn_interrupts(turn.pk).await?;
        if turn.status == TurnStatus::Waiting {
            if let Some(pending) = self.pending_client_calls(turn, &interrupts).await? {
                let answers =
                    request.input.messages.iter().any(
                        |m| matches!(m, crate::protocol::InputMessage::Tool(t) if pending.contains(&t.tool_call_id)),
                    );
                if answers {
                    return self.continue_with_client_results(request, thread, turns, turn, pending).await;
                }
            }
        }
        // A reloaded page follows the turn from its turn decision (or its start); its
        // reconnect, from the turn decision before its Last-Event-ID. Nothing is recorded:
        // each reload brings a new runId, and its history finds the turn again.
        let seen = request.last_event_id.map_or(i64::MAX, |id| id.seq);
        let decided = interrupts.iter().filter_map(|i| i.decided_seq).filter(|seq| *seq <= seen);
        let start = decided.max().map_or(0, |seq| seq - 1);
        let following = Following { turns: Some(turns.to_vec()), ..Following::of(thread, turn, start) };
        self.follow(request, following).await
    }

    /// The editable keys the run changes (§7), each checked against its schema (400 naming
    /// the key). A value equal to what the thread already holds — its stored state, or the
    /// state its latest turn last showed, an upstream's keys included — is the client's echo of
    /// it, not an edit: neither checked nor written.
    async fn changed_state(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
    ) -> Result<serde_json::Map<String, Value>, EngineError> {
        let inner = &self.inner;
        let mut changed = request.state_writes.clone();
        if let (Some(thread), false) = (thread, changed.is_empty()) {
            let stored = board::stored_state(inner.store.thread_state(thread.pk).await?.as_deref());
            changed.retain(|key, value| stored.get(key) != Some(value));
            if !changed.is_empty() {
                if let Some(latest) = inner.store.thread_turns(thread.pk).await?.last() {
                    let shown =
                        board::last_shown_state(&crate::engine::log::read_log(inner.store.as_ref(), latest.pk).await?);
                    changed.retain(|key, value| shown.get(key) != Some(value));
                }
            }
        }
        let Some(agent) = inner.config.agent(request.agent) else { return Ok(changed) };
        for (key, value) in &changed {
            let Some(schema) = agent.editable_state.get(key) else { continue };
            let refused = |message: String| EngineError::BadState { key: key.clone(), message };
            let validator =
                jsonschema::validator_for(schema).map_err(|e| refused(format!("the key's schema is invalid: {e}")))?;
            let first = validator.iter_errors(value).next().map(|error| error.to_string());
            if let Some(error) = first {
                return Err(refused(error));
            }
        }
        Ok(changed)
    }

    /// Starts the turn `message` opens on the thread (none yet: it is created), whose `turns`
    /// the request read.
    pub(super) async fn start_turn(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
        mut turns: Vec<TurnRow>,
        message: NewMessage,
    ) -> Result<RunPlan, EngineError> {
        let inner = &self.inner;
        let ordinal = branches::newest(&turns).map_or(1, |t| t.ordinal.saturating_add(1));
        // The new turn sees the board of the branch it goes on from (§6).
        let notes = match thread {
            Some(thread) => {
                let branch = message.parent.map(|head| branches::ending_at(&turns, head)).unwrap_or_default();
                board::on_branch(inner.store.notes(thread.pk).await?, &turns, &branch)
            }
            None => Vec::new(),
        };
        let public_id = ids::new_turn_id();
        let now = self.now_ms();
        let audit = Engine::run_start_entry(request, &public_id, now);
        // The run opens with the board (§3): reading its notes' text is audited with the start.
        let board = board::from_stored(&notes);
        let clearance = viewer_of(request).clearance;
        let board_read = Engine::board_read_entry(
            request.caller,
            request.tenant.as_str(),
            request.thread_id.as_str(),
            &clearance,
            &board,
            now,
        );
        let new = NewTurn {
            audit: std::iter::once(audit).chain(board_read).collect(),
            tenant: request.tenant.to_string(),
            thread_id: request.thread_id.as_str().to_string(),
            owner: request.caller.owner(),
            run_id: request.run_id.as_str().to_string(),
            public_id,
            ordinal,
            parent: message.parent,
            owner_instance: inner.instance.clone(),
            client_tools: match request.input.tools() {
                [] => None,
                tools => serde_json::to_string(tools).ok(),
            },
            client_input: client_input(request.input, message.action.clone(), message.app_request.clone()),
            agent: request.agent.to_string(),
            user_message_id: message.id,
            user_text: message.text,
            user_parts: match &message.parts {
                Some(parts) => Some(
                    serde_json::to_string(parts)
                        .map_err(|e| EngineError::BadRequest { field: "messages", message: e.to_string() })?,
                ),
                None => None,
            },
            started_by: request.caller.label(),
            at_ms: now,
            limits: self.turn_limits(request.tenant.as_str()),
        };
        // An erase of the thread may meet the turn's start: PostgreSQL breaks the deadlock
        // between the two (tried again: the erase then goes first), and a turn on the thread
        // the erase took away is refused. The thread is unknown then, and the run is answered
        // as for any unknown thread (§10).
        let mut tries = 0;
        let started = loop {
            match inner.store.start_turn(&new).await {
                Ok(started) => break started,
                Err(error) if error.is_transient() && tries < 3 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(error) if error.is_refused_by_database() && thread.is_some() => {
                    let pk = thread.map_or(0, |t| t.pk);
                    if inner.store.thread_by_pk(pk).await?.is_none() {
                        return Err(EngineError::PermissionDenied);
                    }
                    return Err(error.into());
                }
                Err(error) => return Err(error.into()),
            }
        };
        match started {
            StartTurn::Started { thread, turn } => {
                self.announce_turn_start(thread.pk).await;
                if !request.state_writes.is_empty() {
                    let mut state = board::stored_state(inner.store.thread_state(thread.pk).await?.as_deref());
                    state.extend(request.state_writes.clone());
                    inner.store.set_thread_state(thread.pk, &Value::Object(state).to_string()).await?;
                }
                // Its stream's board.read row went in with the start; the turns it restates
                // are those read, and this one.
                let viewer = viewer_of(request);
                let plan = FollowPlan::new((&thread.thread_id, thread.pk), &new.run_id, &turn, viewer, self.console());
                turns.push(turn.clone());
                let plan = FollowPlan { turns: Some(turns.into()), ..plan };
                let start = TurnStart::New {
                    thread_id: thread.thread_id.clone(),
                    run_id: new.run_id.clone(),
                    tenant: request.tenant.clone(),
                    board,
                };
                self.spawn_turn(turn, start);
                Ok(RunPlan::Follow(plan))
            }
            StartTurn::RunExists(turn, start_seq) => match inner.store.turn_by_pk(turn.pk).await? {
                Some(turn) => {
                    let thread = inner.store.thread_by_pk(turn.thread).await?.ok_or(EngineError::PermissionDenied)?;
                    self.follow(request, Following::of(&thread, &turn, start_seq)).await
                }
                None => Err(EngineError::PermissionDenied),
            },
            StartTurn::Conflict => Ok(refuse(ErrorCode::TurnInProgress, "another turn started on this thread first")),
            StartTurn::NotOwner => Err(EngineError::PermissionDenied),
            // Other starts of the tenant took the last places since the look before (§8).
            StartTurn::OverLimit(usage) => match self.quota_refusal(request.tenant.as_str(), &usage) {
                Some(refusal) => Ok(RunPlan::Refused(refusal)),
                None => Err(EngineError::Store(crate::store::StoreError::Corrupt(
                    "the store found a limit reached that the tenant's quotas do not name".into(),
                ))),
            },
        }
    }
}

impl Engine {
    /// Tells the connect streams watching the thread, here and on other instances, that a turn
    /// started. A lost announcement only delays them: they look at the thread's turns again on
    /// a slow timer.
    async fn announce_turn_start(&self, thread: i64) {
        self.inner.hub.wake_thread(thread);
        if let Err(error) = self.inner.bus.announce(&[WakeUp::NewTurn { thread }]).await {
            tracing::warn!(%error, thread, "announcing a turn start failed; watchers will find it on their timer");
        }
    }
}

/// The user message a new turn starts with, as the history check read it.
pub(super) struct NewMessage {
    pub(super) id: String,
    pub(super) text: String,
    pub(super) parts: Option<Vec<crate::protocol::ContentPart>>,
    /// The turn it goes on from (§6).
    pub(super) parent: Option<i64>,
    /// The person's action it stands for, when it is one (§3).
    pub(super) action: Option<serde_json::Value>,
    /// The MCP App's request it stands for, when it is one (§9.2: a call that waits for a
    /// person; `app_requests.rs`).
    pub(super) app_request: Option<serde_json::Value>,
}

/// What a turn keeps of its starting run's input for an upstream agent (§9.3): the `context`
/// entries and the `forwardedProps`, when the client sent either.
/// A turn an action started keeps the action itself, and not its `forwardedProps.a2uiAction`:
/// an upstream gets the action in the conversation, as the A2UI middleware gives it, once.
/// A turn an MCP App's request started keeps the request (and not the `forwardedProps` that
/// brought it).
fn client_input(
    input: &crate::protocol::RunAgentInput,
    action: Option<Value>,
    app_request: Option<Value>,
) -> Option<String> {
    let mut forwarded_props = input.forwarded_props.clone().filter(|p| !p.is_null());
    if let (Some(Value::Object(props)), Some(_)) = (&mut forwarded_props, &action) {
        props.remove("a2uiAction");
    }
    if let (Some(Value::Object(props)), Some(_)) = (&mut forwarded_props, &app_request) {
        props.remove(crate::protocol::mcp_apps::PROXIED_REQUEST);
    }
    let kept = crate::engine::turn::ClientInput {
        context: input.context.clone().unwrap_or_default(),
        forwarded_props,
        action,
        app_request,
    };
    if kept.context.is_empty() && kept.forwarded_props.is_none() && kept.action.is_none() && kept.app_request.is_none()
    {
        return None;
    }
    serde_json::to_string(&kept).ok()
}

/// A new message on a thread whose turn runs: one turn at a time per thread (§6).
pub(super) fn refuse_while_running() -> RunPlan {
    refuse(ErrorCode::TurnInProgress, "a turn is running on this thread; wait for it to finish")
}

/// A new message on a thread whose turn waits: `interrupts_pending` when the caller may
/// decide something, else `turn_waiting` naming who decides (§5.3.6).
pub(super) fn refuse_while_waiting(request: &RunRequest<'_>, interrupts: &[InterruptRow]) -> RunPlan {
    let viewer = viewer_of(request);
    let open = interrupts.iter().filter(|i| i.status == InterruptStatus::Open);
    let waiting: Vec<interrupts::Waiting> = open.filter_map(waiting_of).collect();
    if waiting.iter().any(|w| w.may_be_decided_by(&viewer)) {
        let ids: Vec<&str> = waiting.iter().map(|w| w.interrupt.id.as_str()).collect();
        return refuse(
            ErrorCode::InterruptsPending,
            &format!("the turn waits for your decision on {}; answer with resume first", ids.join(", ")),
        );
    }
    let who: Vec<String> = waiting.iter().map(|w| interrupts::describe_deciders(&w.deciders, w.four_eyes)).collect();
    refuse(ErrorCode::TurnWaiting, &format!("the turn waits for a decision by {}", who.join("; ")))
}
