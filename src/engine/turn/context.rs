//! [`TurnContext`]: what an agent holds while it answers a turn. Everything an agent says goes
//! through it into the event log; it numbers the events, names messages, tool calls and notes
//! after the turn, and remembers what is open so a cancelled turn is closed properly.
//!
//! This file holds the context itself: how it is made from what the engine gives it
//! ([`TurnServices`], the agents it may delegate to as [`ChildAgents`]) and the turn's row,
//! the signals it obeys, and how what the agent says becomes ops for the log (steps, events,
//! checkpoints, picking a log up, the terminal batch). Its fields are private to this file: the
//! other files of the turn ask it through the methods at the end, which say what they do. The
//! words an agent says are in [`super::vocabulary`], what it reads in [`super::reads`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::answers::Answers;
use super::checkpoint::{Checkpoint, ChildCheckpoint, NestFrame};
use super::client_input::ClientInput;
use super::identity::TurnIdentity;
use super::naming::{Named, Naming};
use super::open::OpenItems;
use super::outcome::{AgentError, AgentOutput};
use crate::clock::Clock;
use crate::config::Config;
use crate::engine::limits::TokenBudget;
use crate::engine::log::events::GatewayEvent;
use crate::engine::log::{LogError, LogWriter, TurnLog};
use crate::protocol::events::{Envelope, TokenUsage};
use crate::protocol::Event;
use crate::store::{Store, StoredEvent, TurnRow, TurnStatus, WriteOp};

/// A gateway event as the AG-UI event it is logged as.
pub(super) fn logged(event: GatewayEvent) -> Result<Event, AgentError> {
    event.into_event().map_err(|source| AgentError::Encoding { what: "an event", source })
}

/// What a turn's context takes from the engine when it is made ([`TurnContext::new`]): where
/// it writes and reads, the agents it may delegate to and their cards, the configuration and
/// the clock.
pub(in crate::engine) struct TurnServices<'a> {
    pub(in crate::engine) config: &'a Config,
    pub(in crate::engine) log: &'a LogWriter,
    pub(in crate::engine) store: &'a Arc<dyn Store>,
    pub(in crate::engine) agents: Arc<dyn ChildAgents>,
    pub(in crate::engine) cards: &'a Arc<std::collections::HashMap<String, Value>>,
    pub(in crate::engine) clock: &'a Arc<dyn Clock>,
}

/// A child agent's run inside a delegating turn: its `Agent::run`, boxed.
pub(in crate::engine) type ChildRun<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<AgentOutput, AgentError>> + Send + 'a>>;

