//! [`TurnContext`]: what an agent holds while it answers a turn. Everything an agent says goes
//! through it into the event log; it numbers the events, names messages, tool calls and notes
//! after the turn, and remembers what is open so a cancelled turn is closed properly.
//!
//! The context's other concerns are `impl TurnContext` blocks of their own: what a turn waits
//! for ([`super::waits`]), delegation to child agents ([`super::delegation`]), the token
//! budget ([`super::budget`]), cards ([`super::cards`]), and picking up and ending a turn
//! ([`super::lifecycle`]). Their types are re-exported here,
//! so an agent needs only this module.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::log::{AppendHealth, EventLog, LogError};
use super::log_events::GatewayEvent;
use crate::clock::Clock;
use crate::protocol::events::{Envelope, TextRole, ToolResultContent};
use crate::protocol::{iso8601, Event, TokenUsage};
use crate::retry::Backoff;
use crate::store::{Store, StoredEvent, WriteOp};

pub use super::budget::TokenBudget;
pub use super::delegation::ChildCheckpoint;
use super::delegation::NestFrame;
pub use super::waits::{new_interrupt_id, Decided, InterruptSpec};

/// A gateway event as the AG-UI event it is logged as.
pub(super) fn logged(event: GatewayEvent) -> Result<Event, AgentError> {
    event.into_event().map_err(|error| AgentError::Failed(format!("an event could not be encoded: {error}")))
}

/// What the engine asks of a running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnSignal {
    Run,
    /// An explicit cancel: finish with outcome `cancelled`.
    Cancel,
    /// This instance is stopping: stop here, commit what was said, give the lease back.
    HandOver,
    /// Another instance took the turn over (our lease lapsed): stop without writing.
    Lost,
}

/// Why an agent stopped before finishing. Each maps to how the run ends.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// An explicit cancel: `RUN_FINISHED` with outcome `cancelled`.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The turn leaves this instance unfinished (shutdown, or a lost lease); not an ending.
    #[error("the turn moves to another instance")]
    Stopped,
    /// The turn waits for interrupts to be decided; not an ending either.
    #[error("the turn waits for a decision")]
    Waiting,
    /// The agent failed: `RUN_ERROR` with code `failed`.
    #[error("{0}")]
    Failed(String),
    /// The tenant's token budget is spent (§8): `RUN_ERROR` `quota_exceeded` with the figures in
    /// `rawEvent.gateway`.
    #[error("{message}")]
    QuotaExceeded { message: String, figures: Value },
    /// The agent ran out of time (an upstream's deadline): `RUN_ERROR` with code `timed_out`.
    #[error("{0}")]
    TimedOut(String),
    /// Something the gateway stored itself does not read back (a checkpoint, a decision):
    /// `RUN_ERROR` with code `internal`; the cause is logged, the client sees only this.
    #[error("internal error: {0}")]
    Internal(String),
    /// One event exceeded `limits.max_event_bytes`: `RUN_ERROR` `failed`.
    #[error("an event of {size} bytes exceeds the {limit}-byte limit")]
    EventTooLarge { size: usize, limit: usize },
    /// The log could not be written; nothing more can be said on this turn.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl AgentError {
    /// A name for the kind of failure, safe to log (it never holds message text).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentError::Cancelled => "cancelled",
            AgentError::Stopped => "stopped",
            AgentError::Waiting => "waiting",
            AgentError::Failed(_) => "failed",
            AgentError::Internal(_) => "internal",
            AgentError::TimedOut(_) => "timed_out",
            AgentError::QuotaExceeded { .. } => "quota_exceeded",
            AgentError::EventTooLarge { .. } => "event_too_large",
            AgentError::Log(_) => "log",
        }
    }
}

/// What a finished agent reports for `RUN_FINISHED`.
#[derive(Debug, Default)]
pub struct AgentOutput {
    pub result: Option<Value>,
    pub usage: Option<Vec<TokenUsage>>,
}

