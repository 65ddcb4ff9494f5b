//! What a turn waits for and what it is given back: interrupts it opens (§5.1), results of
//! client-declared tools (§9.2), and reading the decisions and results once the turn goes on.

use serde_json::{json, Value};

use super::checkpoint::{Checkpoint, NestFrame};
use super::context::{logged, TurnContext};
use super::outcome::AgentError;
use crate::engine::interrupts::{describe_deciders, Deciders, Waiting};
use crate::engine::log::events::{self as log_events, ClientWaitEvent, GatewayEvent, ResumedEvent, WaitingEvent};
use crate::engine::meaning::{Meaning, REFUSAL};
use crate::protocol::events::SubagentOutcome;
use crate::protocol::Interrupt;
use crate::protocol::{iso8601, Event};
use crate::store::{EventKind, InterruptRow, InterruptStatus, WriteOp};

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

impl Decided {
    /// What the decision means, as it was read once when it was made (§5.3).
    pub fn meaning(&self) -> Meaning {
        Meaning::of_stored(&self.decision)
    }

    /// The person's payload exactly as they sent it (a plain string or number as that value);
    /// `None` when nobody sent one (a cancel, an expiry).
    pub fn payload(&self) -> Option<Value> {
        Meaning::payload_of_stored(&self.decision)
    }
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
    /// Why the call asks a person (`gateway/asks-because`), when a policy made it ask: a
    /// tainted turn's data-sending tool says so (§8).
    pub asks_because: Option<&'static str>,
    pub choices: Vec<String>,
    /// The option of the schema's list that counts as a "no" (`gateway/refusal`): a deny, a
    /// cancel or an expiry is that option ([`crate::engine::meaning`]).
    pub refusal: Option<String>,
}

