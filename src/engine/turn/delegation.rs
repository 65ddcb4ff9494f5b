//! Delegation (§3 steps): an agent running another agent as a child turn inside its own. The
//! child's events sit inside a step named by the child turn's id, and its checkpoints are saved
//! inside the parent's, so a takeover or a resume re-enters the child where it was.

use super::{AgentError, Checkpoint, TurnContext};

/// How deep delegations may nest (an agent delegating to one that delegates…).
pub(super) const MAX_DELEGATION_DEPTH: usize = 4;

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

/// A delegation under way: where the delegating agent stands, and the child.
#[derive(Debug, Clone)]
pub(super) struct NestFrame {
    pub(super) parent: Checkpoint,
    pub(super) id: String,
    pub(super) agent: String,
    pub(super) input: String,
    /// Its step was finished for a wait: the run that resumes it starts it again.
    pub(super) reopen: bool,
}

impl TurnContext {
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

    pub(super) async fn delegate_now(
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
}