/// Where a turn's agent stood when the turn started (a fresh turn starts at zero).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// The next script step to run.
    pub step: usize,
    /// Interrupts the step waits on; their decisions are read when the turn goes on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<String>,
    /// The last answer a person gave to a question (`{answer}` in later script steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The tool calls awaiting approval, in the order of `awaiting`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// An LLM agent's conversation so far and its unfinished tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Value>,
    /// The delegation this step is in the middle of, and where its child stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<Box<ChildCheckpoint>>,
}

/// A note to pin (§7).
#[derive(Debug, Clone, Copy)]
pub struct NotePin<'a> {
    pub kind: &'a str,
    pub tags: &'a [String],
    pub text: &'a str,
    /// Labels a reader needs clearance for.
    pub labels: &'a [String],
    /// Supersede the newest note of this kind.
    pub replaces: Option<&'a str>,
}

pub struct TurnContext {
    pub(super) log: EventLog,
    pub(super) health: Arc<AppendHealth>,
    pub(super) turn_pk: i64,
    /// The ownership epoch this runner was given; every append carries it.
    pub(super) epoch: i64,
    pub(super) thread_pk: i64,
    pub(super) turn_id: String,
    pub(super) agent: String,
    pub(super) user_text: String,
    pub(super) ai_label: Option<String>,
    pub(super) max_event_bytes: usize,
    pub(super) signal: watch::Receiver<TurnSignal>,
    pub(super) next_seq: i64,
    pub(super) next_note_no: i64,
    pub(super) counters: Counters,
    /// Ops held back to be committed together (a step that must not be half-done).
    pub(super) atomic: Option<Vec<WriteOp>>,
    pub(super) store: Arc<dyn Store>,
    pub(super) started_by: String,
    pub(super) client_tools: Vec<crate::protocol::input::Tool>,
    /// The client's `context` and `forwardedProps` of the run that started the turn.
    pub(super) client_input: ClientInput,
    /// At most this many steps are shown open at once (`limits.max_open_steps`, §3).
    pub(super) max_open_steps: usize,
    pub(super) open_messages: Vec<String>,
    /// Messages whose first content has not been sent yet (the AI label goes there).
    pub(super) unlabelled: Vec<String>,
    pub(super) open_tool_calls: Vec<String>,
    pub(super) open_steps: Vec<String>,
    /// Reasoning spans (`REASONING_START`) not yet ended, oldest first.
    pub(super) open_reasoning_spans: Vec<String>,
    /// Reasoning messages (`REASONING_MESSAGE_START`) not yet ended, oldest first.
    pub(super) open_reasoning_messages: Vec<String>,
    pub(super) last_message: Option<String>,
    /// The board with this turn's pins ([`TurnContext::board`]).
    pub(super) board: Option<Vec<Value>>,
    pub(super) tenant: String,
    pub(super) token_budget: Option<TokenBudget>,
    pub(super) agents: Arc<super::AgentRegistry>,
    /// Delegations under way, outermost first; the innermost child is the one running.
    pub(super) nest: Vec<NestFrame>,
    pub(super) cards: Arc<std::collections::HashMap<String, Value>>,
    /// The latest answer's message id and its text as the agent wrote it (for cards).
    pub(super) answer: (String, String),
    /// The engine's clock: event timestamps, interrupt expiries, token budget windows.
    pub(super) clock: Arc<dyn Clock>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) messages: u32,
    pub(super) tool_calls: u32,
    pub(super) reasoning_spans: u32,
    pub(super) reasoning_messages: u32,
    pub(super) activities: u32,
}

/// One reasoning block as the `openai` agent streams it: a span with one message in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reasoning {
    pub span_id: String,
    pub message_id: String,
}

/// What the client sent with the run that started the turn, besides messages and tools, kept
/// with the turn (`turns.client_input`) for an upstream agent (§9.3).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientInput {
    #[serde(default)]
    pub context: Vec<crate::protocol::input::Context>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
}

