//! [`TurnContext`]: what an agent holds while it answers a turn. Everything an agent says goes
//! through it into the event log; it numbers the events, names messages, tool calls and notes
//! after the turn, and remembers what is open so a cancelled turn is closed properly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::interrupts::{describe_deciders, Deciders, Waiting, WaitingEvent};
use super::log::{AppendHealth, EventLog, LogError};
use crate::protocol::events::{Envelope, TextRole, ToolResultContent};
use crate::protocol::Interrupt;
use crate::protocol::{iso8601, now_ms, Event, RunOutcome, TokenUsage};
use crate::store::{EventKind, InterruptRow, Store, StoredEvent, TurnStatus, WriteOp};

/// The `CUSTOM` name under which a waiting event is logged; it is never sent as such (each
/// caller sees it rendered per §5.2).
pub const WAITING_EVENT: &str = "gateway.waiting-event";

/// The `CUSTOM` name under which a wait for client tool results is logged (rendered as
/// `RUN_FINISHED` with `pendingToolCallIds`).
pub const CLIENT_WAIT_EVENT: &str = "gateway.client-wait-event";
/// A card: an answer that matched its agent's card schema.
pub const CARD_EVENT: &str = "gateway.card";

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

/// A child turn under way inside a delegating step (§3 steps).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ChildCheckpoint {
    /// The child turn's id: its `STEP_STARTED`/`STEP_FINISHED` name and `gateway/turn`.
    pub id: String,
    pub agent: String,
    /// What the child was asked (its `{input}`).
    pub input: String,
    pub checkpoint: Checkpoint,
    /// Its step was finished when the turn waited; the resuming run starts it again.
    #[serde(default)]
    pub reopen: bool,
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

/// A fresh interrupt id (`int_…`).
pub fn new_interrupt_id() -> String {
    format!("int_{}", uuid::Uuid::new_v4().simple())
}

/// A person's decision on one interrupt the turn waited for.
#[derive(Debug, Clone)]
pub struct Decided {
    pub interrupt_id: String,
    /// The tool call the interrupt was opened for, if any (the gateway's id).
    pub tool_call_id: Option<String>,
    /// What was decided: the resume payload (`approved`, `answer`, `editedArgs`, …), or
    /// `{approved: false, expired: true}` / `{approved: false, cancelled: true}`.
    pub decision: Value,
}

/// An interrupt an agent opens (§5.1).
#[derive(Debug, Clone)]
pub struct InterruptSpec {
    /// Its id ([`new_interrupt_id`]), chosen by the agent so its checkpoint can say what each
    /// interrupt stands for and a decision is applied by id.
    pub id: String,
    /// `tool_call`, `input_required` or `confirmation`.
    pub reason: String,
    pub message: String,
    pub tool_call_id: Option<String>,
    pub response_schema: Value,
    pub ttl_ms: i64,
    pub deciders: Deciders,
    pub four_eyes: bool,
    /// Arguments of the call, for callers with the content permission.
    pub details: Option<Value>,
    pub choices: Vec<String>,
}

pub struct TurnContext {
    log: EventLog,
    health: Arc<AppendHealth>,
    turn_pk: i64,
    /// The ownership epoch this runner was given; every append carries it.
    epoch: i64,
    thread_pk: i64,
    turn_id: String,
    agent: String,
    user_text: String,
    ai_label: Option<String>,
    max_event_bytes: usize,
    signal: watch::Receiver<TurnSignal>,
    next_seq: i64,
    next_note_no: i64,
    counters: Counters,
    /// Ops held back to be committed together (a step that must not be half-done).
    atomic: Option<Vec<WriteOp>>,
    store: Arc<dyn Store>,
    started_by: String,
    client_tools: Vec<crate::protocol::input::Tool>,
    open_messages: Vec<String>,
    /// Messages whose first content has not been sent yet (the AI label goes there).
    unlabelled: Vec<String>,
    open_tool_calls: Vec<String>,
    open_steps: Vec<String>,
    last_message: Option<String>,
    /// The board with this turn's pins ([`TurnContext::board`]).
    board: Option<Vec<Value>>,
    tenant: String,
    token_budget: Option<TokenBudget>,
    agents: Arc<super::AgentRegistry>,
    /// Delegations under way, outermost first; the innermost child is the one running.
    nest: Vec<NestFrame>,
    cards: Arc<std::collections::HashMap<String, Value>>,
    /// The latest answer's message id and its text as the agent wrote it (for cards).
    answer: (String, String),
}

