//! Decisions: a resume's answers, an out-of-band decision, client tool results. Each is
//! checked first, then recorded with its decision event in one transaction
//! ([`Engine::record`]), which also sets the turn going again when nothing of it stays open.
//! A run that decides (a resume, client results) commits its own rows in that transaction too
//! (its run record and its stream's `board.read` row), and is planned from the rows its request
//! read (the thread, its turns, the turn's interrupts, the notes): each is read once.

use serde_json::{json, Value};

use super::follow::{refuse, viewer_of, BoardRead, Following};
use super::history::{self, HistoryVerdict};
use super::resume::{check_resume, EntryPlan};
use crate::caller::Caller;
use crate::engine::board;
use crate::engine::errors::EngineError;
use crate::engine::interrupts::{self, waiting_of, Viewer};
use crate::engine::log::events::{self as log_events, ClientWaitEvent, GatewayEvent, ResumedEvent};
use crate::engine::log::read_log;
use crate::engine::meaning::{Denial, Meaning};
use crate::engine::plans::{Refusal, RunPlan, RunRequest};
use crate::engine::runner::TurnStart;
use crate::engine::shape::Engine;
use crate::engine::turn::agent::AskedNow;
use crate::engine::turn::Checkpoint;
use crate::metrics::CodeLabel;
use crate::protocol::input::ResumeEntry;
use crate::protocol::ErrorCode;
use crate::store::{
    AuditEntry, Decided, Decision, DecisionRound, EventKind, InterruptRow, InterruptStatus, StoreError, StoredEvent,
    ThreadRow, TurnRow,
};

impl Engine {
    /// The tool calls a waiting turn needs the client's results of, when that is what it waits
    /// for (its last word is a client wait, with none of its `interrupts` open).
    pub(in crate::engine) async fn pending_client_calls(
        &self,
        turn: &TurnRow,
        interrupts: &[InterruptRow],
    ) -> Result<Option<Vec<String>>, EngineError> {
        let store = &self.inner.store;
        if interrupts.iter().any(|i| i.status == InterruptStatus::Open) {
            return Ok(None);
        }
        let log = read_log(store.as_ref(), turn.pk).await?;
        let Some(last) = log.iter().rev().find(|e| matches!(e.kind, EventKind::ClientWait | EventKind::Resumed)) else {
            return Ok(None);
        };
        if last.kind != EventKind::ClientWait {
            return Ok(None);
        }
        let wait: ClientWaitEvent = log_events::body_of(&last.body).map_err(|e| EngineError::Unreadable {
            what: "a client-wait event does not read back".into(),
            source: e.into(),
        })?;
        Ok(Some(wait.pending_tool_call_ids))
    }

    /// The client's `role: "tool"` messages answer the calls the turn waits for: they are
    /// recorded with the turn, which goes on; the run follows it from there (§9.2). `turns` are
    /// the thread's, as the request read them.
    pub(in crate::engine) async fn continue_with_client_results(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        turns: &[TurnRow],
        turn: &TurnRow,
        pending: Vec<String>,
    ) -> Result<RunPlan, EngineError> {
        let mut results = std::collections::BTreeMap::new();
        for message in &request.input.messages {
            if let crate::protocol::InputMessage::Tool(tool) = message {
                if pending.contains(&tool.tool_call_id) {
                    // Text or content parts, recorded as the client sent them.
                    let content = crate::protocol::events::ToolResultContent::from_message(&tool.content);
                    results.insert(tool.tool_call_id.clone(), content);
                }
            }
        }
        if let Some(missing) = pending.iter().find(|id| !results.contains_key(*id)) {
            return Ok(refuse(
                ErrorCode::HistoryMismatch,
                &format!("the turn waits for the result of tool call {missing}: send it as a role \"tool\" message"),
            ));
        }
        let notes = self.inner.store.notes(thread.pk).await?;
        let marker = resumed_marker(&[], results, board::current(notes.clone(), turns), self.now_ms())?;
        let board_read = self.stream_board_read(request, thread, &notes);
        let run = Some(request.run_id.as_str());
        let Some(recorded) = self.record(turn, &[], marker, &Vec::from_iter(board_read), run).await? else {
            return Ok(refuse(ErrorCode::TurnInProgress, "the results were already given"));
        };
        let following = Following {
            resume_outcomes: Some(Vec::new()),
            board_read: BoardRead::Written,
            turns: Some(turns.to_vec()),
            ..Following::of(thread, turn, recorded.event.seq - 1)
        };
        self.follow_recorded_run(request, request.run_id.as_str(), recorded, following).await
    }

