//! A turn context's life at its edges: picking up a log another owner left unfinished (what it
//! left open is closed; the numbering goes on in [`TurnContext::resume_from_log`]), and ending
//! a turn (closing what is open, the card, the terminal event and the turn's status in one
//! batch). Apart from [`super::vocabulary`], which is what an agent says while the turn runs.

use serde_json::json;

use super::context::{logged, TurnContext};
use super::outcome::{AgentError, AgentOutput};
use crate::engine::log::events::{CutEvent, GatewayEvent};
use crate::engine::log::LogError;
use crate::protocol::events::Envelope;
use crate::protocol::{ErrorCode, Event, RunOutcome};
use crate::store::TurnStatus;

impl TurnContext {
    /// Closes whatever is open (newest first), as `RUN_FINISHED` requires.
    pub(crate) async fn close_open_items(&mut self) -> Result<(), AgentError> {
        for (call, owner) in self.open_items().take_tool_calls().into_iter().rev() {
            self.emit(Event::ToolCallEnd { tool_call_id: call, subagent_run_id: owner }).await?;
        }
        for (message, owner) in self.open_items().take_messages().into_iter().rev() {
            self.emit(Event::TextMessageEnd { message_id: message, subagent_run_id: owner }).await?;
        }
        self.close_reasoning().await?;
        for (step, owner) in self.open_items().take_steps().into_iter().rev() {
            self.emit(Event::StepFinished { step_name: step, subagent_run_id: owner }).await?;
        }
        self.close_subagents(false).await
    }

    /// Ends the subagents still running where the log stopped: they were cut off with it. With
    /// `keep_delegations`, a delegated child's (whose step is still open) stays open: its work
    /// goes on when the delegation is re-entered.
    async fn close_subagents(&mut self, keep_delegations: bool) -> Result<(), AgentError> {
        self.attribute_to(None);
        for subagent in self.open_items().cut_subagents(keep_delegations).into_iter().rev() {
            let message = "cut off: the run it was part of stopped".to_string();
            self.emit(Event::SubagentError { subagent_run_id: subagent, message, code: None }).await?;
        }
        Ok(())
    }

    /// Ends the open reasoning messages, then the spans they sit in (newest first).
    async fn close_reasoning(&mut self) -> Result<(), AgentError> {
        for (message, owner) in self.open_items().take_reasoning_messages().into_iter().rev() {
            self.emit(Event::ReasoningMessageEnd { message_id: message, subagent_run_id: owner }).await?;
        }
        for (span, owner) in self.open_items().take_reasoning_spans().into_iter().rev() {
            self.emit(Event::ReasoningEnd { message_id: span, subagent_run_id: owner }).await?;
        }
        Ok(())
    }

    /// Forgets what this runner said that the log refused (a wait met the turn's cancel): what
    /// is open and the numbering are read again from the log as committed.
    async fn forget_unwritten(&mut self) -> Result<(), AgentError> {
        let turn = self.identity().turn_pk;
        let events = self
            .patiently("the turn's log could not be read", || crate::engine::log::read_log(self.store(), turn))
            .await?;
        self.restart_from_log(&events);
        Ok(())
    }

    /// Closes the messages and tool calls an interrupted owner left open, where the log stopped
    /// (§4.6): the step that was saying them runs again and gives its answer whole, as a new
    /// message. Steps stay open: the work they stand for goes on.
    ///
    /// What they said is then withdrawn from the conversation (a cut event): the answer is
    /// given whole again, and what the thread shows holds it once, never the fragment (the log
    /// keeps both).
    pub(crate) async fn close_cut_items(&mut self) -> Result<(), AgentError> {
        let mut cut = CutEvent::default();
        for (call, owner) in self.open_items().take_tool_calls() {
            cut.tool_calls.push(call.clone());
            self.emit(Event::ToolCallEnd { tool_call_id: call, subagent_run_id: owner }).await?;
        }
        for (message, owner) in self.open_items().take_messages() {
            cut.messages.push(message.clone());
            self.emit(Event::TextMessageEnd { message_id: message, subagent_run_id: owner }).await?;
        }
        if !cut.messages.is_empty() || !cut.tool_calls.is_empty() {
            self.emit(logged(GatewayEvent::Cut(cut))?).await?;
        }
        // Reasoning cut off mid-thought is closed as it stands; the step thinks again anew.
        self.close_reasoning().await?;
        self.close_subagents(true).await?;
        self.answers().forget_unlabelled();
        self.open_items().forget_last_message();
        Ok(())
    }

