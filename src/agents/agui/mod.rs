//! The `agui` agent (§9.3): fronts an existing AG-UI server (LangGraph, Mastra, Pydantic AI, any
//! `@ag-ui` server). The gateway sends it the thread's conversation from its own record, the
//! tools the client declared and the agent admits, the client's context, forwarded props and
//! state; it checks every event the upstream answers against AG-UI 1.0 (shape and order, as the
//! official client does, chunk events expanded first) and re-serves the events under the
//! gateway's own ids. An upstream interrupt becomes a gateway interrupt (gateway id, deciders,
//! expiry, schema check on resume), whose decisions go back upstream as the next run's
//! `resume`; an upstream call of a client tool ends the run with `pendingToolCallIds`, and the
//! client's result goes back upstream in the conversation of the next run.
//!
//! An upstream run outlives the instance relaying it: the instance that takes the turn over
//! reconnects with `Last-Event-ID` when the upstream gave its events ids (and relays from
//! exactly after the last event the log holds), or else closes what the cut left open and runs
//! the upstream again on the same conversation (`on_cut = "fail"` ends the turn instead).
//!
//! [`check`] holds what an upstream may send, [`chunks`] the chunk expansion, [`memory`] what a
//! turn remembers of its upstream (the live run's position too), [`relay`] the re-serving.

mod check;
mod chunks;
mod memory;
mod relay;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};

use self::check::parse_upstream_event;
use self::memory::{LiveRun, Upstream, UpstreamInterrupt};
use self::relay::{Ending, Relay};
use crate::config::{AguiAgentConfig, OnCut};
use crate::engine::interrupts::Deciders;
use crate::engine::meaning::{Asked, Denial, Meaning, DECISION_KEYS};
use crate::engine::turn::agent::Agent;
use crate::engine::turn::{new_interrupt_id, AgentError, AgentOutput, Checkpoint, Decided, InterruptSpec, TurnContext};
use crate::protocol::sse::SseDecoder;
use crate::protocol::{Event, InputMessage};

#[derive(Debug, Clone)]
pub struct AguiAgent {
    config: AguiAgentConfig,
    http: crate::agents::http::AgentHttp,
}

/// How the next upstream request goes.
enum Attempt {
    /// A new upstream run, with the `resume` entries of the decisions it answers.
    New(Option<Vec<Value>>),
    /// The cut run again, as a new upstream run on the same conversation.
    Again,
    /// The cut run continued after the last event the log holds (`Last-Event-ID`).
    Reconnect,
}

/// Why an upstream request did not give a run to relay.
enum RelayFailure {
    /// The upstream answered no stream at all (unreachable, non-2xx, not SSE).
    Refused(AgentError),
    /// The run failed or broke off while being relayed.
    Broke(AgentError),
}

impl From<AgentError> for RelayFailure {
    fn from(error: AgentError) -> RelayFailure {
        RelayFailure::Broke(error)
    }
}

impl AguiAgent {
    pub fn new(config: AguiAgentConfig, tls: &std::sync::Arc<rustls::ClientConfig>) -> AguiAgent {
        AguiAgent { config, http: crate::agents::http::AgentHttp::new(tls) }
    }
}

fn saved_state(from: &Checkpoint) -> Result<Option<Upstream>, AgentError> {
    from.conversation
        .as_ref()
        .map(|saved| serde_json::from_value(saved.clone()))
        .transpose()
        .map_err(|e| AgentError::Internal(format!("the turn's saved upstream state does not parse: {e}")))
}