    /// Follows the run a decision recorded with it, or records it now when its key was taken
    /// (an earlier run of that key is then the one followed).
    async fn follow_recorded_run(
        &self,
        request: &RunRequest<'_>,
        run_key: &str,
        recorded: Recorded,
        following: Following<'_>,
    ) -> Result<RunPlan, EngineError> {
        let following = Following { opening: Some(recorded.event), ..following };
        match recorded.run_recorded {
            true => self.follow(request, following).await,
            false => self.record_run_and_follow(request, run_key, following).await,
        }
    }

    /// The `board.read` row (§8) of the stream a request opens on `thread`, from its `notes`;
    /// `None` when it shows no note's text.
    fn stream_board_read(&self, request: &RunRequest<'_>, thread: &ThreadRow, notes: &[String]) -> Option<AuditEntry> {
        let clearance = viewer_of(request).clearance;
        let board = board::from_stored(notes);
        Engine::board_read_entry(request.caller, &thread.tenant, &thread.thread_id, &clearance, &board, self.now_ms())
    }

    /// A resume (§5.3): every entry checked before any is decided; the decisions in one
    /// transaction, with the run's own rows; the run then follows the turn from the decision on.
    /// `run_key` is what the run is recorded as: its runId, or a key of its own when it answers
    /// on the run that asked. `turns` are the thread's and `asked` a turn's interrupts, as the
    /// request read them (those of the latest turn are read here otherwise).
    pub(in crate::engine) async fn resume(
        &self,
        request: &RunRequest<'_>,
        thread: Option<&ThreadRow>,
        turns: Vec<TurnRow>,
        run_key: &str,
        asked: Option<(i64, Vec<InterruptRow>)>,
    ) -> Result<RunPlan, EngineError> {
        let Some(person) = request.caller.person_id() else {
            return Err(EngineError::PersonOnly(self.console_hint()));
        };
        let (Some(thread), Some(latest)) = (thread, turns.last()) else {
            return Ok(refuse(ErrorCode::InvalidResume, "no interrupt is open on this thread"));
        };
        if !request.input.messages.is_empty()
            && history::check(&request.input.messages, &turns) != HistoryVerdict::Follow(latest.pk)
        {
            return Ok(refuse(ErrorCode::HistoryMismatch, "a resume adds no message; load the thread again"));
        }
        let interrupts = match asked {
            Some((turn, interrupts)) if turn == latest.pk => interrupts,
            _ => self.inner.store.turn_interrupts(latest.pk).await?,
        };
        let viewer = viewer_of(request);
        let plans = match check_resume(request.input.resume(), &interrupts, person, &viewer.roles, self.now_ms(), true)
        {
            Ok(plans) => plans,
            Err(refusal) => return Ok(refuse(refusal.code, &refusal.message)),
        };
        // The notes, read once: the board the decision event keeps, and the stream's audit row.
        let notes = self.inner.store.notes(thread.pk).await?;
        let shown = board::current(notes.clone(), &turns);
        if let Some(changed) = self.supersede_changed(latest, &plans, &interrupts, &thread.tenant, &shown).await? {
            return Ok(RunPlan::Refused(changed));
        }
        let via = request.caller.via().unwrap_or("direct");
        let run = RunRecord { key: run_key, board_read: self.stream_board_read(request, thread, &notes) };
        let recording = Recording { tenant: &thread.tenant, board: shown, run: Some(run) };
        let made = match self.decide(latest, &plans, person, via, &recording).await {
            Ok(Some(made)) => made,
            Ok(None) => return Ok(refuse(ErrorCode::InvalidResume, "nothing to decide")),
            // A run's refusal is its RUN_ERROR.
            Err(EngineError::DecisionRefused(refusal)) => return Ok(RunPlan::Refused(refusal)),
            Err(error) => return Err(error),
        };
        let following = Following {
            resume_outcomes: Some(made.outcomes),
            turns: Some(turns.clone()),
            ..Following::of(thread, latest, made.start_seq)
        };
        match made.recorded {
            Some(recorded) => {
                let following = Following { board_read: BoardRead::Written, ..following };
                self.follow_recorded_run(request, run_key, recorded, following).await
            }
            // Every entry was decided before: nothing was written, the run's rows included.
            None => {
                let following = Following { board_read: BoardRead::Due(Some(notes)), ..following };
                self.record_run_and_follow(request, run_key, following).await
            }
        }
    }