/// Everything a new [`TurnContext`] needs; built by the engine.
pub(crate) struct TurnSetup {
    pub log: EventLog,
    pub turn_pk: i64,
    pub epoch: i64,
    pub thread_pk: i64,
    pub turn_id: String,
    pub agent: String,
    pub user_text: String,
    pub ai_label: Option<String>,
    pub max_event_bytes: usize,
    pub signal: watch::Receiver<TurnSignal>,
    pub next_seq: i64,
    pub next_note_no: i64,
    pub store: Arc<dyn Store>,
    /// The person who started the turn (the default decider of its interrupts).
    pub started_by: String,
    /// Client-declared tools the turn admitted.
    pub client_tools: Vec<crate::protocol::input::Tool>,
    /// The client's `context` and `forwardedProps` of the run that started the turn.
    pub client_input: ClientInput,
    pub max_open_steps: usize,
    /// The tenant, and its token budget when it has one (§8).
    pub tenant: String,
    pub token_budget: Option<TokenBudget>,
    /// The configured agents, for delegation.
    pub agents: Arc<super::AgentRegistry>,
    /// Agents' card schemas, by agent name.
    pub cards: Arc<std::collections::HashMap<String, Value>>,
    pub clock: Arc<dyn Clock>,
}

/// How long a running turn waits for a database that is away before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

impl TurnContext {
    pub(crate) fn new(setup: TurnSetup) -> TurnContext {
        TurnContext {
            log: setup.log,
            health: Arc::new(AppendHealth::default()),
            turn_pk: setup.turn_pk,
            epoch: setup.epoch,
            thread_pk: setup.thread_pk,
            turn_id: setup.turn_id,
            agent: setup.agent,
            user_text: setup.user_text,
            ai_label: setup.ai_label.filter(|l| !l.is_empty()),
            max_event_bytes: setup.max_event_bytes,
            signal: setup.signal,
            next_seq: setup.next_seq,
            next_note_no: setup.next_note_no,
            counters: Counters::default(),
            atomic: None,
            store: setup.store,
            started_by: setup.started_by,
            client_tools: setup.client_tools,
            client_input: setup.client_input,
            max_open_steps: setup.max_open_steps,
            open_messages: Vec::new(),
            unlabelled: Vec::new(),
            open_tool_calls: Vec::new(),
            open_steps: Vec::new(),
            open_reasoning_spans: Vec::new(),
            open_reasoning_messages: Vec::new(),
            last_message: None,
            board: None,
            tenant: setup.tenant,
            token_budget: setup.token_budget,
            agents: setup.agents,
            nest: Vec::new(),
            cards: setup.cards,
            answer: (String::new(), String::new()),
            clock: setup.clock,
        }
    }

    /// Milliseconds since the epoch, by the engine's clock (what an agent should stamp with).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The turn's public id (message ids and event ids are named after it).
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The words of the user message that started the turn.
    /// What the running agent was asked: the user's message, or a delegation's input.
    pub fn user_text(&self) -> &str {
        self.nest.last().map_or(&self.user_text, |frame| &frame.input)
    }

    pub fn is_cancelled(&self) -> bool {
        *self.signal.borrow() == TurnSignal::Cancel
    }

    /// Fails once the turn is cancelled or must stop on this instance.
    pub fn check_cancelled(&self) -> Result<(), AgentError> {
        match *self.signal.borrow() {
            TurnSignal::Run => Ok(()),
            TurnSignal::Cancel => Err(AgentError::Cancelled),
            TurnSignal::HandOver | TurnSignal::Lost => Err(AgentError::Stopped),
        }
    }

