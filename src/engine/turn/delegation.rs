//! Delegation (§3 steps): an agent running another agent as a child turn inside its own. The
//! child's events sit inside a step named by the child turn's id, and its checkpoints are saved
//! inside the parent's, so a takeover or a resume re-enters the child where it was.
//!
//! The child is a sub-agent too (§3 sub-agents): inside the step, `SUBAGENT_STARTED` (the
//! child turn's id as `subagentRunId`, the agent's name, the delegating child as
//! `parentSubagentRunId` when delegations nest, the `delegate` tool call that asked for it as
//! `parentToolCallId`), the child's events and interrupts each carrying that
//! `subagentRunId` (the context's lane, [`TurnContext::lane`]), and `SUBAGENT_FINISHED`
//! (`success`), `SUBAGENT_ERROR` (the child failed) or, at a wait, `SUBAGENT_FINISHED`
//! `suspended` — a run ends with no sub-agent open, and the run that resumes it starts it again.

use super::checkpoint::{Checkpoint, ChildCheckpoint, NestFrame};
use super::context::TurnContext;
use super::outcome::{AgentError, AgentOutput};
use crate::protocol::events::SubagentOutcome;
use crate::protocol::Event;

/// How deep delegations may nest (an agent delegating to one that delegates…).
pub(super) const MAX_DELEGATION_DEPTH: usize = 4;

impl TurnContext {
    /// Runs `agent` as a child turn inside this one (§3 steps): `STEP_STARTED`, the child's
    /// events (its text stays inside the step), `STEP_FINISHED`, all named by the child turn's
    /// id. The child's checkpoints are saved inside `parent` (where the delegating agent
    /// stands), so a takeover or a resume re-enters the child where it was; its interrupts are
    /// the parent run's, with `gateway/turn` and `subagentRunId` naming the child.
    /// `by_call` is the tool call that asked for the delegation, when one did (an `openai`
    /// agent's `delegate`): `SUBAGENT_STARTED` names it as `parentToolCallId`.
    ///
    /// A boxed future: an agent's run awaits a delegation which awaits an agent's run.
    pub fn delegate<'a>(
        &'a mut self,
        agent: &'a str,
        input: String,
        parent: Checkpoint,
        resumed: Option<ChildCheckpoint>,
        by_call: Option<&'a str>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), AgentError>> + Send + 'a>> {
        Box::pin(self.delegate_now(agent, input, parent, resumed, by_call))
    }

    pub(super) async fn delegate_now(
        &mut self,
        agent: &str,
        input: String,
        parent: Checkpoint,
        resumed: Option<ChildCheckpoint>,
        by_call: Option<&str>,
    ) -> Result<(), AgentError> {
        if self.delegation_depth() >= MAX_DELEGATION_DEPTH {
            return Err(AgentError::Failed(format!("delegations nest deeper than {MAX_DELEGATION_DEPTH}")));
        }
        let agents = self.child_agents();
        if !agents.has(agent) {
            return Err(AgentError::Failed(format!("there is no agent '{agent}' to delegate to")));
        }
        let (id, checkpoint, input) = match resumed {
            Some(resumed) if resumed.reopen => {
                // A new run after a wait: the step starts again in it.
                self.step_start(&resumed.id).await?;
                (resumed.id, resumed.checkpoint, resumed.input)
            }
            Some(resumed) => {
                // Taken over: its STEP_STARTED is in this run's log already, so it is open
                // (the log picked up says so).
                (resumed.id, resumed.checkpoint, resumed.input)
            }
            None => {
                let id = crate::ids::new_turn_id();
                self.step_start(&id).await?;
                (id, Checkpoint::default(), input)
            }
        };
        let parent_subagent = self.delegation_id().map(str::to_string);
        self.enter_delegation(NestFrame { parent, id: id.clone(), agent: agent.to_string(), input, reopen: false });
        // A message of one lane never holds a tool call of another: the child's answers start
        // their own messages, and so does the parent's after it.
        self.open_items().forget_last_message();
        // Open already when a takeover re-enters it (the log says so); else it starts here.
        let started = if self.open_items().has_subagent(&id) {
            Ok(())
        } else {
            self.subagent_start(Event::SubagentStarted {
                subagent_run_id: id.clone(),
                name: agent.to_string(),
                description: None,
                parent_subagent_run_id: parent_subagent,
                parent_tool_call_id: by_call.map(str::to_string),
                parent_message_id: None,
            })
            .await
        };
        let outcome = match started {
            Ok(()) => agents.run(agent, self, checkpoint).await,
            Err(error) => Err(error),
        };
        let ended = self.end_subagent(&id, &outcome).await;
        self.leave_delegation();
        self.open_items().forget_last_message();
        outcome?;
        ended?;
        self.emit_card(agent, &id).await?;
        self.step_finish(&id).await
    }

    /// Ends the child's sub-agent as its run went: finished, or failed with what the turn will
    /// end with. A wait finished it already (`suspended`); a turn leaving this instance leaves
    /// it open for the next owner.
    async fn end_subagent(&mut self, id: &str, outcome: &Result<AgentOutput, AgentError>) -> Result<(), AgentError> {
        if !self.open_items().has_subagent(id) {
            return Ok(());
        }
        let message = match outcome {
            Ok(_) => {
                let success = Some(SubagentOutcome::Success);
                let finished =
                    Event::SubagentFinished { subagent_run_id: id.to_string(), result: None, outcome: success };
                return self.subagent_end(finished).await;
            }
            Err(AgentError::Waiting | AgentError::Stopped) => return Ok(()),
            Err(AgentError::Cancelled) => "the run was cancelled".to_string(),
            Err(AgentError::Failed(message)) => message.clone(),
            Err(_) => "the delegated agent failed".to_string(),
        };
        // The child's step cut short is dropped whole, as the turn's end drops it (its
        // checkpoint never committed); the sub-agent's end is said on its own.
        self.drop_held();
        self.subagent_end(Event::SubagentError { subagent_run_id: id.to_string(), message, code: None }).await
    }
}