#[async_trait]
impl Agent for AguiAgent {
    async fn run(&self, turn: &mut TurnContext, from: Checkpoint) -> Result<AgentOutput, AgentError> {
        let mut state = match saved_state(&from)? {
            Some(state) => state,
            None => {
                let (earlier, elsewhere) = turn.checkpoints_by_branch().await?;
                let earlier = kept_upstreams(&earlier);
                let thread_key = Some(branch_thread_key(turn, &earlier, &kept_upstreams(&elsewhere)).await?);
                let state = earlier.into_iter().next().and_then(|upstream| upstream.state);
                Upstream { state, thread_key, ..Upstream::default() }
            }
        };
        let mut attempt = if !from.awaiting.is_empty() {
            // Each upstream interrupt takes the decision on the gateway interrupt opened for it.
            let decided = turn.decisions(&from.awaiting).await?;
            let mut entries = Vec::with_capacity(state.waiting.len());
            for up in &state.waiting {
                let decision = decided
                    .iter()
                    .find(|d| up.gateway_id.as_deref() == Some(d.interrupt_id.as_str()))
                    .ok_or_else(|| {
                        AgentError::Failed(format!(
                            "no decision answers the upstream interrupt '{}' the turn waited for",
                            up.id
                        ))
                    })?;
                match resume_entry(up, decision) {
                    Ok(entry) => entries.push(entry),
                    // A "no" the upstream's terms cannot say is never sent as something it may
                    // read as a yes: the upstream is not resumed at all (§9.3).
                    Err(why) => return Err(self.refuse_to_resume(turn, &why).await),
                }
            }
            Attempt::New(Some(entries))
        } else if state.streaming {
            if self.config.on_cut == OnCut::Fail {
                return Err(AgentError::Failed(
                    "the upstream agent's run was cut off when the gateway instance relaying it stopped \
                     (on_cut = \"fail\")"
                        .into(),
                ));
            }
            match state.live.as_ref() {
                // The cut came after the upstream's last word: only its ending is left to act on.
                Some(live) if live.finished.is_some() => {
                    let ending = live.finished.clone().and_then(|finished| relay::ending_of(&finished));
                    if let Some(ending) = ending {
                        return self.conclude(turn, state, ending).await;
                    }
                    Attempt::Again
                }
                Some(live) if live.last_event_id.is_some() => Attempt::Reconnect,
                _ => Attempt::Again,
            }
        } else {
            // A new turn, or the client's results of its tools (in the log, so in the
            // conversation the next run is given).
            Attempt::New(None)
        };
        state.waiting.clear();
        state.client_calls.clear();
        let deadline = Duration::from_secs(self.config.timeout_secs);
        let ending = loop {
            let reconnecting = matches!(attempt, Attempt::Reconnect);
            match attempt {
                Attempt::New(resume) => {
                    state.runs += 1;
                    state.live = Some(LiveRun::new(turn, state.runs, turn.next_seq(), resume));
                }
                Attempt::Again => {
                    // What the cut left open ends where the log stopped, and what the cut run said
                    // is withdrawn from the conversation: the run starts over and says it again.
                    let (before, resume) = match state.live.take() {
                        Some(cut) => {
                            turn.withdraw_since(cut.conversation_before).await?;
                            (cut.conversation_before, cut.resume)
                        }
                        None => {
                            turn.close_open_items().await?;
                            (turn.next_seq(), None)
                        }
                    };
                    state.runs += 1;
                    let mut again = LiveRun::new(turn, state.runs, before, resume);
                    again.rerun = true;
                    state.live = Some(again);
                }
                Attempt::Reconnect => {}
            }
            state.streaming = true;
            turn.checkpoint(&checkpoint(&state)).await?;
            let relayed = tokio::time::timeout(deadline, self.relay(turn, &mut state, reconnecting)).await;
            match relayed {
                Ok(Ok(ending)) => break ending,
                Ok(Err(RelayFailure::Refused(why))) if reconnecting => {
                    tracing::info!(turn = %turn.turn_id(), kind = why.kind(), "the upstream did not continue the cut run; running it again");
                    attempt = Attempt::Again;
                }
                Ok(Err(RelayFailure::Refused(error) | RelayFailure::Broke(error))) => return Err(error),
                Err(_) => {
                    return Err(AgentError::TimedOut(format!(
                        "the upstream agent did not finish its run within {} s",
                        self.config.timeout_secs
                    )))
                }
            }
        };
        self.conclude(turn, state, ending).await
    }

    fn continues_cut_items(&self, checkpoint: &Checkpoint) -> bool {
        self.config.on_cut == OnCut::Continue
            && saved_state(checkpoint).ok().flatten().is_some_and(|state| {
                state.streaming
                    && state.live.is_some_and(|live| live.last_event_id.is_some() && live.finished.is_none())
            })
    }
}