impl InterruptSpec {
    /// What this interrupt asks, digested: everything that makes a person's decision apply —
    /// the call and its arguments, the schema, who decides, four eyes, the time given, why it
    /// asks — and not its id or wording. Two specs of one call under one policy digest alike;
    /// a decision after a long wait is checked against the agent's spec of now (§5.3).
    pub fn policy_digest(&self) -> String {
        let asked = json!({
            "reason": self.reason,
            "toolCallId": self.tool_call_id,
            "responseSchema": self.response_schema,
            "ttlMs": self.ttl_ms,
            "deciders": self.deciders,
            "fourEyes": self.four_eyes,
            "details": self.details,
            "asksBecause": self.asks_because,
            "choices": self.choices,
        });
        // (Added only where there is one: the digests of interrupts opened before stay.)
        let mut asked = asked;
        if let Some(refusal) = &self.refusal {
            asked["refusal"] = json!(refusal);
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, asked.to_string().as_bytes());
        digest.as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

impl TurnContext {
    /// Opens interrupts and ends the agent's work for now: the interrupts, the waiting event and
    /// the checkpoint (which names them) commit together, and the turn is marked waiting. The
    /// agent runs again from `checkpoint` once every interrupt is decided or expired.
    pub async fn wait_for(&mut self, specs: Vec<InterruptSpec>, mut checkpoint: Checkpoint) -> AgentError {
        match self.open_interrupts(specs, &mut checkpoint).await {
            Ok(()) => AgentError::Waiting,
            Err(error) => error,
        }
    }

    pub(super) async fn open_interrupts(
        &mut self,
        specs: Vec<InterruptSpec>,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), AgentError> {
        self.check_stopped()?;
        let now = self.now_ms();
        let mut rows = Vec::new();
        let mut waiting = Vec::new();
        for spec in specs {
            let id = spec.id.clone();
            let policy_digest = spec.policy_digest();
            let mut metadata = serde_json::Map::new();
            metadata.insert("gateway/kind".into(), json!(spec.reason));
            // A delegated child's interrupt names the child turn, and its sub-agent (§3).
            let subagent_run_id = self.delegation_id().map(str::to_string);
            let asking = self.delegation_id().unwrap_or(self.turn_id());
            metadata.insert("gateway/turn".into(), json!(asking));
            if let Some(details) = spec.details {
                metadata.insert("gateway/details".into(), details);
            }
            if let Some(why) = spec.asks_because {
                metadata.insert("gateway/asks-because".into(), json!(why));
            }
            if !spec.choices.is_empty() {
                metadata.insert("gateway/choices".into(), json!(spec.choices));
            }
            if let Some(refusal) = &spec.refusal {
                metadata.insert(REFUSAL.into(), json!(refusal));
            }
            metadata.insert("gateway/deciders".into(), json!(describe_deciders(&spec.deciders, spec.four_eyes)));
            let message = match spec.reason.as_str() {
                "input_required" => self.answers().labelled(spec.message),
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
                subagent_run_id,
            };
            let shown = serde_json::to_string(&interrupt)
                .map_err(|source| AgentError::Encoding { what: "an interrupt", source })?;
            let shown = crate::redact::mask_secrets_owned(shown);
            rows.push(InterruptRow {
                id: id.clone(),
                thread: self.identity().thread_pk,
                turn: self.identity().turn_pk,
                shown,
                deciders: json!(spec.deciders).to_string(),
                four_eyes: spec.four_eyes,
                started_by: self.identity().started_by.clone(),
                expires_at_ms: now + spec.ttl_ms,
                status: InterruptStatus::Open,
                decision: None,
                decided_by: None,
                decided_seq: None,
                created_at_ms: now,
                policy_digest,
            });
            waiting.push(Waiting {
                interrupt,
                deciders: spec.deciders,
                four_eyes: spec.four_eyes,
                started_by: self.identity().started_by.clone(),
                turn: self.turn_id().to_string(),
            });
            checkpoint.awaiting.push(id);
        }
        let mut ops = self.take_held();
        ops.extend(self.close_steps_for_wait(Some(checkpoint.awaiting.clone()))?);
        let marker = self.event_op(logged(GatewayEvent::Waiting(WaitingEvent { interrupts: waiting }))?)?;
        ops.extend(rows.into_iter().map(WriteOp::OpenInterrupt));
        ops.push(marker);
        ops.push(self.checkpoint_op(checkpoint)?);
        self.write(ops).await?;
        Ok(())
    }

    /// Ends the delegations' subagents (`suspended`, naming `interrupt_ids`) and the open
    /// steps, innermost first, as ops of a wait's batch ([`TurnContext::close_steps_for_wait`]
    /// takes the lanes off first: each event names its own owner).
    pub(super) fn close_for_wait(
        &mut self,
        nest: &[NestFrame],
        interrupt_ids: Option<Vec<String>>,
    ) -> Result<Vec<WriteOp>, AgentError> {
        let mut ops = Vec::new();
        for frame in nest.iter().rev() {
            if !self.open_items().end_subagent(&frame.id) {
                continue;
            }
            let outcome = SubagentOutcome::Suspended { interrupt_ids: interrupt_ids.clone() };
            let finished =
                Event::SubagentFinished { subagent_run_id: frame.id.clone(), result: None, outcome: Some(outcome) };
            ops.push(self.event_op(finished)?);
        }
        for (step, owner) in self.open_items().take_steps().into_iter().rev() {
            ops.push(self.event_op(Event::StepFinished { step_name: step, subagent_run_id: owner })?);
        }
        Ok(ops)
    }

    /// Ends the agent's work until the client sends the results of these tool calls (its
    /// `role: "tool"` messages on a next run): the run ends `success` with `pendingToolCallIds`.
    pub async fn wait_for_client(&mut self, call_ids: Vec<String>, checkpoint: Checkpoint) -> AgentError {
        let mut ops = self.take_held();
        match self.close_steps_for_wait(None) {
            Ok(closed) => ops.extend(closed),
            Err(error) => return error,
        }
        let wait = GatewayEvent::ClientWait(ClientWaitEvent { pending_tool_call_ids: call_ids });
        let marker = match logged(wait).and_then(|event| self.event_op(event)) {
            Ok(marker) => marker,
            Err(error) => return error,
        };
        ops.push(marker);
        ops.push(WriteOp::WaitTurn { turn: self.identity().turn_pk });
        match self.checkpoint_op(&checkpoint) {
            Ok(op) => ops.push(op),
            Err(error) => return error,
        }
        match self.write(ops).await {
            Ok(()) => AgentError::Waiting,
            Err(error) => error.into(),
        }
    }

    /// The client's results of the tool calls the turn last waited for, by call id.
    pub async fn client_results(
        &self,
    ) -> Result<std::collections::BTreeMap<String, crate::protocol::events::ToolResultContent>, AgentError> {
        let log = self
            .patiently("the turn's log could not be read", || {
                crate::engine::log::read_log(self.store(), self.identity().turn_pk)
            })
            .await?;
        let latest = log.iter().rev().find(|e| e.kind == EventKind::Resumed);
        Ok(latest
            .and_then(|event| log_events::body_of::<ResumedEvent>(&event.body).ok())
            .map(|resumed| resumed.tool_results)
            .unwrap_or_default())
    }

    /// The decisions on interrupts this turn waited for, in the order given. An expired
    /// interrupt reads as denied. An interrupt with no stored decision, or one that does not
    /// parse, fails the turn: nothing is ever taken as approved or denied by default.
    pub async fn decisions(&self, ids: &[String]) -> Result<Vec<Decided>, AgentError> {
        let rows = self
            .patiently("the turn's interrupts could not be read", || {
                self.store().turn_interrupts(self.identity().turn_pk)
            })
            .await?;
        ids.iter()
            .map(|id| {
                let row = rows.iter().find(|row| row.id == *id).ok_or_else(|| {
                    AgentError::Internal(format!("the interrupt {id} the turn waited for is not stored"))
                })?;
                let stored = row.decision.as_deref().ok_or_else(|| {
                    AgentError::Internal(format!(
                        "the interrupt {id} has no decision stored (it is {})",
                        row.status.as_str()
                    ))
                })?;
                let decision: Value = serde_json::from_str(stored).map_err(|e| {
                    AgentError::Internal(format!("the stored decision on interrupt {id} does not parse: {e}"))
                })?;
                if !decision.is_object() {
                    return Err(AgentError::Internal(format!(
                        "the stored decision on interrupt {id} is not an object"
                    )));
                }
                let tool_call_id =
                    serde_json::from_str::<Interrupt>(&row.shown).ok().and_then(|shown| shown.tool_call_id);
                Ok(Decided { interrupt_id: id.clone(), tool_call_id, decision })
            })
            .collect()
    }
}