#[derive(Default)]
struct Counters {
    messages: u32,
    tool_calls: u32,
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
    /// The tenant, and its token budget when it has one (§8).
    pub tenant: String,
    pub token_budget: Option<TokenBudget>,
    /// The configured agents, for delegation.
    pub agents: Arc<super::AgentRegistry>,
    /// Agents' card schemas, by agent name.
    pub cards: Arc<std::collections::HashMap<String, Value>>,
}

/// How long a running turn waits for a database that is away before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// How deep delegations may nest (an agent delegating to one that delegates…).
const MAX_DELEGATION_DEPTH: usize = 4;

/// A delegation under way: where the delegating agent stands, and the child.
#[derive(Debug, Clone)]
struct NestFrame {
    parent: Checkpoint,
    id: String,
    agent: String,
    input: String,
    /// Its step was finished for a wait: the run that resumes it starts it again.
    reopen: bool,
}

/// A tenant's token budget: `limit` tokens per `period_secs` (fixed periods from the epoch).
#[derive(Debug, Clone, Copy)]
pub struct TokenBudget {
    pub limit: u64,
    pub period_secs: u64,
}

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
            open_messages: Vec::new(),
            unlabelled: Vec::new(),
            open_tool_calls: Vec::new(),
            open_steps: Vec::new(),
            last_message: None,
            board: None,
            tenant: setup.tenant,
            token_budget: setup.token_budget,
            agents: setup.agents,
            nest: Vec::new(),
            cards: setup.cards,
            answer: (String::new(), String::new()),
        }
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

    /// Runs `agent` as a child turn inside this one (§3 steps): `STEP_STARTED`, the child's
    /// events (its text stays inside the step), `STEP_FINISHED`, all named by the child turn's
    /// id. The child's checkpoints are saved inside `parent` (where the delegating agent
    /// stands), so a takeover or a resume re-enters the child where it was; its interrupts are
    /// the parent run's, with `gateway/turn` naming the child.
    ///
    /// A boxed future: an agent's run awaits a delegation which awaits an agent's run.
    pub fn delegate<'a>(
        &'a mut self,
        agent: &'a str,
        input: String,
        parent: Checkpoint,
        resumed: Option<ChildCheckpoint>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), AgentError>> + Send + 'a>> {
        Box::pin(self.delegate_now(agent, input, parent, resumed))
    }

    async fn delegate_now(
        &mut self,
        agent: &str,
        input: String,
        parent: Checkpoint,
        resumed: Option<ChildCheckpoint>,
    ) -> Result<(), AgentError> {
        if self.nest.len() >= MAX_DELEGATION_DEPTH {
            return Err(AgentError::Failed(format!("delegations nest deeper than {MAX_DELEGATION_DEPTH}")));
        }
        let child = self
            .agents
            .get(agent)
            .cloned()
            .ok_or_else(|| AgentError::Failed(format!("there is no agent '{agent}' to delegate to")))?;
        let (id, checkpoint, input) = match resumed {
            Some(resumed) if resumed.reopen => {
                // A new run after a wait: the step starts again in it.
                self.step_start(&resumed.id).await?;
                (resumed.id, resumed.checkpoint, resumed.input)
            }
            Some(resumed) => {
                // Taken over: its STEP_STARTED is in this run's log already.
                self.open_steps.push(resumed.id.clone());
                (resumed.id, resumed.checkpoint, resumed.input)
            }
            None => {
                let id = crate::ids::new_turn_id();
                self.step_start(&id).await?;
                (id, Checkpoint::default(), input)
            }
        };
        self.nest.push(NestFrame { parent, id: id.clone(), agent: agent.to_string(), input, reopen: false });
        let outcome = child.run(self, checkpoint).await;
        self.nest.pop();
        outcome?;
        self.emit_card(agent, &id).await?;
        self.step_finish(&id).await
    }

    /// The text of the latest answer, as its agent wrote it (a delegated child's, after
    /// [`TurnContext::delegate`]).
    pub fn last_answer(&self) -> &str {
        &self.answer.1
    }

    /// `CUSTOM gateway.card {"turn", "card"}` when the agent declares a card schema and its
    /// last answer is JSON that matches it (§3).
    async fn emit_card(&mut self, agent: &str, turn: &str) -> Result<(), AgentError> {
        let Some(schema) = self.cards.get(agent) else { return Ok(()) };
        let Ok(card) = serde_json::from_str::<Value>(self.answer.1.trim()) else { return Ok(()) };
        let matches = jsonschema::validator_for(schema).is_ok_and(|validator| validator.is_valid(&card));
        if !matches {
            return Ok(());
        }
        self.emit(Event::Custom {
            name: CARD_EVENT.into(),
            value: json!({ "turn": turn, "card": card }),
            subagent_run_id: None,
        })
        .await
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
    pub async fn commit_step(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
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

    /// A turn that must leave this instance says nothing more (a cancelled one still closes).
    fn check_stopped(&self) -> Result<(), AgentError> {
        match *self.signal.borrow() {
            TurnSignal::HandOver | TurnSignal::Lost => Err(AgentError::Stopped),
            _ => Ok(()),
        }
    }

    fn event_op(&mut self, event: Event) -> Result<WriteOp, AgentError> {
        self.envelope_op(Envelope::new(event, now_ms()))
    }

    fn envelope_op(&mut self, envelope: Envelope) -> Result<WriteOp, AgentError> {
        if self.health.is_failed() {
            // The log refused an append of this turn (another runner holds it now) or could not
            // commit one: write nothing more, so the log never gets a hole or a second writer.
            return Err(AgentError::Stopped);
        }
        let kind = match &envelope.event {
            Event::RunStarted { .. } => EventKind::RunStarted,
            Event::RunFinished { .. } => EventKind::RunFinished,
            Event::RunError { .. } => EventKind::RunError,
            Event::StateSnapshot { .. } => EventKind::StateSnapshot,
            Event::Custom { name, .. } if name == WAITING_EVENT => EventKind::Waiting,
            Event::Custom { name, .. } if name == CLIENT_WAIT_EVENT => EventKind::ClientWait,
            _ => EventKind::Plain,
        };
        let at_ms = envelope.timestamp.unwrap_or_else(now_ms);
        let body = serde_json::to_vec(&envelope)
            .map_err(|error| AgentError::Failed(format!("an event could not be encoded: {error}")))?;
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

    fn checkpoint_op(&self, checkpoint: &Checkpoint) -> Result<WriteOp, AgentError> {
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
            "createdAt": iso8601(now_ms()),
            "supersedes": supersedes,
            // Every turn started through AG-UI is tainted: its text came from an app (§8).
            "tainted": true,
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

    /// Closes whatever is open (newest first), as `RUN_FINISHED` requires.
    async fn close_open_items(&mut self) -> Result<(), AgentError> {
        for call in std::mem::take(&mut self.open_tool_calls).into_iter().rev() {
            self.emit(Event::ToolCallEnd { tool_call_id: call, subagent_run_id: None }).await?;
        }
        for message in std::mem::take(&mut self.open_messages).into_iter().rev() {
            self.emit(Event::TextMessageEnd { message_id: message, subagent_run_id: None }).await?;
        }
        for step in std::mem::take(&mut self.open_steps).into_iter().rev() {
            self.emit(Event::StepFinished { step_name: step, subagent_run_id: None }).await?;
        }
        Ok(())
    }

    /// Picks up a turn another instance (or an earlier run of this one) left unfinished: the
    /// numbering continues after its log, and what it left open is known.
    pub(crate) fn resume_from_log(&mut self, events: &[StoredEvent]) {
        let count = |id: &str, marker: &str| -> u32 {
            id.strip_prefix(self.turn_id.as_str())
                .and_then(|rest| rest.strip_prefix(marker))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        for stored in events {
            self.next_seq = self.next_seq.max(stored.seq + 1);
            let Ok(envelope) = serde_json::from_slice::<Envelope>(&stored.body) else { continue };
            match envelope.event {
                Event::TextMessageStart { message_id, .. } => {
                    self.counters.messages = self.counters.messages.max(count(&message_id, ":m"));
                    self.open_messages.push(message_id.clone());
                    self.last_message = Some(message_id);
                }
                Event::TextMessageEnd { message_id, .. } => self.open_messages.retain(|m| *m != message_id),
                Event::ToolCallStart { tool_call_id, .. } => {
                    self.counters.tool_calls = self.counters.tool_calls.max(count(&tool_call_id, ":c"));
                    self.open_tool_calls.push(tool_call_id);
                }
                Event::ToolCallEnd { tool_call_id, .. } => self.open_tool_calls.retain(|c| *c != tool_call_id),
                Event::ToolCallResult { .. } => self.last_message = None,
                Event::StepStarted { step_name, .. } => self.open_steps.push(step_name),
                Event::StepFinished { step_name, .. } => self.open_steps.retain(|s| *s != step_name),
                _ => {}
            }
        }
    }

    /// Closes the messages and tool calls an interrupted owner left open, where the log stopped
    /// (§4.6): the step that was saying them runs again and gives its answer whole, as a new
    /// message. Steps stay open: the work they stand for goes on.
    pub(crate) async fn close_cut_items(&mut self) -> Result<(), AgentError> {
        for call in std::mem::take(&mut self.open_tool_calls) {
            self.emit(Event::ToolCallEnd { tool_call_id: call, subagent_run_id: None }).await?;
        }
        for message in std::mem::take(&mut self.open_messages) {
            self.emit(Event::TextMessageEnd { message_id: message, subagent_run_id: None }).await?;
        }
        self.unlabelled.clear();
        self.last_message = None;
        Ok(())
    }

    /// Opens interrupts and ends the agent's work for now: the interrupts, the waiting event and
    /// the checkpoint (which names them) commit together, and the turn is marked waiting. The
    /// agent runs again from `checkpoint` once every interrupt is decided or expired.
    pub async fn wait_for(&mut self, specs: Vec<InterruptSpec>, mut checkpoint: Checkpoint) -> AgentError {
        match self.open_interrupts(specs, &mut checkpoint).await {
            Ok(()) => AgentError::Waiting,
            Err(error) => error,
        }
    }

    async fn open_interrupts(
        &mut self,
        specs: Vec<InterruptSpec>,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), AgentError> {
        self.check_stopped()?;
        let now = now_ms();
        let mut rows = Vec::new();
        let mut waiting = Vec::new();
        for spec in specs {
            let id = spec.id.clone();
            let mut metadata = serde_json::Map::new();
            metadata.insert("gateway/kind".into(), json!(spec.reason));
            // A delegated child's interrupt names the child turn.
            let asking = self.nest.last().map_or(&self.turn_id, |frame| &frame.id);
            metadata.insert("gateway/turn".into(), json!(asking));
            if let Some(details) = spec.details {
                metadata.insert("gateway/details".into(), details);
            }
            if !spec.choices.is_empty() {
                metadata.insert("gateway/choices".into(), json!(spec.choices));
            }
            metadata.insert("gateway/deciders".into(), json!(describe_deciders(&spec.deciders, spec.four_eyes)));
            let message = match (&self.ai_label, spec.reason.as_str()) {
                (Some(label), "input_required") => format!("{label}{}", spec.message),
                _ => spec.message,
            };
            let interrupt = Interrupt {
                id: id.clone(),
                reason: spec.reason.clone(),
                message: Some(message),
                tool_call_id: spec.tool_call_id,
                response_schema: Some(spec.response_schema),
                expires_at: Some(iso8601(now + spec.ttl_ms)),
                metadata: Some(metadata),
                subagent_run_id: None,
            };
            let shown = serde_json::to_string(&interrupt)
                .map_err(|e| AgentError::Failed(format!("an interrupt could not be encoded: {e}")))?;
            rows.push(InterruptRow {
                id: id.clone(),
                thread: self.thread_pk,
                turn: self.turn_pk,
                shown,
                deciders: json!(spec.deciders).to_string(),
                four_eyes: spec.four_eyes,
                started_by: self.started_by.clone(),
                expires_at_ms: now + spec.ttl_ms,
                status: "open".into(),
                decision: None,
                decided_by: None,
                decided_seq: None,
                created_at_ms: now,
            });
            waiting.push(Waiting {
                interrupt,
                deciders: spec.deciders,
                four_eyes: spec.four_eyes,
                started_by: self.started_by.clone(),
                turn: self.turn_id.clone(),
            });
            checkpoint.awaiting.push(id);
        }
        let mut ops = self.atomic.take().unwrap_or_default();
        ops.extend(self.close_steps_for_wait()?);
        let marker = self.event_op(Event::Custom {
            name: WAITING_EVENT.into(),
            value: json!(WaitingEvent { interrupts: waiting }),
            subagent_run_id: None,
        })?;
        ops.extend(rows.into_iter().map(WriteOp::OpenInterrupt));
        ops.push(marker);
        ops.push(self.checkpoint_op(checkpoint)?);
        self.log.append(self.turn_pk, self.epoch, ops, &self.health).await?;
        Ok(())
    }

    /// The run ends at a wait, and a run ends with no step open: the delegations' steps finish
    /// here, innermost first, and start again in the run that resumes them.
    fn close_steps_for_wait(&mut self) -> Result<Vec<WriteOp>, AgentError> {
        let mut ops = Vec::new();
        for step in std::mem::take(&mut self.open_steps).into_iter().rev() {
            ops.push(self.event_op(Event::StepFinished { step_name: step, subagent_run_id: None })?);
        }
        for frame in &mut self.nest {
            frame.reopen = true;
        }
        Ok(ops)
    }

    /// The client-declared tools this turn may offer its model.
    pub fn client_tools(&self) -> &[crate::protocol::input::Tool] {
        &self.client_tools
    }

    /// Ends the agent's work until the client sends the results of these tool calls (its
    /// `role: "tool"` messages on a next run): the run ends `success` with `pendingToolCallIds`.
    pub async fn wait_for_client(&mut self, call_ids: Vec<String>, checkpoint: Checkpoint) -> AgentError {
        let mut ops = self.atomic.take().unwrap_or_default();
        match self.close_steps_for_wait() {
            Ok(closed) => ops.extend(closed),
            Err(error) => return error,
        }
        let marker = match self.event_op(Event::Custom {
            name: CLIENT_WAIT_EVENT.into(),
            value: json!({ "pendingToolCallIds": call_ids }),
            subagent_run_id: None,
        }) {
            Ok(marker) => marker,
            Err(error) => return error,
        };
        ops.push(marker);
        ops.push(WriteOp::WaitTurn { turn: self.turn_pk });
        match self.checkpoint_op(&checkpoint) {
            Ok(op) => ops.push(op),
            Err(error) => return error,
        }
        match self.log.append(self.turn_pk, self.epoch, ops, &self.health).await {
            Ok(()) => AgentError::Waiting,
            Err(error) => error.into(),
        }
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
        let mut delay = Duration::from_millis(20);
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_transient() && tokio::time::Instant::now() + delay < deadline => {
                    tracing::warn!(turn = %self.turn_id, %error, what, "the database is away; retrying");
                    self.check_cancelled()?;
                    let mut signal = self.signal.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = signal.wait_for(|s| *s != TurnSignal::Run) => self.check_cancelled()?,
                    }
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(error) => return Err(AgentError::Failed(format!("{what}: {error}"))),
            }
        }
    }

    /// The client's results of the tool calls the turn last waited for, by call id.
    pub async fn client_results(&self) -> Result<std::collections::BTreeMap<String, String>, AgentError> {
        let log = self
            .patiently("the turn's log could not be read", || super::read_log(self.store.as_ref(), self.turn_pk))
            .await?;
        let latest = log.iter().rev().find(|e| e.kind == EventKind::Resumed);
        Ok(latest
            .and_then(|event| serde_json::from_slice::<Envelope>(&event.body).ok())
            .and_then(|envelope| match envelope.event {
                Event::Custom { value, .. } => serde_json::from_value::<super::interrupts::ResumedEvent>(value).ok(),
                _ => None,
            })
            .map(|resumed| resumed.tool_results)
            .unwrap_or_default())
    }

    /// The decisions on interrupts this turn waited for, in the order given. An expired
    /// interrupt reads as denied. An interrupt with no stored decision, or one that does not
    /// parse, fails the turn: nothing is ever taken as approved or denied by default.
    pub async fn decisions(&self, ids: &[String]) -> Result<Vec<Decided>, AgentError> {
        let rows = self
            .patiently("the turn's interrupts could not be read", || self.store.turn_interrupts(self.turn_pk))
            .await?;
        ids.iter()
            .map(|id| {
                let row = rows.iter().find(|row| row.id == *id).ok_or_else(|| {
                    AgentError::Internal(format!("the interrupt {id} the turn waited for is not stored"))
                })?;
                let stored = row.decision.as_deref().ok_or_else(|| {
                    AgentError::Internal(format!("the interrupt {id} has no decision stored (it is {})", row.status))
                })?;
                let decision: Value = serde_json::from_str(stored).map_err(|e| {
                    AgentError::Internal(format!("the stored decision on interrupt {id} does not parse: {e}"))
                })?;
                if !decision.is_object() {
                    return Err(AgentError::Internal(format!("the stored decision on interrupt {id} is not an object")));
                }
                let tool_call_id =
                    serde_json::from_str::<Interrupt>(&row.shown).ok().and_then(|shown| shown.tool_call_id);
                Ok(Decided { interrupt_id: id.clone(), tool_call_id, decision })
            })
            .collect()
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

    /// Counts tokens an agent's model reported against the tenant's budget.
    pub async fn charge_tokens(&self, tokens: u64) -> Result<(), AgentError> {
        if tokens == 0 {
            return Ok(());
        }
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        let at_ms = now_ms();
        self.patiently("the token count could not be recorded", || {
            self.store.add_tokens(&self.tenant, self.turn_pk, tokens, at_ms)
        })
        .await
    }

    /// Ends the turn cleanly (before a model call, never in one) when the tenant's token budget
    /// is spent.
    pub async fn check_token_budget(&self) -> Result<(), AgentError> {
        let Some(budget) = self.token_budget else { return Ok(()) };
        let now = now_ms();
        let (period, next_period) = super::quota_window(now, budget.period_secs);
        let usage = self
            .patiently("the token budget could not be read", || self.store.tenant_usage(&self.tenant, now, period))
            .await?;
        let limit = i64::try_from(budget.limit).unwrap_or(i64::MAX);
        if usage.tokens < limit {
            return Ok(());
        }
        let refusal = super::quota_refusal("quota_exceeded", "tokens", limit, usage.tokens, Some(next_period));
        Err(AgentError::QuotaExceeded { message: refusal.message, figures: refusal.figures.unwrap_or_default() })
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

    /// The thread's earlier turns and this turn's user message, as AG-UI messages.
    pub async fn history_and_message(&self) -> Result<Vec<crate::protocol::InputMessage>, AgentError> {
        self.patiently("the thread could not be read", || {
            super::conversation::load_through(self.store.as_ref(), self.thread_pk, &self.turn_id)
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

    /// Ends the turn: closes open items, appends the terminal event and marks the turn, in one
    /// batch, and waits for the commit. A turn that must leave this instance is not ended: what
    /// it said is committed (on a hand-over) and it is left for its next owner.
    pub(crate) async fn finish(
        mut self,
        ending: Result<AgentOutput, AgentError>,
    ) -> Result<Option<TurnStatus>, LogError> {
        // A step cut short is dropped whole: its checkpoint never committed, so it runs again.
        self.atomic = None;
        let (terminal, status) = match ending {
            Err(AgentError::Waiting) => {
                // The waiting batch (interrupts, event, checkpoint) must be in before the task ends.
                self.log.append_committed(self.turn_pk, self.epoch, Vec::new(), &self.health).await?;
                return Ok(None);
            }
            Err(AgentError::Stopped) => {
                if *self.signal.borrow() == TurnSignal::HandOver {
                    self.log.append_committed(self.turn_pk, self.epoch, Vec::new(), &self.health).await?;
                }
                return Ok(None);
            }
            Ok(output) => {
                if let Err(error) = self.close_open_items().await {
                    return self.fail(&error).await.map(|()| Some(TurnStatus::Failed));
                }
                let (agent, turn) = (self.agent.clone(), self.turn_id.clone());
                if let Err(error) = self.emit_card(&agent, &turn).await {
                    return self.fail(&error).await.map(|()| Some(TurnStatus::Failed));
                }
                let event = Event::RunFinished {
                    thread_id: String::new(),
                    run_id: String::new(),
                    result: output.result,
                    outcome: Some(RunOutcome::Success { pending_tool_call_ids: vec![] }),
                    usage: output.usage,
                };
                (event, TurnStatus::Succeeded)
            }
            Err(AgentError::Cancelled) => {
                if let Err(error) = self.close_open_items().await {
                    return self.fail(&error).await.map(|()| Some(TurnStatus::Failed));
                }
                let event = Event::RunFinished {
                    thread_id: String::new(),
                    run_id: String::new(),
                    result: None,
                    outcome: Some(RunOutcome::Cancelled),
                    usage: None,
                };
                (event, TurnStatus::Cancelled)
            }
            Err(error) => return self.fail(&error).await.map(|()| Some(TurnStatus::Failed)),
        };
        self.append_terminal(Envelope::new(terminal, now_ms()), status).await?;
        Ok(Some(status))
    }

    async fn fail(self, error: &AgentError) -> Result<(), LogError> {
        if self.health.is_fenced() {
            return Err(LogError::Fenced);
        }
        if matches!(error, AgentError::Log(_) | AgentError::Stopped) {
            // The log is what failed: there is no writing a RUN_ERROR into it.
            return Err(LogError::Stopped);
        }
        // The message may quote the user's words: keep it out of info-level logs (§8).
        tracing::warn!(turn = %self.turn_id, kind = error.kind(), "turn failed");
        tracing::debug!(turn = %self.turn_id, %error, "turn failure detail");
        if let AgentError::Internal(why) = error {
            tracing::error!(turn = %self.turn_id, why, "the turn fails on an internal fault");
        }
        let code = match error {
            AgentError::Internal(_) => "internal",
            AgentError::TimedOut(_) => "timed_out",
            AgentError::QuotaExceeded { .. } => "quota_exceeded",
            _ => "failed",
        };
        let event = Event::RunError { message: error.to_string(), code: Some(code.into()), usage: None };
        let mut envelope = Envelope::new(event, now_ms());
        if let AgentError::QuotaExceeded { figures, .. } = error {
            envelope.raw_event = Some(json!({ "gateway": figures }));
        }
        self.append_terminal(envelope, TurnStatus::Failed).await
    }

    async fn append_terminal(mut self, envelope: Envelope, status: TurnStatus) -> Result<(), LogError> {
        // A runner the log refused is not the turn's any more: its end is not the turn's end.
        if self.health.is_fenced() {
            return Err(LogError::Fenced);
        }
        // A terminal event never fails on size or a turn poisoned by a failed commit: it must
        // reach the log (the store still refuses it if this runner's epoch is stale).
        self.health = Arc::new(AppendHealth::default());
        let op = self.envelope_op(envelope).map_err(|_| LogError::Stopped)?;
        let finish = WriteOp::FinishTurn { turn: self.turn_pk, status, at_ms: now_ms() };
        self.log.append_committed(self.turn_pk, self.epoch, vec![op, finish], &self.health).await
    }
}