    /// Sleeps, waking early (with the reason) if the turn is cancelled or must stop.
    pub async fn sleep(&mut self, duration: Duration) -> Result<(), AgentError> {
        self.check_cancelled()?;
        let mut signal = self.signal.clone();
        tokio::select! {
            _ = tokio::time::sleep(duration) => Ok(()),
            _ = signal.wait_for(|s| *s != TurnSignal::Run) => self.check_cancelled(),
        }
    }

    /// Holds back what the agent says until [`TurnContext::commit_step`], so a step and its
    /// checkpoint reach the log in one transaction (a takeover never repeats a finished tool
    /// call, nor finds half of one).
    pub fn begin_step(&mut self) {
        self.atomic.get_or_insert_with(Vec::new);
    }

    /// Commits what the step said together with the checkpoint after it.
    ///
    /// Waits until they are committed: the next step may act on the world (call a tool, ask a
    /// model), and a crash before this step is durable must not make a takeover repeat this
    /// step's work after the next one has started.
    pub async fn commit_step(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let mut ops = self.atomic.take().unwrap_or_default();
        ops.push(self.checkpoint_op(checkpoint)?);
        self.log.append_committed(self.turn_pk, self.epoch, ops, &self.health).await?;
        Ok(())
    }

    /// Appends what the step said together with the checkpoint after it, as one write, without
    /// waiting for the commit: a crash keeps both or neither, so the checkpoint always says
    /// exactly how far the log got (an upstream stream's position, event by event).
    pub async fn append_step(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let mut ops = self.atomic.take().unwrap_or_default();
        ops.push(self.checkpoint_op(checkpoint)?);
        self.log.append(self.turn_pk, self.epoch, ops, &self.health).await?;
        Ok(())
    }

    async fn append(&mut self, ops: Vec<WriteOp>) -> Result<(), AgentError> {
        match &mut self.atomic {
            Some(held) => held.extend(ops),
            None => self.log.append(self.turn_pk, self.epoch, ops, &self.health).await?,
        }
        Ok(())
    }

    /// Appends one event to the turn's log (committed in the writer's next batch).
    pub async fn emit(&mut self, event: Event) -> Result<(), AgentError> {
        self.check_stopped()?;
        let op = self.event_op(event)?;
        self.append(vec![op]).await
    }

    /// Appends several events as one write: the log holds all of them or none (a run's opening
    /// `RUN_STARTED` and `STATE_SNAPSHOT` must never be cut apart by a crash).
    pub(crate) async fn emit_together(&mut self, events: Vec<Event>) -> Result<(), AgentError> {
        self.check_stopped()?;
        let mut ops = Vec::with_capacity(events.len());
        for event in events {
            ops.push(self.event_op(event)?);
        }
        self.append(ops).await
    }

    /// A turn that must leave this instance says nothing more (a cancelled one still closes).
    pub(super) fn check_stopped(&self) -> Result<(), AgentError> {
        match *self.signal.borrow() {
            TurnSignal::HandOver | TurnSignal::Lost => Err(AgentError::Stopped),
            _ => Ok(()),
        }
    }

    pub(super) fn event_op(&mut self, event: Event) -> Result<WriteOp, AgentError> {
        self.envelope_op(Envelope::new(event, self.now_ms()))
    }

    pub(super) fn envelope_op(&mut self, envelope: Envelope) -> Result<WriteOp, AgentError> {
        if self.health.is_failed() {
            // The log refused an append of this turn (another runner holds it now) or could not
            // commit one: write nothing more, so the log never gets a hole or a second writer.
            return Err(AgentError::Stopped);
        }
        let kind = super::log_events::kind_of(&envelope.event);
        let at_ms = envelope.timestamp.unwrap_or_else(|| self.now_ms());
        let body = serde_json::to_string(&envelope)
            .map_err(|error| AgentError::Failed(format!("an event could not be encoded: {error}")))?;
        // A secret the gateway holds is never recorded, so never shown: not even when a tool,
        // an upstream or a model echoes it (§2 credentials).
        let body = crate::redact::mask_secrets_owned(body).into_bytes();
        if body.len() > self.max_event_bytes {
            return Err(AgentError::EventTooLarge { size: body.len(), limit: self.max_event_bytes });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let event = StoredEvent { seq, kind, body: Bytes::from(body), at_ms };
        Ok(WriteOp::Event { turn: self.turn_pk, event })
    }

    /// Records where the agent stands, so the turn can continue from here after a restart.
    pub async fn checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let op = self.checkpoint_op(checkpoint)?;
        self.append(vec![op]).await
    }