impl AguiAgent {
    /// Acts on how an upstream run ended: the turn ends, waits for people, or waits for the
    /// client's results of its tools.
    async fn conclude(
        &self,
        turn: &mut TurnContext,
        mut state: Upstream,
        ending: Ending,
    ) -> Result<AgentOutput, AgentError> {
        state.streaming = false;
        let live = state.live.take().unwrap_or_default();
        match ending {
            // A run again of a cut one that said nothing of its own (an upstream that keeps its
            // own session may take the conversation as already answered): the answer the cut
            // left is not known to be whole, so the turn does not pass it off as finished.
            Ending::Finished { pending, .. } if live.rerun && !live.answered && pending.is_empty() => {
                tracing::warn!(
                    turn = %turn.turn_id(),
                    upstream_run = %live.run_id,
                    "the upstream was run again after a cut and answered nothing; the turn fails with its answer cut"
                );
                Err(AgentError::Failed(format!(
                    "the upstream agent's run was cut off when the gateway instance relaying it stopped, and \
                     running it again (upstream run '{}') gave no answer: the answer stays cut; ask again",
                    live.run_id
                )))
            }
            // Any run that ends without doing anything — no text, no tool call or result, no
            // activity, no state, nothing owed by the client — answered nothing: an upstream
            // that keeps its own session may take a message it has seen as answered already.
            // The turn does not pass that off as an answer (§9.3).
            Ending::Finished { pending, .. } if !live.answered && !live.changed_state && pending.is_empty() => {
                tracing::warn!(
                    turn = %turn.turn_id(),
                    upstream_run = %live.run_id,
                    "the upstream's run ended without an answer; the turn fails"
                );
                Err(AgentError::Failed(format!(
                    "the upstream agent ended its run (upstream run '{}') without answering: nothing was said or \
                     done; ask again",
                    live.run_id
                )))
            }
            Ending::Finished { result, usage, pending } => {
                let mut owed = live.client_calls;
                for upstream_id in pending {
                    if let Some(id) = state.calls.get(&upstream_id) {
                        if !owed.contains(id) {
                            owed.push(id.clone());
                        }
                    }
                }
                if !owed.is_empty() {
                    // Only the client can run these: the run ends with them pending (§9.2).
                    state.client_calls = owed.clone();
                    return Err(turn.wait_for_client(owed, checkpoint(&state)).await);
                }
                turn.checkpoint(&checkpoint(&state)).await?;
                Ok(AgentOutput { result, usage })
            }
            Ending::Interrupted(interrupts) => {
                let now_ms = turn.now_ms();
                let specs: Vec<InterruptSpec> = interrupts.iter().map(|i| self.spec(i, &state, now_ms)).collect();
                state.waiting = interrupts
                    .into_iter()
                    .zip(&specs)
                    .map(|(i, spec)| UpstreamInterrupt {
                        id: i.id,
                        gateway_id: Some(spec.id.clone()),
                        response_schema: i.response_schema,
                        refusal: spec.refusal.clone(),
                    })
                    .collect();
                Err(turn.wait_for(specs, checkpoint(&state)).await)
            }
        }
    }

    /// Ends the turn `cancelled` without resuming the upstream, saying why in a message: a
    /// decision's "no" has no form in the upstream's terms (an option list without the agent's
    /// `deny_option`), so whatever the upstream proposed does not run.
    async fn refuse_to_resume(&self, turn: &mut TurnContext, why: &str) -> AgentError {
        let said = async {
            let message = turn.text_start().await?;
            let words = format!(
                "The upstream agent was not resumed, so nothing it asked about was done: {why}. The turn ends here."
            );
            turn.text_delta(&message, &words).await?;
            turn.text_end(&message).await
        };
        match said.await {
            Ok(()) => {
                tracing::warn!(turn = %turn.turn_id(), why, "a denial cannot be said in the upstream's terms; the turn is cancelled");
                AgentError::Cancelled
            }
            Err(error) => error,
        }
    }