    /// A decision after a long wait is checked again (§5.3): each interrupt it decides that was
    /// shown longer than `turns.decision_recheck_secs` ago is compared with what the turn's
    /// agent would ask now, under its current configuration (policy, deciders, the tool, the
    /// call's arguments). When any differs, those interrupts are superseded — recorded like a
    /// decision, so the turn goes on and its agent asks again when nothing else stays open —
    /// and the whole decision is refused `interrupt_changed`: nothing of it is decided. The
    /// supersession is recorded in the turn's `tenant`, with the `board` as it stands.
    async fn supersede_changed(
        &self,
        turn: &TurnRow,
        plans: &[EntryPlan],
        interrupts: &[InterruptRow],
        tenant: &str,
        board: &[Value],
    ) -> Result<Option<Refusal>, EngineError> {
        let recheck_ms =
            i64::try_from(self.inner.config.turns.decision_recheck_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let now = self.now_ms();
        let stale: Vec<&InterruptRow> = plans
            .iter()
            .filter_map(|plan| match plan {
                EntryPlan::Decide { interrupt_id, .. } => interrupts.iter().find(|row| row.id == *interrupt_id),
                EntryPlan::AlreadyDecided { .. } => None,
            })
            .filter(|row| !row.policy_digest.is_empty() && now.saturating_sub(row.created_at_ms) >= recheck_ms)
            .collect();
        let Some(agent) = self.inner.agents.get(&turn.agent).filter(|_| !stale.is_empty()) else {
            return Ok(None);
        };
        let checkpoint: Checkpoint = match &turn.checkpoint {
            Some(saved) => serde_json::from_str(saved).map_err(|e| EngineError::Unreadable {
                what: format!("turn {}'s checkpoint does not parse", turn.public_id),
                source: Box::new(e),
            })?,
            None => Checkpoint::default(),
        };
        let changed: Vec<&str> = stale
            .iter()
            .filter(|row| match agent.asked_now(&checkpoint, &row.id) {
                AskedNow::Unknown => false,
                AskedNow::Asks(spec) => spec.policy_digest() != row.policy_digest,
                AskedNow::Nobody => true,
            })
            .map(|row| row.id.as_str())
            .collect();
        if changed.is_empty() {
            return Ok(None);
        }
        let decisions: Vec<Decision> = changed
            .iter()
            .map(|id| Decision {
                interrupt_id: id.to_string(),
                status: InterruptStatus::Superseded,
                decision: Meaning::Deny { comment: None, why: Denial::Superseded }.stored(None).to_string(),
                decided_by: "gateway".into(),
                decided_via: "recheck".into(),
            })
            .collect();
        let outcomes: Vec<Value> =
            changed.iter().map(|id| json!({ "interruptId": id, "outcome": "superseded" })).collect();
        let superseded: Vec<&Value> = outcomes.iter().collect();
        let audit = self.decision_audit(tenant, turn, "gateway", None, "interrupt.supersede", &superseded);
        let marker = resumed_marker(&outcomes, Default::default(), board.to_vec(), now)?;
        // Someone else's decision in between leaves nothing to supersede: refused all the same,
        // the decision was made on what was shown then.
        if self.record(turn, &decisions, marker, &audit, None).await?.is_some() {
            let superseded = CodeLabel { code: "superseded".into() };
            self.inner.metrics.interrupts_decided.get_or_create(&superseded).inc_by(decisions.len() as u64);
        }
        Ok(Some(Refusal {
            code: ErrorCode::InterruptChanged,
            message: format!(
                "the call of interrupt {} changed since it was shown (its policy, deciders, tool or arguments): it \
                 is asked again; load the thread and decide the new interrupt",
                changed.join(", ")
            ),
            figures: None,
        }))
    }

    /// Records the decisions of `plans` for `turn` (all or nothing) as `recording` says, and
    /// sets the turn going again when nothing of it stays open. Returns each entry's outcome,
    /// where the run that made them begins in the log and what was recorded; `None` when the
    /// plans decide nothing and name no decision.
    pub(in crate::engine) async fn decide(
        &self,
        turn: &TurnRow,
        plans: &[EntryPlan],
        person: &str,
        via: &str,
        recording: &Recording<'_>,
    ) -> Result<Option<Made>, EngineError> {
        let inner = &self.inner;
        let mut plans = plans.to_vec();
        loop {
            let decisions: Vec<Decision> = plans
                .iter()
                .filter_map(|plan| match plan {
                    EntryPlan::Decide { interrupt_id, decision, .. } => Some(Decision {
                        interrupt_id: interrupt_id.clone(),
                        status: InterruptStatus::Decided,
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
                    EntryPlan::Decide { interrupt_id, meaning, .. } => meaning.outcome(interrupt_id, "decided"),
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
                return Ok(start.map(|start_seq| Made { outcomes, start_seq, recorded: None }));
            }
            let decided: Vec<&Value> = outcomes.iter().filter(|o| o["outcome"] == "decided").collect();
            let actor = format!("person:{person}");
            let mut audit =
                self.decision_audit(recording.tenant, turn, &actor, Some(via), "interrupt.decide", &decided);
            let run = recording.run.as_ref();
            audit.extend(run.and_then(|run| run.board_read.clone()));
            let marker = resumed_marker(&outcomes, Default::default(), recording.board.clone(), self.now_ms())?;
            if let Some(recorded) = self.record(turn, &decisions, marker, &audit, run.map(|run| run.key)).await? {
                let decided = CodeLabel { code: "decided".into() };
                inner.metrics.interrupts_decided.get_or_create(&decided).inc_by(decisions.len() as u64);
                let start_seq = recorded.event.seq - 1;
                return Ok(Some(Made { outcomes, start_seq, recorded: Some(recorded) }));
            }
            // Someone decided one of these first: what they decided is already_decided here,
            // and the rest is tried again. Each round must turn at least one entry, so the
            // loop ends; a round that turns none (the turn does not wait, yet these interrupts
            // read open) is refused at once rather than tried again without end. One that
            // nobody decided — withdrawn by a cancel or an erase that came first, or
            // superseded — refuses the decision: it was not made, and is not answered as made.
            let stored = inner.store.turn_interrupts(turn.pk).await?;
            let mut turned = false;
            for plan in plans.iter_mut() {
                if let EntryPlan::Decide { interrupt_id, .. } = plan {
                    if let Some(row) =
                        stored.iter().find(|i| i.id == *interrupt_id && i.status != InterruptStatus::Open)
                    {
                        let refused = match row.status {
                            InterruptStatus::Withdrawn => {
                                Some((ErrorCode::InvalidResume, "withdrawn, its turn was cancelled"))
                            }
                            InterruptStatus::Superseded => {
                                Some((ErrorCode::InterruptChanged, "the call changed since it was shown"))
                            }
                            _ => None,
                        };
                        if let Some((code, why)) = refused {
                            let message = format!("{interrupt_id}: {why}");
                            return Err(EngineError::DecisionRefused(Refusal { code, message, figures: None }));
                        }
                        *plan = EntryPlan::AlreadyDecided {
                            interrupt_id: interrupt_id.clone(),
                            decided_seq: row.decided_seq,
                        };
                        turned = true;
                    }
                }
            }
            if !turned {
                return Err(EngineError::TurnInProgress(format!(
                    "turn {} does not wait for a decision now: load the thread and try again",
                    turn.public_id
                )));
            }
        }
    }

    /// Records decisions (or client results) of one turn with their decision event, tells the
    /// streams, and sets the turn going when nothing of it stays open. `None` when someone
    /// decided one of them first (nothing was recorded); else the event as committed.
    /// `audit` holds the audit rows, committed in the same transaction, and so is the run id
    /// `run` of the request that decides, when it has one to record (see [`Recorded`]).
    pub(in crate::engine) async fn record(
        &self,
        turn: &TurnRow,
        decisions: &[Decision],
        marker: StoredEvent,
        audit: &[AuditEntry],
        run: Option<&str>,
    ) -> Result<Option<Recorded>, EngineError> {
        let inner = &self.inner;
        let round = DecisionRound { turn: turn.pk, decisions, marker: &marker, audit, run, instance: &inner.instance };
        match inner.store.decide_interrupts(&round).await? {
            Decided::Recorded { seq, resumed, run_recorded } => {
                let event = StoredEvent { seq, ..marker };
                inner.log.published(turn.pk, vec![event.clone()]);
                if let Some(epoch) = resumed {
                    self.go_on_from(turn, epoch).await?;
                }
                Ok(Some(Recorded { event, run_recorded }))
            }
            Decided::AlreadyDecided => Ok(None),
        }
    }

    pub(in crate::engine) async fn board(&self, turn: &TurnRow) -> Result<Vec<Value>, StoreError> {
        self.thread_board(turn.thread).await
    }

    /// Sets a turn that a decision (or client results) made runnable going, under the epoch
    /// the decision gave it: here on a serving engine; on a passive one (a command, which holds
    /// no lease, so the turn is lapsed already) it is released for the serving instances.
    pub(in crate::engine) async fn go_on(&self, turn: i64, epoch: i64) -> Result<(), StoreError> {
        let inner = &self.inner;
        if !inner.serving {
            return inner.store.release_turn(turn, &inner.instance, epoch).await;
        }
        match inner.store.turn_by_pk(turn).await? {
            Some(turn) => self.go_on_from(&turn, epoch).await,
            None => Ok(()),
        }
    }

    /// [`Engine::go_on`] from the turn's row as the decider read it (while the turn waited: what
    /// a runner takes from it — its checkpoint, its input — does not change until it runs).
    async fn go_on_from(&self, turn: &TurnRow, epoch: i64) -> Result<(), StoreError> {
        let inner = &self.inner;
        if !inner.serving {
            return inner.store.release_turn(turn.pk, &inner.instance, epoch).await;
        }
        // The row may show an earlier epoch or a later claim; this runner holds the decision's
        // epoch and is fenced off if a later claim happened.
        let mut turn = turn.clone();
        turn.epoch = epoch;
        self.spawn_turn(turn, TurnStart::Takeover);
        Ok(())
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
        let Some(row) = store.find_interrupt(tenant, &entry.interrupt_id).await? else {
            return Err(EngineError::PermissionDenied);
        };
        let Some(turn) = store.turn_by_pk(row.turn).await? else { return Err(EngineError::PermissionDenied) };
        let Some(thread) = self.thread_by_pk(tenant, row.thread).await? else {
            return Err(EngineError::PermissionDenied);
        };
        let roles = caller.roles().to_vec();
        // A decider named by the policy decides without reading the thread (four eyes: the
        // approver is someone else); anyone else learns nothing about the interrupt.
        // Who decides is the gateway's own record: unreadable, it is a fault, never "anyone".
        let deciders: interrupts::Deciders =
            serde_json::from_str(&row.deciders).map_err(|e| EngineError::Unreadable {
                what: format!("interrupt {}'s deciders do not parse", row.id),
                source: Box::new(e),
            })?;
        let decider = interrupts::may_decide(person, &roles, &deciders, row.four_eyes, &row.started_by);
        if !caller.may_read(&thread) && !decider {
            return Err(EngineError::PermissionDenied);
        }
        let interrupts = store.turn_interrupts(turn.pk).await?;
        let plans = check_resume(std::slice::from_ref(entry), &interrupts, person, &roles, self.now_ms(), false)
            .map_err(|r| EngineError::DecisionRefused(Refusal { code: r.code, message: r.message, figures: None }))?;
        let board = self.board(&turn).await?;
        if let Some(changed) = self.supersede_changed(&turn, &plans, &interrupts, &thread.tenant, &board).await? {
            return Err(EngineError::DecisionRefused(changed));
        }
        let recording = Recording { tenant: &thread.tenant, board, run: None };
        let made = self.decide(&turn, &plans, person, via, &recording).await?;
        Ok(made.and_then(|made| made.outcomes.into_iter().next()).unwrap_or(Value::Null))
    }

    pub(in crate::engine) async fn thread_by_pk(
        &self,
        tenant: &str,
        pk: i64,
    ) -> Result<Option<ThreadRow>, EngineError> {
        Ok(self.inner.store.thread_by_pk(pk).await?.filter(|t| t.tenant == tenant))
    }

    /// The open interrupts of `turn` this caller may decide (every one, for an API key), as
    /// AG-UI interrupts; their arguments only for a caller with the content permission.
    pub async fn open_interrupts_for(&self, caller: &Caller, turn: &TurnRow) -> Result<Vec<Value>, EngineError> {
        let viewer = Viewer::of(caller, false);
        let content = viewer.clearance.content;
        let rows = self.inner.store.turn_interrupts(turn.pk).await?;
        Ok(rows
            .iter()
            .filter(|row| row.status == InterruptStatus::Open)
            .filter_map(waiting_of)
            .filter(|waiting| viewer.person.is_none() || waiting.may_be_decided_by(&viewer))
            .filter_map(|waiting| serde_json::to_value(waiting.shown(content, self.console().as_deref())).ok())
            .collect())
    }

    /// Where a person can decide, for a caller who cannot (`gateway/console`).
    pub(in crate::engine) fn console_hint(&self) -> String {
        match self.console() {
            None => String::new(),
            Some(url) => format!(": decide at {url}"),
        }
    }
}

/// The decision event: what was decided, and the board then, for the resume run that starts
/// there. (The turn waits while it is decided, so nothing pins a note meanwhile.)
pub(in crate::engine) fn resumed_marker(
    outcomes: &[Value],
    tool_results: std::collections::BTreeMap<String, crate::protocol::events::ToolResultContent>,
    board: Vec<Value>,
    at_ms: i64,
) -> Result<StoredEvent, EngineError> {
    let encoding = |source| EngineError::Encoding { what: "a decision event", source };
    let event = GatewayEvent::Resumed(ResumedEvent { decisions: outcomes.to_vec(), tool_results, board: Some(board) })
        .into_event()
        .map_err(encoding)?;
    let body = serde_json::to_vec(&crate::protocol::events::Envelope::new(event, at_ms)).map_err(encoding)?;
    Ok(StoredEvent { seq: 0, kind: EventKind::Resumed, body: body.into(), at_ms })
}

/// What a decision is recorded with: the tenant its audit rows name, the board its decision
/// event keeps (the run that starts there opens with it), and the rows of the run that decides,
/// when one does (a resume), committed with the decisions.
pub(in crate::engine) struct Recording<'a> {
    pub tenant: &'a str,
    pub board: Vec<Value>,
    pub run: Option<RunRecord<'a>>,
}

/// The rows of a run that decides: its key, and its stream's `board.read` row (§8) when the
/// stream shows notes' text.
pub(in crate::engine) struct RunRecord<'a> {
    pub key: &'a str,
    pub board_read: Option<AuditEntry>,
}

/// What [`Engine::record`] committed.
pub(in crate::engine) struct Recorded {
    /// The decision event, as committed (the run that made it opens with it).
    pub event: StoredEvent,
    /// Whether the run key given was recorded with it (else it was taken, or none was given).
    pub run_recorded: bool,
}

/// What [`Engine::decide`] made of a request's entries.
pub(in crate::engine) struct Made {
    /// Each entry's outcome.
    pub outcomes: Vec<Value>,
    /// Where the run that made them begins in the log.
    pub start_seq: i64,
    /// What this request committed; `None` when every entry was decided before it.
    pub recorded: Option<Recorded>,
}