    pub(super) fn checkpoint_op(&self, checkpoint: &Checkpoint) -> Result<WriteOp, AgentError> {
        // A child's checkpoint is saved inside its parents', outermost first.
        let mut nested = checkpoint.clone();
        for frame in self.nest.iter().rev() {
            let mut parent = frame.parent.clone();
            parent.child = Some(Box::new(ChildCheckpoint {
                id: frame.id.clone(),
                agent: frame.agent.clone(),
                input: frame.input.clone(),
                checkpoint: nested,
                reopen: frame.reopen,
            }));
            nested = parent;
        }
        let checkpoint = serde_json::to_string(&nested)
            .map_err(|error| AgentError::Failed(format!("checkpoint could not be encoded: {error}")))?;
        let checkpoint = crate::redact::mask_secrets_owned(checkpoint);
        Ok(WriteOp::Checkpoint { turn: self.turn_pk, checkpoint })
    }

    /// Opens an assistant text message and returns its id (`<turn>:m<n>`).
    pub async fn text_start(&mut self) -> Result<String, AgentError> {
        self.counters.messages += 1;
        let message_id = format!("{}:m{}", self.turn_id, self.counters.messages);
        self.emit(Event::TextMessageStart {
            message_id: message_id.clone(),
            role: Some(TextRole::Assistant),
            name: None,
            subagent_run_id: None,
        })
        .await?;
        self.open_messages.push(message_id.clone());
        self.unlabelled.push(message_id.clone());
        self.last_message = Some(message_id.clone());
        Ok(message_id)
    }

    /// Streams a piece of an open message; the tenant's AI label leads its first piece.
    pub async fn text_delta(&mut self, message_id: &str, delta: &str) -> Result<(), AgentError> {
        if self.answer.0 != message_id {
            self.answer = (message_id.to_string(), String::new());
        }
        self.answer.1.push_str(delta);
        let delta = match self.unlabelled.iter().position(|m| m == message_id) {
            Some(index) => {
                self.unlabelled.swap_remove(index);
                match &self.ai_label {
                    Some(label) => format!("{label}{delta}"),
                    None => delta.to_string(),
                }
            }
            None => delta.to_string(),
        };
        self.emit(Event::TextMessageContent { message_id: message_id.to_string(), delta, subagent_run_id: None }).await
    }

    pub async fn text_end(&mut self, message_id: &str) -> Result<(), AgentError> {
        self.open_messages.retain(|m| m != message_id);
        self.unlabelled.retain(|m| m != message_id);
        self.emit(Event::TextMessageEnd { message_id: message_id.to_string(), subagent_run_id: None }).await
    }

    /// Opens a reasoning span (`REASONING_START`) and returns its id (`<turn>:reasoning<n>`).
    pub async fn reasoning_span_start(&mut self) -> Result<String, AgentError> {
        self.counters.reasoning_spans += 1;
        let span_id = format!("{}:reasoning{}", self.turn_id, self.counters.reasoning_spans);
        self.emit(Event::ReasoningStart { message_id: span_id.clone(), subagent_run_id: None }).await?;
        self.open_reasoning_spans.push(span_id.clone());
        Ok(span_id)
    }