    /// The upstream's input for the live run: its thread (per tenant, so tenants sharing an
    /// upstream never share a thread), the conversation from the gateway's record, the client's
    /// admitted tools, context, forwarded props, and the state (docs/agents.md, key by key).
    async fn input(&self, turn: &TurnContext, state: &Upstream) -> Result<Value, AgentError> {
        let (run_id, conversation_before, resume) = match &state.live {
            Some(live) => (live.run_id.as_str(), live.conversation_before, live.resume.as_ref()),
            None => ("", turn.next_seq(), None),
        };
        let thread_key = match &state.thread_key {
            Some(key) => key.clone(),
            None => default_thread_key(turn).await?,
        };
        let mut messages = turn.conversation_before(conversation_before).await?;
        // What the upstream said, in earlier turns of the thread and in this one, goes back
        // under its own ids.
        let mut ids = BTreeMap::new();
        for earlier in earlier_turns(turn).await?.into_iter().rev() {
            ids.extend(earlier.upstream_ids);
        }
        ids.extend(state.upstream_ids.iter().map(|(ours, theirs)| (ours.clone(), theirs.clone())));
        in_upstream_terms(&mut messages, &ids);
        let offered = if self.config.send_tools { turn.client_tools() } else { &[] };
        let tools: Vec<Value> = offered
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                })
            })
            .collect();
        let client = turn.client_input();
        let context = if self.config.send_context { json!(client.context) } else { json!([]) };
        let forwarded_props = match (&client.forwarded_props, self.config.send_forwarded_props) {
            (Some(Value::Object(props)), true) => {
                let kept: Map<String, Value> = props
                    .iter()
                    .filter(|(key, _)| self.config.forwarded_props_keys.as_ref().is_none_or(|keys| keys.contains(key)))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                Value::Object(kept)
            }
            (Some(other), true) if self.config.forwarded_props_keys.is_none() => other.clone(),
            _ => json!({}),
        };
        let mut upstream_state = match &state.state {
            Some(Value::Object(own)) if self.config.send_state => own.clone(),
            _ => Map::new(),
        };
        if self.config.send_state {
            upstream_state.extend(turn.editable_state().await?);
        }
        let mut input = json!({
            "threadId": thread_key,
            "runId": run_id,
            "protocolVersion": crate::protocol::PROTOCOL_VERSION,
            "state": upstream_state,
            "messages": messages,
            "tools": tools,
            "context": context,
            "forwardedProps": forwarded_props,
        });
        if let Some(resume) = resume {
            input["resume"] = Value::Array(resume.clone());
        }
        Ok(input)
    }

    /// Posts the live run upstream (again, with `Last-Event-ID`, when `reconnecting`) and relays
    /// its events to the turn, each checked first.
    async fn relay(
        &self,
        turn: &mut TurnContext,
        state: &mut Upstream,
        reconnecting: bool,
    ) -> Result<Ending, RelayFailure> {
        let input = self.input(turn, state).await.map_err(RelayFailure::Refused)?;
        let refused = |why: String| RelayFailure::Refused(AgentError::Failed(why));
        let http = self.http.client().map_err(|why| refused(why.to_string()))?;
        let mut request = http
            .post(&self.config.url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(input.to_string());
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        for (name, variable) in &self.config.secret_headers {
            if let Ok(value) = std::env::var(variable) {
                request = request.header(name.as_str(), value);
            }
        }
        let last_event_id = state.live.as_ref().and_then(|live| live.last_event_id.clone());
        if let (true, Some(id)) = (reconnecting, &last_event_id) {
            request = request.header("last-event-id", id.as_str());
        }
        // A cancel (or a hand-over) closes the connection at once: to an AG-UI upstream, whose
        // protocol has no cancel of its own, that is the cancel.
        let stopped = RelayFailure::Broke;
        let response = turn.unless_stopped(request.send()).await.map_err(stopped)?.map_err(|e| {
            refused(format!("the upstream agent could not be reached: {}", crate::agents::http::unreachable_reason(e)))
        })?;
        let status = response.status();
        if status.is_redirection() {
            // Not followed: the redirect could carry the secret headers to another address.
            return Err(refused(format!(
                "the upstream agent answered {status}, a redirect, which is not followed; url must be the final address"
            )));
        }
        if !status.is_success() {
            return Err(refused(format!("the upstream agent answered {status}")));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !content_type.starts_with("text/event-stream") {
            return Err(refused(format!("the upstream agent answered '{content_type}', not text/event-stream")));
        }
        // A call of a tool the upstream was not offered is the upstream's own, relayed as it is.
        let client_tools: Vec<String> = match self.config.send_tools {
            true => turn.client_tools().iter().map(|t| t.name.clone()).collect(),
            false => Vec::new(),
        };
        let mut decoder = SseDecoder::new();
        let mut first = true;
        let mut body = response.bytes_stream();
        let stop = turn.stop_asked();
        tokio::pin!(stop);
        loop {
            let next = tokio::select! {
                biased;
                why = &mut stop => return Err(RelayFailure::Broke(why)),
                next = body.next() => next,
            };
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(|e| AgentError::FailedOn {
                what: "the upstream agent's stream broke off".into(),
                source: Box::new(e.without_url()),
            })?;
            // The events of one read go to the log as one append (held, then released); an
            // event with an id still commits with its checkpoint as soon as it is relayed.
            turn.begin_step();
            let relayed =
                self.relay_read(turn, state, decoder.push(&chunk), &mut first, reconnecting, &client_tools).await;
            // What was relayed before an ending or a failure is logged as it was before it.
            let released = turn.release_held().await;
            let ending = relayed?;
            released?;
            if let Some(ending) = ending {
                return Ok(ending);
            }
        }
        Err(RelayFailure::Broke(AgentError::Failed("the upstream agent's stream ended before its run finished".into())))
    }

    /// Relays the events of one read of the upstream's stream, in order, until one ends the
    /// run (its ending returned).
    async fn relay_read(
        &self,
        turn: &mut TurnContext,
        state: &mut Upstream,
        messages: Vec<crate::protocol::sse::SseMessage>,
        first: &mut bool,
        reconnecting: bool,
        client_tools: &[String],
    ) -> Result<Option<Ending>, RelayFailure> {
        let refused = |why: String| RelayFailure::Refused(AgentError::Failed(why));
        for message in messages {
            let event = parse_upstream_event(&message.data)?;
            let opening = std::mem::take(first) && reconnecting;
            if let (true, Event::RunError { message, .. }) = (opening, &event) {
                // It could not continue the run (it no longer knows it, or the id): run it again.
                return Err(refused(format!("the upstream agent did not continue the run: {message}")));
            }
            if opening && matches!(event, Event::RunStarted { .. }) {
                // The upstream began the run anew instead of continuing it: what the cut
                // left open ends, what the cut run said is withdrawn, and this is the run from
                // its start.
                match state.live.as_mut() {
                    Some(live) => {
                        turn.withdraw_since(live.conversation_before).await?;
                        live.restart();
                    }
                    None => turn.close_open_items().await?,
                }
            }
            // Each event with an id commits with the position it leaves the run at.
            let tracked = message.has_own_id;
            if tracked {
                turn.begin_step();
            }
            let live = state.live.get_or_insert_with(LiveRun::default);
            let expanded =
                live.chunks.expand(event).map_err(|why| AgentError::Failed(format!("the upstream agent {why}")))?;
            let mut ending = None;
            for event in expanded {
                let live = state.live.get_or_insert_with(LiveRun::default);
                live.order.check(&event).map_err(|why| AgentError::Failed(format!("the upstream agent {why}")))?;
                let finished = matches!(event, Event::RunFinished { .. }).then(|| message.data.clone());
                let mut relay = Relay { state: &mut *state, client_tools };
                if let Some(end) = relay.forward(turn, event).await? {
                    ending = Some(end);
                    if let Some(live) = state.live.as_mut() {
                        live.finished = finished;
                    }
                }
            }
            if let Some(live) = state.live.as_mut() {
                live.last_event_id = if tracked { message.id.clone() } else { None };
            }
            if tracked {
                turn.append_step(&checkpoint(state)).await?;
                // The rest of the read is held again.
                turn.begin_step();
            }
            if ending.is_some() {
                return Ok(ending);
            }
        }
        Ok(None)
    }

    /// The gateway's interrupt for an upstream's, open until the upstream's `expiresAt` as read
    /// at `now` (the engine's clock), else for the configured TTL.
    fn spec(&self, interrupt: &crate::protocol::events::Interrupt, state: &Upstream, now: i64) -> InterruptSpec {
        let ttl_ms = interrupt
            .expires_at
            .as_deref()
            .filter(|at| at.contains('T'))
            .and_then(|at| crate::auth::time::parse_since(at, now))
            .map(|at| at - now)
            .unwrap_or(self.config.interrupt_ttl_secs as i64 * 1000)
            .max(1000);
        // No schema upstream: any payload is checked only for its meaning (a yes or no).
        let response_schema = interrupt.response_schema.clone().unwrap_or_else(|| json!({}));
        // A list of options is a question whose choices the person sees; the agent's
        // `deny_option` among them is what a "no" is sent as.
        let (choices, refusal) = match Asked::of(Some(&response_schema), self.config.deny_option.as_deref()) {
            Asked::Choice { options, refusal, .. } => (options, refusal),
            _ => (Vec::new(), None),
        };
        InterruptSpec {
            id: new_interrupt_id(),
            reason: interrupt.reason.clone(),
            message: interrupt.message.clone().unwrap_or_else(|| "The agent needs a decision.".into()),
            tool_call_id: interrupt.tool_call_id.as_ref().and_then(|id| state.calls.get(id).cloned()),
            response_schema,
            ttl_ms,
            deciders: Deciders::from_config(&self.config.deciders),
            four_eyes: self.config.four_eyes,
            details: None,
            asks_because: None,
            choices,
            refusal,
        }
    }
}

/// The upstream thread of a thread's first branch: per tenant, so tenants sharing an upstream
/// never share a thread.
async fn default_thread_key(turn: &TurnContext) -> Result<String, AgentError> {
    let (tenant, thread) = turn.thread().await?;
    Ok(format!("{tenant}:{thread}"))
}

/// The upstream thread a new turn's runs use (§6, §9.3). A turn goes on in the upstream thread of
/// the turn before it on its branch (`earlier`, newest first). But an upstream that keeps its own
/// session per thread (Google ADK, a LangGraph checkpointer) has then also seen what another
/// branch said there: a regenerate or an edit would meet a session that has seen its message
/// and answers nothing. So a turn whose upstream thread another branch has used starts an
/// upstream thread of its own, named after it, given the branch's whole conversation.
/// (`elsewhere`: what the agent kept in the thread's turns on other branches.)
async fn branch_thread_key(
    turn: &TurnContext,
    earlier: &[Upstream],
    elsewhere: &[Upstream],
) -> Result<String, AgentError> {
    let default = default_thread_key(turn).await?;
    let inherited = earlier.iter().find_map(|upstream| upstream.thread_key.clone()).unwrap_or_else(|| default.clone());
    let used_elsewhere =
        elsewhere.iter().any(|upstream| upstream.thread_key.as_ref().unwrap_or(&default) == &inherited);
    Ok(match used_elsewhere {
        true => format!("{default}:{}", turn.turn_id()),
        false => inherited,
    })
}

/// What this agent kept of its upstream in the thread's earlier turns, newest first.
async fn earlier_turns(turn: &TurnContext) -> Result<Vec<Upstream>, AgentError> {
    Ok(kept_upstreams(&turn.earlier_checkpoints().await?))
}

/// What this agent kept of its upstream in each of the `saved` checkpoints that hold it.
fn kept_upstreams(saved: &[String]) -> Vec<Upstream> {
    saved
        .iter()
        .filter_map(|saved| serde_json::from_str::<Checkpoint>(saved).ok()?.conversation)
        .filter_map(|kept| serde_json::from_value::<Upstream>(kept).ok())
        .collect()
}

/// Renames the gateway's ids of what the upstream said (messages, tool calls, results) to the
/// upstream's own, in the conversation it is sent.
fn in_upstream_terms(messages: &mut [InputMessage], ids: &BTreeMap<String, String>) {
    let rename = |id: &mut String| {
        if let Some(theirs) = ids.get(id.as_str()) {
            id.clone_from(theirs);
        }
    };
    for message in messages {
        match message {
            InputMessage::Assistant(assistant) => {
                rename(&mut assistant.id);
                for call in assistant.tool_calls.iter_mut().flatten() {
                    rename(&mut call.id);
                }
            }
            InputMessage::Tool(tool) => {
                rename(&mut tool.id);
                rename(&mut tool.tool_call_id);
            }
            _ => {}
        }
    }
}

fn checkpoint(state: &Upstream) -> Checkpoint {
    Checkpoint { conversation: serde_json::to_value(state).ok(), ..Checkpoint::default() }
}

/// The upstream's resume entry for one decision: its one meaning (§5.3), told in the terms of
/// the interrupt the upstream sent (docs/agents.md, "Decisions upstream"). What the person sent
/// says it in those terms already — a yes or no under the upstream's own key, one of its
/// options, an answer — and goes as they sent it (a yes or no under a key of ours the upstream's
/// schema does not list gets the upstream's key besides). A "no" nobody sent (a cancel, an
/// expiry) is the upstream's key set to `false`, or its refusal option; a "no" to an interrupt
/// with no schema, and a declined free answer, are `cancelled`. Where the upstream lists
/// options and none is named as its "no" (`deny_option`), there is no saying no: `Err` with
/// why, and the upstream is not resumed.
fn resume_entry(upstream: &UpstreamInterrupt, decided: &Decided) -> Result<Value, String> {
    let asked = Asked::of(upstream.response_schema.as_ref(), upstream.refusal.as_deref());
    let meaning = decided.meaning();
    let resolved = |payload: Value| json!({ "interruptId": upstream.id, "status": "resolved", "payload": payload });
    let yes_or_no = |approved: bool, sent: Option<Value>| {
        let mut payload = match sent {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        // The keys the upstream reads a yes or no under: its schema's, else any of ours.
        let keys: Vec<String> = match &asked {
            Asked::YesNo { keys } => keys.clone(),
            _ => DECISION_KEYS.iter().map(|key| key.to_string()).collect(),
        };
        if !keys.iter().any(|key| payload.contains_key(key)) {
            payload.insert(keys[0].clone(), Value::Bool(approved));
        }
        resolved(Value::Object(payload))
    };
    match meaning {
        Meaning::Approve { .. } => Ok(yes_or_no(true, decided.payload())),
        Meaning::Answer { value, .. } => Ok(resolved(decided.payload().unwrap_or(value))),
        Meaning::Deny { why, .. } => {
            let sent = if why == Denial::Said { decided.payload() } else { None };
            match &asked {
                Asked::Choice { refusal: Some(refusal), key, .. } => Ok(resolved(match key {
                    Some(key) => json!({ key.as_str(): refusal }),
                    None => json!(refusal),
                })),
                Asked::Choice { refusal: None, options, .. } => Err(format!(
                    "its question '{}' offers the options {} and the agent names none of them as the refusal \
                     (deny_option), so a denial cannot be said to it",
                    upstream.id,
                    options.join(", ")
                )),
                // No schema (Google ADK's confirmations): the upstream named no key of its
                // own, and may read any `resolved` as a yes; AG-UI's own "no" is `cancelled`
                // (with the person's payload, which says `approved: false`, where they sent one).
                Asked::Unstated => Ok(match sent {
                    Some(payload) => json!({ "interruptId": upstream.id, "status": "cancelled", "payload": payload }),
                    None => json!({ "interruptId": upstream.id, "status": "cancelled" }),
                }),
                Asked::Value { .. } if sent.is_none() => {
                    Ok(json!({ "interruptId": upstream.id, "status": "cancelled" }))
                }
                Asked::Value { .. } | Asked::YesNo { .. } => Ok(yes_or_no(false, sent)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