/// The agents a turn may delegate to, by name ([`TurnContext::delegate`]): the engine's agent
/// registry. A trait of the context's own, so that the context sits below the `Agent` trait
/// (whose `run` takes a `TurnContext`) instead of in a circle with it.
pub(in crate::engine) trait ChildAgents: Send + Sync {
    /// Whether an agent named `name` is configured.
    fn has(&self, name: &str) -> bool;
    /// The agent named `name` answering `turn` from `checkpoint`.
    fn run<'a>(&'a self, name: &str, turn: &'a mut TurnContext, checkpoint: Checkpoint) -> ChildRun<'a>;
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

pub struct TurnContext {
    log: TurnLog,
    /// Which turn this is: its keys, agent, starter and tenant.
    id: TurnIdentity,
    user_text: String,
    /// The user message's parts when it held more than words (images, audio, …); else empty.
    user_parts: Vec<crate::protocol::ContentPart>,
    max_event_bytes: usize,
    signal: watch::Receiver<TurnSignal>,
    next_seq: i64,
    names: Naming,
    /// Ops held back to be committed together (a step that must not be half-done).
    held: Option<Vec<WriteOp>>,
    store: Arc<dyn Store>,
    client_tools: Vec<crate::protocol::input::Tool>,
    /// The client's `context` and `forwardedProps` of the run that started the turn.
    client_input: ClientInput,
    /// At most this many steps are shown open at once (`limits.max_open_steps`, §3).
    max_open_steps: usize,
    /// What the log has opened and not ended: kept by [`TurnContext::envelope_op`] from every
    /// event appended, rebuilt from a log picked up, taken by the closers.
    open: OpenItems,
    /// The subagent what is said now is attributed to (`subagentRunId`), while an agent relays
    /// a subagent's events ([`TurnContext::attribute_to`]).
    attribution: Option<String>,
    /// The board with this turn's pins ([`TurnContext::board`]).
    board: Option<Vec<Value>>,
    token_budget: Option<TokenBudget>,
    /// What the agents reported spending so far, each reporter's latest running total
    /// ([`TurnContext::report_usage`]).
    spent: Vec<(String, TokenUsage)>,
    agents: Arc<dyn ChildAgents>,
    /// Delegations under way, outermost first; the innermost child is the one running.
    nest: Vec<NestFrame>,
    cards: Arc<std::collections::HashMap<String, Value>>,
    /// The AI label on what is sent, and the latest answer's text (for cards).
    answers: Answers,
    /// The engine's clock: event timestamps, interrupt expiries, token budget windows.
    clock: Arc<dyn Clock>,
}

impl TurnContext {
    /// The context of `turn` as this instance runs it: its log is written through the engine's
    /// writer under the turn's epoch, from the first sequence number on (a taken-over turn
    /// moves on past its log in [`TurnContext::resume_from_log`]). The tenant's token budget
    /// comes from its quotas; the AI label leads the first piece of every answer.
    pub(in crate::engine) fn new(
        inner: TurnServices<'_>,
        turn: &TurnRow,
        tenant: crate::ids::TenantId,
        ai_label: Option<String>,
        signal: watch::Receiver<TurnSignal>,
    ) -> TurnContext {
        let token_budget = inner.config.tenant(tenant.as_str()).and_then(|t| {
            let quotas = &t.quotas;
            quotas.tokens_per_period.map(|limit| TokenBudget { limit, period_secs: quotas.token_period_secs })
        });
        TurnContext {
            log: inner.log.for_turn(turn.pk, turn.epoch),
            names: Naming::new(&turn.public_id),
            id: TurnIdentity::of(turn, tenant),
            user_text: turn.user_text.clone(),
            user_parts: turn.user_content_parts(),
            answers: Answers::new(ai_label),
            max_event_bytes: inner.config.limits.max_event_bytes,
            signal,
            next_seq: 1,
            held: None,
            store: inner.store.clone(),
            client_tools: turn.client_tools.as_deref().and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default(),
            client_input: turn
                .client_input
                .as_deref()
                .and_then(|input| serde_json::from_str(input).ok())
                .unwrap_or_default(),
            max_open_steps: inner.config.limits.max_open_steps,
            open: OpenItems::default(),
            attribution: None,
            board: None,
            token_budget,
            spent: Vec::new(),
            agents: inner.agents.clone(),
            nest: Vec::new(),
            cards: inner.cards.clone(),
            clock: inner.clock.clone(),
        }
    }

    /// Milliseconds since the epoch, by the engine's clock (what an agent should stamp with).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The turn's public id (message ids and event ids are named after it).
    pub fn turn_id(&self) -> &str {
        &self.id.turn_id
    }

    /// The words of the user message that started the turn.
    /// What the running agent was asked: the user's message, or a delegation's input.
    pub fn user_text(&self) -> &str {
        self.nest.last().map_or(&self.user_text, |frame| &frame.input)
    }

    /// What the running agent was asked, with the user message's parts besides its words; a
    /// delegation's input is words only.
    pub fn user_content(&self) -> crate::protocol::UserContent {
        match self.nest.last() {
            Some(frame) => crate::protocol::UserContent::Text(frame.input.clone()),
            None if self.user_parts.is_empty() => crate::protocol::UserContent::Text(self.user_text.clone()),
            None => crate::protocol::UserContent::Parts(self.user_parts.clone()),
        }
    }

    /// The person's action the turn started with, when the running agent was asked it (a
    /// delegation's input is words only).
    pub fn action(&self) -> Option<&Value> {
        self.nest.is_empty().then_some(self.client_input.action.as_ref()).flatten()
    }

    /// The MCP App's request the turn started with, when the running agent was asked it.
    pub fn app_request(&self) -> Option<&Value> {
        self.nest.is_empty().then_some(self.client_input.app_request.as_ref()).flatten()
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
        tokio::select! {
            _ = tokio::time::sleep(duration) => Ok(()),
            _ = self.signalled() => self.check_cancelled(),
        }
    }

    /// Resolves, with what the agent is to return, once the engine asks the turn anything but
    /// to run (§4.1: a cancel reaches the turn at once, whatever it waits on). It borrows
    /// nothing of the context, so an agent holds one across its own writes while it reads a
    /// model's or an upstream's stream.
    pub fn stop_asked(&self) -> impl std::future::Future<Output = AgentError> + Send + 'static {
        let mut signal = self.signal.clone();
        async move {
            let _ = signal.wait_for(|s| *s != TurnSignal::Run).await;
            let asked = *signal.borrow();
            match asked {
                TurnSignal::Cancel => AgentError::Cancelled,
                // (A dropped sender leaves `Run`: the engine is gone, the turn stops here.)
                TurnSignal::Run | TurnSignal::HandOver | TurnSignal::Lost => AgentError::Stopped,
            }
        }
    }