    /// Withdraws what the turn's log said from event `from_seq` on, a run that is given again
    /// from its start (an upstream run that could not be continued): what it left open is
    /// closed where the log stopped, and the conversation leaves all it said out (a cut event).
    pub async fn withdraw_since(&mut self, from_seq: i64) -> Result<(), AgentError> {
        self.close_open_items().await?;
        let cut = CutEvent { from_seq: Some(from_seq), ..CutEvent::default() };
        self.emit(logged(GatewayEvent::Cut(cut))?).await
    }

    /// Ends the turn: closes open items, appends the terminal event and marks the turn, in one
    /// batch, and waits for the commit. A turn that must leave this instance is not ended: what
    /// it said is committed (on a hand-over) and it is left for its next owner.
    pub(crate) async fn finish(
        mut self,
        ending: Result<AgentOutput, AgentError>,
    ) -> Result<Option<TurnStatus>, LogError> {
        // A step cut short is dropped whole: its checkpoint never committed, so it runs again.
        self.drop_held();
        let ending = match ending {
            Err(AgentError::Waiting) => {
                // The waiting batch (interrupts, event, checkpoint) must be in before the task ends.
                self.wait_committed().await?;
                if !self.take_wait_cancelled() {
                    return Ok(None);
                }
                // The store refused the wait: the turn's cancel was asked for first (§4.1).
                // Nothing of the wait is in the log; the turn ends after what is.
                match self.forget_unwritten().await {
                    Ok(()) => Err(AgentError::Cancelled),
                    Err(error) => return self.fail(&error).await.map(|()| Some(TurnStatus::Failed)),
                }
            }
            other => other,
        };
        let (terminal, status) = match ending {
            Err(AgentError::Waiting) => {
                // The waiting batch (interrupts, event, checkpoint) must be in before the task ends.
                self.wait_committed().await?;
                return Ok(None);
            }
            Err(AgentError::Stopped) => {
                if self.is_handing_over() {
                    self.wait_committed().await?;
                }
                return Ok(None);
            }
            Ok(output) => {
                if let Err(error) = self.close_open_items().await {
                    return self.fail(&error).await.map(|()| Some(TurnStatus::Failed));
                }
                let (agent, turn) = (self.identity().agent.clone(), self.turn_id().to_string());
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
                    usage: self.spent_usage(),
                };
                (event, TurnStatus::Cancelled)
            }
            Err(error) => return self.fail(&error).await.map(|()| Some(TurnStatus::Failed)),
        };
        let at_ms = self.now_ms();
        self.append_terminal(Envelope::new(terminal, at_ms), status).await?;
        Ok(Some(status))
    }

    pub(super) async fn fail(self, error: &AgentError) -> Result<(), LogError> {
        if self.is_fenced() {
            return Err(LogError::Fenced);
        }
        if matches!(error, AgentError::Log(_) | AgentError::Stopped) {
            // The log is what failed: there is no writing a RUN_ERROR into it.
            return Err(LogError::Stopped);
        }
        // The message may quote the user's words: keep it out of info-level logs (§8).
        tracing::warn!(turn = %self.turn_id(), kind = error.kind(), "turn failed");
        tracing::debug!(turn = %self.turn_id(), %error, "turn failure detail");
        if let AgentError::Internal(why) = error {
            tracing::error!(turn = %self.turn_id(), why, "the turn fails on an internal fault");
        }
        // The cause the client is not told (the database's words): logged once, with the turn.
        if let Some(cause) = error.internal_cause() {
            let what = error.client_message();
            let cause = crate::telemetry::error_chain(cause);
            tracing::error!(turn = %self.turn_id(), what, cause, "the turn fails on an internal error");
        }
        let code = match error {
            AgentError::Internal(_) => ErrorCode::Internal,
            AgentError::TimedOut(_) => ErrorCode::TimedOut,
            AgentError::QuotaExceeded { .. } => ErrorCode::QuotaExceeded,
            _ => ErrorCode::Failed,
        };
        let usage = self.spent_usage();
        let event = Event::RunError { message: error.client_message(), code: Some(code.as_str().into()), usage };
        let mut envelope = Envelope::new(event, self.now_ms());
        if let AgentError::QuotaExceeded { figures, .. } = error {
            envelope.raw_event = Some(json!({ "gateway": figures }));
        }
        self.append_terminal(envelope, TurnStatus::Failed).await
    }
}