    /// Opens a reasoning message (`REASONING_MESSAGE_START`, role `reasoning`) and returns its
    /// id (`<turn>:thought<n>`). It is not an assistant message: it is never part of the
    /// conversation, so it does not become the parent of later tool calls.
    pub async fn reasoning_message_start(&mut self) -> Result<String, AgentError> {
        self.counters.reasoning_messages += 1;
        let message_id = format!("{}:thought{}", self.turn_id, self.counters.reasoning_messages);
        self.emit(Event::ReasoningMessageStart {
            message_id: message_id.clone(),
            role: "reasoning".into(),
            subagent_run_id: None,
        })
        .await?;
        self.open_reasoning_messages.push(message_id.clone());
        Ok(message_id)
    }

    /// Streams a piece of an open reasoning message (no AI label: it is not an answer).
    pub async fn reasoning_delta(&mut self, message_id: &str, delta: &str) -> Result<(), AgentError> {
        self.emit(Event::ReasoningMessageContent {
            message_id: message_id.to_string(),
            delta: delta.to_string(),
            subagent_run_id: None,
        })
        .await
    }

    pub async fn reasoning_message_end(&mut self, message_id: &str) -> Result<(), AgentError> {
        self.open_reasoning_messages.retain(|m| m != message_id);
        self.emit(Event::ReasoningMessageEnd { message_id: message_id.to_string(), subagent_run_id: None }).await
    }

    pub async fn reasoning_span_end(&mut self, span_id: &str) -> Result<(), AgentError> {
        self.open_reasoning_spans.retain(|s| s != span_id);
        self.emit(Event::ReasoningEnd { message_id: span_id.to_string(), subagent_run_id: None }).await
    }

    /// A new activity message id (`<turn>:a<n>`), for `ACTIVITY_SNAPSHOT` / `ACTIVITY_DELTA`.
    /// Activity messages share the id space of text messages on the client, hence their own
    /// marker.
    pub fn activity_id(&mut self) -> String {
        self.counters.activities += 1;
        format!("{}:a{}", self.turn_id, self.counters.activities)
    }

    /// A span with one reasoning message open in it: what a model's reasoning deltas go into.
    pub async fn reasoning_open(&mut self) -> Result<Reasoning, AgentError> {
        let span_id = self.reasoning_span_start().await?;
        let message_id = self.reasoning_message_start().await?;
        Ok(Reasoning { span_id, message_id })
    }

    /// Ends the message and then its span, in the order the protocol nests them.
    pub async fn reasoning_close(&mut self, reasoning: &Reasoning) -> Result<(), AgentError> {
        self.reasoning_message_end(&reasoning.message_id).await?;
        self.reasoning_span_end(&reasoning.span_id).await
    }

    /// A whole tool call with its result: `TOOL_CALL_START/ARGS/END` then `TOOL_CALL_RESULT`.
    /// Returns the call's id (`<turn>:c<n>`).
    pub async fn tool_call(&mut self, name: &str, arguments: &str, result: &str) -> Result<String, AgentError> {
        let call_id = self.tool_call_start(name, arguments).await?;
        self.tool_result(&call_id, result).await?;
        Ok(call_id)
    }

    /// The call itself, `TOOL_CALL_START/ARGS/END`, without its result (yet). Returns its id.
    pub async fn tool_call_start(&mut self, name: &str, arguments: &str) -> Result<String, AgentError> {
        let call_id = self.tool_call_open(name).await?;
        self.tool_call_args(&call_id, arguments).await?;
        self.tool_call_close(&call_id).await?;
        Ok(call_id)
    }

    /// Opens a tool call whose arguments will stream (`TOOL_CALL_START`); returns its id.
    pub async fn tool_call_open(&mut self, name: &str) -> Result<String, AgentError> {
        self.counters.tool_calls += 1;
        let call_id = format!("{}:c{}", self.turn_id, self.counters.tool_calls);
        self.emit(Event::ToolCallStart {
            tool_call_id: call_id.clone(),
            tool_call_name: name.to_string(),
            parent_message_id: self.last_message.clone(),
            subagent_run_id: None,
        })
        .await?;
        self.open_tool_calls.push(call_id.clone());
        Ok(call_id)
    }