    /// Waits for `work` (a request to the world: a model, an upstream, a tool) unless the turn
    /// is asked to stop first; then `work` is dropped — its connection closed, so the other side
    /// sees the request end — and the reason is returned.
    pub async fn unless_stopped<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, AgentError> {
        tokio::select! {
            biased;
            why = self.stop_asked() => Err(why),
            done = work => Ok(done),
        }
    }

    /// Resolves once the engine asks the turn anything but to run (cancel, hand over, lost).
    pub(super) async fn signalled(&self) {
        let mut signal = self.signal.clone();
        // A dropped sender wakes the waiter too, as it always did.
        let _ = signal.wait_for(|s| *s != TurnSignal::Run).await;
    }

    /// Whether this instance is stopping and hands the turn over (what it said is committed).
    pub(super) fn is_handing_over(&self) -> bool {
        *self.signal.borrow() == TurnSignal::HandOver
    }

    /// Holds back what the agent says until [`TurnContext::commit_step`], so a step and its
    /// checkpoint reach the log in one transaction (a takeover never repeats a finished tool
    /// call, nor finds half of one).
    pub fn begin_step(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// What a step begun with [`TurnContext::begin_step`] said and holds back, taken out of the
    /// step (the step ends): the caller writes it with what closes the step.
    pub(super) fn take_held(&mut self) -> Vec<WriteOp> {
        self.held.take().unwrap_or_default()
    }

    /// Drops a step cut short whole: its checkpoint never committed, so it runs again.
    pub(super) fn drop_held(&mut self) {
        self.held = None;
    }

    /// Commits what the step said together with the checkpoint after it.
    ///
    /// Waits until they are committed: the next step may act on the world (call a tool, ask a
    /// model), and a crash before this step is durable must not make a takeover repeat this
    /// step's work after the next one has started.
    pub async fn commit_step(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let mut ops = self.take_held();
        ops.push(self.checkpoint_op(checkpoint)?);
        self.log.append_committed(ops).await?;
        Ok(())
    }

    /// Appends what the step said together with the checkpoint after it, as one write, without
    /// waiting for the commit: a crash keeps both or neither, so the checkpoint always says
    /// exactly how far the log got (an upstream stream's position, event by event).
    pub async fn append_step(&mut self, checkpoint: &Checkpoint) -> Result<(), AgentError> {
        let mut ops = self.take_held();
        ops.push(self.checkpoint_op(checkpoint)?);
        self.write(ops).await?;
        Ok(())
    }

    /// Appends what is held back since [`TurnContext::begin_step`] as one write, with no
    /// checkpoint, and ends the step: a relay holds the events of one upstream read so that
    /// the log writer gets them as one append, not one append each.
    pub async fn release_held(&mut self) -> Result<(), AgentError> {
        let ops = self.take_held();
        if !ops.is_empty() {
            self.write(ops).await?;
        }
        Ok(())
    }

    /// Appends `ops` to the log now, past any step held back (a wait's batch takes the held
    /// ops itself, [`TurnContext::take_held`]).
    pub(super) async fn write(&self, ops: Vec<WriteOp>) -> Result<(), LogError> {
        self.log.append(ops).await
    }

    /// Waits until everything appended so far is committed (or refused).
    pub(super) async fn wait_committed(&self) -> Result<(), LogError> {
        self.log.append_committed(Vec::new()).await
    }

    /// Whether the store refused the turn's wait because its cancel was asked for first (§4.1);
    /// told once.
    pub(super) fn take_wait_cancelled(&self) -> bool {
        self.log.health().take_wait_cancelled()
    }

    /// Whether the log refused this runner (another holds the turn now).
    pub(super) fn is_fenced(&self) -> bool {
        self.log.health().is_fenced()
    }

    pub(super) async fn append(&mut self, ops: Vec<WriteOp>) -> Result<(), AgentError> {
        match &mut self.held {
            Some(held) => held.extend(ops),
            None => self.write(ops).await?,
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

    /// The sub-agent what is said now belongs to (its `subagentRunId`): the one an agent relays,
    /// else the delegated child running (§3 sub-agents), else none (the turn's own agent).
    pub fn lane(&self) -> Option<&str> {
        self.attribution.as_deref().or_else(|| self.nest.last().map(|frame| frame.id.as_str()))
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

    pub(super) fn envelope_op(&mut self, mut envelope: Envelope) -> Result<WriteOp, AgentError> {
        // Every tool call names the message it belongs to (§3): one with no text before it in
        // its answer block belongs to a message named by the call's own id — where the
        // conversation, and the official client, put a call that names none.
        if let Event::ToolCallStart { tool_call_id, parent_message_id: parent @ None, .. } = &mut envelope.event {
            *parent = Some(tool_call_id.clone());
        }
        if let (Some(subagent), Some(tag @ None)) = (self.lane(), envelope.event.attribution_mut()) {
            *tag = Some(subagent.to_string());
        }
        if self.log.health().is_failed() {
            // The log refused an append of this turn (another runner holds it now) or could not
            // commit one: write nothing more, so the log never gets a hole or a second writer.
            return Err(AgentError::Stopped);
        }
        let kind = crate::engine::log::events::kind_of(&envelope.event);
        let at_ms = envelope.timestamp.unwrap_or_else(|| self.now_ms());
        let body =
            serde_json::to_string(&envelope).map_err(|source| AgentError::Encoding { what: "an event", source })?;
        // A secret the gateway holds is never recorded, so never shown: not even when a tool,
        // an upstream or a model echoes it (§2 credentials).
        let body = crate::redact::mask_secrets_owned(body).into_bytes();
        if body.len() > self.max_event_bytes {
            return Err(AgentError::EventTooLarge { size: body.len(), limit: self.max_event_bytes });
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        // Known open from the moment it is a write: an append that fails stops the turn, and a
        // turn told its writes were refused reads what is open again from the log.
        self.open.observe(&envelope.event);
        let event = StoredEvent { seq, kind, body: Bytes::from(body), at_ms };
        Ok(WriteOp::Event { turn: self.id.turn_pk, event })
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
        let checkpoint =
            serde_json::to_string(&nested).map_err(|source| AgentError::Encoding { what: "checkpoint", source })?;
        let checkpoint = crate::redact::mask_secrets_owned(checkpoint);
        Ok(WriteOp::Checkpoint { turn: self.id.turn_pk, checkpoint })
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
        (self.open.step_count(), self.max_open_steps)
    }

    /// The sequence number the turn's next event gets: where what the agent says next begins.
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    pub(crate) fn set_next_note_no(&mut self, next: i64) {
        self.names.set_next_note_no(next);
    }

    /// Whether the log holds nothing yet (a turn lost before its first batch committed).
    pub(crate) fn is_fresh(&self) -> bool {
        self.next_seq == 1
    }

    /// Picks up a turn another instance (or an earlier run of this one) left unfinished: the
    /// numbering continues after its log, and what it left open is known.
    pub(crate) fn resume_from_log(&mut self, events: &[StoredEvent]) {
        for stored in events {
            self.next_seq = self.next_seq.max(stored.seq + 1);
            let Ok(envelope) = serde_json::from_slice::<Envelope>(&stored.body) else { continue };
            self.open.observe(&envelope.event);
            self.names.observe(&envelope.event);
        }
    }

    /// Forgets what this runner said that the log refused: what is open and the numbering are
    /// read again from `events`, the log as committed.
    pub(super) fn restart_from_log(&mut self, events: &[StoredEvent]) {
        self.open = OpenItems::default();
        self.answers.forget_unlabelled();
        self.next_seq = 1;
        self.resume_from_log(events);
    }

    /// Appends the turn's terminal event and marks the turn ended, and waits for the commit.
    pub(super) async fn append_terminal(mut self, envelope: Envelope, status: TurnStatus) -> Result<(), LogError> {
        // A runner the log refused is not the turn's any more: its end is not the turn's end.
        if self.log.health().is_fenced() {
            return Err(LogError::Fenced);
        }
        // A terminal event never fails on size or a turn poisoned by a failed commit: it must
        // reach the log (the store still refuses it if this runner's epoch is stale).
        self.log.forget_health();
        let op = self.envelope_op(envelope).map_err(|_| LogError::Stopped)?;
        let finish = WriteOp::FinishTurn { turn: self.id.turn_pk, status, at_ms: self.now_ms() };
        self.log.append_committed(vec![op, finish]).await
    }

    /// Which turn this is (its keys, agent, starter and tenant).
    pub(super) fn identity(&self) -> &TurnIdentity {
        &self.id
    }

    /// The store the turn reads through (its writes go through the log).
    pub(super) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// What is open in the turn, for the closers to take from.
    pub(super) fn open_items(&mut self) -> &mut OpenItems {
        &mut self.open
    }

    /// A new id of `kind`, named after the turn (`<turn>:m<n>`, `<turn>:c<n>`, …).
    pub(super) fn new_id(&mut self, kind: Named) -> String {
        self.names.next(kind)
    }

    /// The id of `kind` this turn named last, if it named one.
    pub(super) fn latest_id(&self, kind: Named) -> Option<String> {
        self.names.latest(kind)
    }

    /// The number the next pinned note gets, which is then used.
    pub(super) fn new_note_no(&mut self) -> i64 {
        self.names.next_note_no()
    }

    /// The AI label on what is sent, and the latest answer.
    pub(super) fn answers(&mut self) -> &mut Answers {
        &mut self.answers
    }

    /// The text of the latest answer, as its agent wrote it (a delegated child's, after
    /// [`TurnContext::delegate`]).
    pub fn last_answer(&self) -> &str {
        self.answers.latest_text()
    }

    /// Attributes what is said from now on to the subagent `subagent` (its `subagentRunId`),
    /// or to the agent itself again (`None`).
    pub fn attribute_to(&mut self, subagent: Option<String>) {
        self.attribution = subagent;
    }

    /// The innermost delegation's child turn id: the child running now, if one is.
    pub(super) fn delegation_id(&self) -> Option<&str> {
        self.nest.last().map(|frame| frame.id.as_str())
    }

    /// How many delegations are under way, one inside the other.
    pub(super) fn delegation_depth(&self) -> usize {
        self.nest.len()
    }

    /// A delegated child starts running: what is said from now on is its.
    pub(super) fn enter_delegation(&mut self, frame: NestFrame) {
        self.nest.push(frame);
    }

    /// The innermost delegated child is done: its parent runs again.
    pub(super) fn leave_delegation(&mut self) {
        self.nest.pop();
    }

    /// The run ends at a wait, and a run ends with no step and no subagent open: the
    /// delegations' subagents finish here `suspended` (naming the interrupts they wait on), then
    /// the steps, innermost first; both start again in the run that resumes them.
    pub(super) fn close_steps_for_wait(
        &mut self,
        interrupt_ids: Option<Vec<String>>,
    ) -> Result<Vec<WriteOp>, AgentError> {
        // Each event below names its own owner: no lane tags them.
        let attribution = self.attribution.take();
        let nest = std::mem::take(&mut self.nest);
        let closed = self.close_for_wait(&nest, interrupt_ids);
        self.attribution = attribution;
        self.nest = nest;
        for frame in &mut self.nest {
            frame.reopen = true;
        }
        closed
    }

    /// The board as this turn knows it, once read ([`TurnContext::board`]).
    pub(super) fn known_board(&self) -> Option<&[Value]> {
        self.board.as_deref()
    }

    /// Keeps `board` as the board this turn knows (read, or with its own pins).
    pub(super) fn know_board(&mut self, board: Vec<Value>) {
        self.board = Some(board);
    }

    /// The tenant's token budget, when its quotas set one.
    pub(super) fn token_budget(&self) -> Option<TokenBudget> {
        self.token_budget
    }

    /// Records what `reporter` (an agent, or one model an upstream named) has spent in this turn
    /// so far: its running total, replacing its last report. A delegated child reports apart
    /// from its parent and from the other children (by its delegation's id).
    pub fn report_usage(&mut self, reporter: &str, usage: TokenUsage) {
        let key = format!("{}/{reporter}", self.delegation_id().unwrap_or(""));
        match self.spent.iter_mut().find(|(reported, _)| *reported == key) {
            Some((_, last)) => *last = usage,
            None => self.spent.push((key, usage)),
        }
    }

    /// What the agents reported spending, for a `RUN_ERROR` or a cancelled `RUN_FINISHED`
    /// (none when nothing was reported: absent is not zero).
    pub(super) fn spent_usage(&self) -> Option<Vec<TokenUsage>> {
        (!self.spent.is_empty()).then(|| self.spent.iter().map(|(_, usage)| usage.clone()).collect())
    }

    /// The configured agent named `name`, which a delegation runs as a child.
    pub(super) fn child_agents(&self) -> Arc<dyn ChildAgents> {
        self.agents.clone()
    }

    /// The card schema the agent `agent` declares, if it declares one (§3).
    pub(super) fn card_schema(&self, agent: &str) -> Option<&Value> {
        self.cards.get(agent)
    }
}