    pub async fn tool_call_args(&mut self, call_id: &str, delta: &str) -> Result<(), AgentError> {
        self.emit(Event::ToolCallArgs {
            tool_call_id: call_id.to_string(),
            delta: delta.to_string(),
            subagent_run_id: None,
        })
        .await
    }

    pub async fn tool_call_close(&mut self, call_id: &str) -> Result<(), AgentError> {
        self.open_tool_calls.retain(|c| c != call_id);
        self.emit(Event::ToolCallEnd { tool_call_id: call_id.to_string(), subagent_run_id: None }).await
    }

    /// A call's result, as a tool message named after the call (`<turn>:r<n>` for `<turn>:c<n>`).
    pub async fn tool_result(&mut self, call_id: &str, result: &str) -> Result<(), AgentError> {
        let message_id = match call_id.rsplit_once(":c") {
            Some((turn, n)) => format!("{turn}:r{n}"),
            None => format!("{call_id}:r"),
        };
        self.emit(Event::ToolCallResult {
            message_id,
            tool_call_id: call_id.to_string(),
            content: ToolResultContent::Text(result.to_string()),
            role: Some("tool".into()),
            subagent_run_id: None,
        })
        .await?;
        // The answer after a tool call is a new message.
        self.last_message = None;
        Ok(())
    }

    /// Pins a note to the thread's board: the `STATE_DELTA` that adds it (or puts it in the
    /// place of the note it supersedes), and the note itself, in the same batch.
    pub async fn pin_note(&mut self, pin: NotePin<'_>) -> Result<Value, AgentError> {
        let board = self.board().await?;
        let supersedes = pin
            .replaces
            .and_then(|kind| board.iter().rev().find(|n| n["kind"].as_str() == Some(kind)))
            .map(|old| old["id"].clone())
            .unwrap_or(Value::Null);
        let note_no = self.next_note_no;
        self.next_note_no += 1;
        let note = json!({
            "id": note_no.to_string(),
            "kind": pin.kind,
            "tags": pin.tags,
            "text": pin.text,
            "turn": self.turn_id,
            "agent": self.agent,
            "createdAt": iso8601(self.now_ms()),
            "supersedes": supersedes,
            // Every turn started through AG-UI is tainted: its text came from an app (§8).
            "tainted": true,
            "taintedBecause": "the turn's text came from an app through AG-UI",
            "labels": pin.labels,
        });
        let delta = super::board::pin_patch(&board, &note).map_err(AgentError::Failed)?;
        let delta = self.event_op(Event::StateDelta { delta, subagent_run_id: None })?;
        let pin = WriteOp::PinNote { thread: self.thread_pk, note_no, body: note.to_string() };
        self.append(vec![delta, pin]).await?;
        self.board = Some(super::board::assemble(board.into_iter().chain([note.clone()])));
        Ok(note)
    }

    pub async fn step_start(&mut self, name: &str) -> Result<(), AgentError> {
        self.emit(Event::StepStarted { step_name: name.to_string(), subagent_run_id: None }).await?;
        self.open_steps.push(name.to_string());
        Ok(())
    }

    pub async fn step_finish(&mut self, name: &str) -> Result<(), AgentError> {
        self.open_steps.retain(|s| s != name);
        self.emit(Event::StepFinished { step_name: name.to_string(), subagent_run_id: None }).await
    }

    /// The client-declared tools this turn may offer its model.
    pub fn client_tools(&self) -> &[crate::protocol::input::Tool] {
        &self.client_tools
    }

    /// The client's `context` and `forwardedProps` of the run that started the turn.
    pub fn client_input(&self) -> &ClientInput {
        &self.client_input
    }

    /// How many steps are shown open now, and how many may be (`limits.max_open_steps`).
    pub fn open_step_room(&self) -> (usize, usize) {
        (self.open_steps.len(), self.max_open_steps)
    }

    /// The sequence number the turn's next event gets: where what the agent says next begins.
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// The thread's conversation as the log holds it just before event `before_seq` of this
    /// turn: earlier turns whole, this turn's user message, and what the turn said before that
    /// event (its answers, tool calls and results, the client's tool results).
    pub async fn conversation_before(&self, before_seq: i64) -> Result<Vec<crate::protocol::InputMessage>, AgentError> {
        self.patiently("the thread could not be read", || {
            super::conversation::load_at(self.store.as_ref(), self.thread_pk, self.turn_pk, before_seq)
        })
        .await
    }

    /// The checkpoints of the thread's earlier turns of this turn's agent, newest first (an
    /// agent that keeps what an upstream last said across turns reads it there).
    pub async fn earlier_checkpoints(&self) -> Result<Vec<String>, AgentError> {
        let turns = self.patiently("the thread could not be read", || self.store.thread_turns(self.thread_pk)).await?;
        Ok(turns
            .into_iter()
            .rev()
            .filter(|turn| turn.pk != self.turn_pk && turn.agent == self.agent)
            .filter_map(|turn| turn.checkpoint)
            .collect())
    }

    /// The thread's editable state (§7): the keys clients wrote, as an object.
    pub async fn editable_state(&self) -> Result<serde_json::Map<String, Value>, AgentError> {
        let stored = self.patiently("the thread could not be read", || self.store.thread_state(self.thread_pk)).await?;
        Ok(super::board::stored_state(stored.as_deref()))
    }

    /// Reads (or records) something for the running turn, waiting out a database that is only
    /// briefly away (a restart, a failover): a turn must not fail because one read met a
    /// dropped connection. Gives up after [`PATIENCE`], or at once on any other error; stops
    /// waiting when the turn must stop.
    pub(crate) async fn patiently<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, AgentError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_transient() && tokio::time::Instant::now() + backoff.peek() < deadline => {
                    tracing::warn!(turn = %self.turn_id, %error, what, "the database is away; retrying");
                    self.check_cancelled()?;
                    let mut signal = self.signal.clone();
                    tokio::select! {
                        _ = backoff.wait() => {}
                        _ = signal.wait_for(|s| *s != TurnSignal::Run) => self.check_cancelled()?,
                    }
                }
                Err(error) => return Err(AgentError::Failed(format!("{what}: {error}"))),
            }
        }
    }

    /// The thread's board as it stands: read once, then kept here as this turn pins notes (its
    /// pins may not be committed yet, and only the thread's one turn pins).
    async fn board(&mut self) -> Result<Vec<Value>, AgentError> {
        if self.board.is_none() {
            let notes = self.patiently("the board could not be read", || self.store.notes(self.thread_pk)).await?;
            self.board = Some(super::board::from_stored(&notes));
        }
        Ok(self.board.clone().unwrap_or_default())
    }

    /// The thread's tenant and the client's thread id.
    pub async fn thread(&self) -> Result<(String, String), AgentError> {
        match self.patiently("the thread could not be read", || self.store.thread_by_pk(self.thread_pk)).await? {
            Some(thread) => Ok((thread.tenant, thread.thread_id)),
            None => Err(AgentError::Failed("the turn's thread is gone".into())),
        }
    }

    /// The thread's earlier turns as AG-UI messages (the gateway's record, never the client's).
    pub async fn history(&self) -> Result<Vec<crate::protocol::InputMessage>, AgentError> {
        self.patiently("the thread could not be read", || {
            super::conversation::load_before(self.store.as_ref(), self.thread_pk, &self.turn_id)
        })
        .await
    }

    pub(crate) fn set_next_note_no(&mut self, next: i64) {
        self.next_note_no = next;
    }

    /// Whether the log holds nothing yet (a turn lost before its first batch committed).
    pub(crate) fn is_fresh(&self) -> bool {
        self.next_seq == 1
    }
}
