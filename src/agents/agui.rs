//! The `agui` agent (§9.3): fronts an existing AG-UI server (LangGraph, Mastra, Pydantic AI, any
//! `@ag-ui` server). The gateway sends it the thread's history from its own record and the new
//! message, checks every event it answers against AG-UI 1.0 (shape and order, as the official
//! client does), and re-serves the events under the gateway's own ids. An upstream interrupt
//! becomes a gateway interrupt (gateway id, deciders, expiry, schema check on resume); the
//! decisions go back upstream as the next run's `resume`.
//!
//! An upstream run cannot be continued by another gateway instance: a turn taken over in the
//! middle of one ends `failed`, saying so. Between upstream runs (while it waits for a person)
//! it moves freely.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::config::AguiAgentConfig;
use crate::engine::agent::Agent;
use crate::engine::interrupts::Deciders;
use crate::engine::turn::{new_interrupt_id, AgentError, AgentOutput, Checkpoint, InterruptSpec, TurnContext};
use crate::protocol::events::{Envelope, RunOutcome, ToolResultContent};
use crate::protocol::{Event, TokenUsage};

#[derive(Debug, Clone)]
pub struct AguiAgent {
    config: AguiAgentConfig,
    http: super::AgentHttp,
}

/// What a turn remembers between upstream runs (in its checkpoint).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Upstream {
    /// Upstream runs started in this turn.
    runs: u32,
    /// An upstream run was under way at the last checkpoint.
    streaming: bool,
    /// The upstream interrupts the turn waits on, each with the gateway interrupt standing for it.
    waiting: Vec<UpstreamInterrupt>,
    /// Upstream tool call ids → the gateway's, so a later result names the right call.
    calls: BTreeMap<String, String>,
    /// Upstream activity message ids → the gateway's: a later run's snapshot or delta of the
    /// same activity updates the same message.
    #[serde(default)]
    activities: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct UpstreamInterrupt {
    /// The upstream's own id (what its `resume` names).
    id: String,
    /// The gateway interrupt opened for it, whose decision goes back upstream.
    #[serde(default)]
    gateway_id: Option<String>,
    #[serde(default)]
    response_schema: Option<Value>,
}

/// How an upstream run ended.
enum Ending {
    Finished { result: Option<Value>, usage: Option<Vec<TokenUsage>> },
    Interrupted(Vec<crate::protocol::events::Interrupt>),
}

impl AguiAgent {
    pub fn new(config: AguiAgentConfig, tls: &std::sync::Arc<rustls::ClientConfig>) -> AguiAgent {
        AguiAgent { config, http: super::AgentHttp::new(tls) }
    }
}

#[async_trait]
impl Agent for AguiAgent {
    async fn run(&self, turn: &mut TurnContext, from: Checkpoint) -> Result<AgentOutput, AgentError> {
        let mut state: Upstream = match &from.conversation {
            Some(saved) => serde_json::from_value(saved.clone())
                .map_err(|e| AgentError::Internal(format!("the turn's saved upstream state does not parse: {e}")))?,
            None => Upstream::default(),
        };
        let resume = if !from.awaiting.is_empty() {
            // Each upstream interrupt takes the decision on the gateway interrupt opened for it.
            let decided = turn.decisions(&from.awaiting).await?;
            let entries = state
                .waiting
                .iter()
                .map(|up| {
                    let decision = decided
                        .iter()
                        .find(|d| up.gateway_id.as_deref() == Some(d.interrupt_id.as_str()))
                        .ok_or_else(|| {
                        AgentError::Failed(format!(
                            "no decision answers the upstream interrupt '{}' the turn waited for",
                            up.id
                        ))
                    })?;
                    Ok(resume_entry(up, decision.decision.clone()))
                })
                .collect::<Result<Vec<_>, AgentError>>()?;
            Some(entries)
        } else if state.streaming {
            return Err(AgentError::Failed(
                "the upstream agent's run was cut off when the gateway instance relaying it stopped; an AG-UI \
                 run cannot be continued from elsewhere"
                    .into(),
            ));
        } else {
            None
        };
        state.waiting.clear();
        state.runs += 1;
        state.streaming = true;
        turn.checkpoint(&checkpoint(&state)).await?;
        let input = self.input(turn, &state, resume).await?;
        let deadline = Duration::from_secs(self.config.timeout_secs);
        let ending = match tokio::time::timeout(deadline, self.relay(turn, &input, &mut state)).await {
            Ok(ending) => ending?,
            Err(_) => {
                return Err(AgentError::TimedOut(format!(
                    "the upstream agent did not finish its run within {} s",
                    self.config.timeout_secs
                )))
            }
        };
        state.streaming = false;
        match ending {
            Ending::Finished { result, usage } => {
                turn.checkpoint(&checkpoint(&state)).await?;
                Ok(AgentOutput { result, usage })
            }
            Ending::Interrupted(interrupts) => {
                let specs: Vec<InterruptSpec> = interrupts.iter().map(|i| self.spec(i, &state)).collect();
                state.waiting = interrupts
                    .into_iter()
                    .zip(&specs)
                    .map(|(i, spec)| UpstreamInterrupt {
                        id: i.id,
                        gateway_id: Some(spec.id.clone()),
                        response_schema: i.response_schema,
                    })
                    .collect();
                Err(turn.wait_for(specs, checkpoint(&state)).await)
            }
        }
    }
}

impl AguiAgent {
    /// The upstream's input: its thread (per tenant, so tenants sharing an upstream never share
    /// a thread), the thread's history from the gateway's record and the new message.
    async fn input(
        &self,
        turn: &TurnContext,
        state: &Upstream,
        resume: Option<Vec<Value>>,
    ) -> Result<Value, AgentError> {
        let (tenant, thread) = turn.thread().await?;
        let messages = turn.history_and_message().await?;
        let mut input = json!({
            "threadId": format!("{tenant}:{thread}"),
            "runId": format!("{}-{}", turn.turn_id(), state.runs),
            "protocolVersion": crate::protocol::PROTOCOL_VERSION,
            "state": {},
            "messages": messages,
            "tools": [],
            "context": [],
            "forwardedProps": {},
        });
        if let Some(resume) = resume {
            input["resume"] = Value::Array(resume);
        }
        Ok(input)
    }

    /// Posts one run upstream and relays its events to the turn, each checked first.
    async fn relay(&self, turn: &mut TurnContext, input: &Value, state: &mut Upstream) -> Result<Ending, AgentError> {
        let http = self.http.client().map_err(|why| AgentError::Failed(why.to_string()))?;
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
        let response = request.send().await.map_err(|e| {
            AgentError::Failed(format!("the upstream agent could not be reached: {}", super::unreachable_reason(e)))
        })?;
        let status = response.status();
        if status.is_redirection() {
            // Not followed: the redirect could carry the secret headers to another address.
            return Err(AgentError::Failed(format!(
                "the upstream agent answered {status}, a redirect, which is not followed; url must be the final address"
            )));
        }
        if !status.is_success() {
            return Err(AgentError::Failed(format!("the upstream agent answered {status}")));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if !content_type.starts_with("text/event-stream") {
            return Err(AgentError::Failed(format!(
                "the upstream agent answered '{content_type}', not text/event-stream"
            )));
        }
        let mut checker = UpstreamOrder::default();
        let mut relay = Relay { state, messages: BTreeMap::new(), spans: BTreeMap::new(), thoughts: BTreeMap::new() };
        let mut frames = SseFrames::default();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                AgentError::Failed(format!("the upstream agent's stream broke off ({})", e.without_url()))
            })?;
            for data in frames.push(&chunk) {
                let event = parse_upstream_event(&data)?;
                checker.check(&event).map_err(|why| AgentError::Failed(format!("the upstream agent {why}")))?;
                if let Some(ending) = relay.forward(turn, event).await? {
                    return Ok(ending);
                }
            }
        }
        Err(AgentError::Failed("the upstream agent's stream ended before its run finished".into()))
    }

    fn spec(&self, interrupt: &crate::protocol::events::Interrupt, state: &Upstream) -> InterruptSpec {
        let now = crate::protocol::now_ms();
        let ttl_ms = interrupt
            .expires_at
            .as_deref()
            .filter(|at| at.contains('T'))
            .and_then(|at| crate::auth::time::parse_since(at, now))
            .map(|at| at - now)
            .unwrap_or(self.config.interrupt_ttl_secs as i64 * 1000)
            .max(1000);
        InterruptSpec {
            id: new_interrupt_id(),
            reason: interrupt.reason.clone(),
            message: interrupt.message.clone().unwrap_or_else(|| "The agent needs a decision.".into()),
            tool_call_id: interrupt.tool_call_id.as_ref().and_then(|id| state.calls.get(id).cloned()),
            // No schema upstream: any payload is passed on.
            response_schema: interrupt.response_schema.clone().unwrap_or_else(|| json!({})),
            ttl_ms,
            deciders: Deciders::from_config(&self.config.deciders),
            four_eyes: self.config.four_eyes,
            details: None,
            choices: Vec::new(),
        }
    }
}

fn checkpoint(state: &Upstream) -> Checkpoint {
    Checkpoint { conversation: serde_json::to_value(state).ok(), ..Checkpoint::default() }
}

/// The upstream's resume entry for one decision: a cancel or an expiry is `cancelled`; else
/// `resolved` with what the person sent (without the gateway's own `approved` flag, unless the
/// upstream's schema asks for it).
fn resume_entry(upstream: &UpstreamInterrupt, decision: Value) -> Value {
    let cancelled = decision.get("cancelled").and_then(Value::as_bool).unwrap_or(false)
        || decision.get("expired").and_then(Value::as_bool).unwrap_or(false);
    if cancelled {
        return json!({ "interruptId": upstream.id, "status": "cancelled" });
    }
    let mut payload = match decision {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let wants_approved = upstream.response_schema.as_ref().is_some_and(|s| s["properties"].get("approved").is_some());
    if !wants_approved {
        payload.remove("approved");
    }
    json!({ "interruptId": upstream.id, "status": "resolved", "payload": payload })
}

/// One upstream event, checked as the official client checks it: JSON, no `null` where AG-UI
/// wants a field absent, an integer timestamp, and the event's own schema.
fn parse_upstream_event(data: &str) -> Result<Event, AgentError> {
    let invalid = |why: String| AgentError::Failed(format!("the upstream agent sent an invalid event: {why}"));
    let value: Value = serde_json::from_str(data).map_err(|e| invalid(format!("not JSON ({e})")))?;
    let object = value.as_object().ok_or_else(|| invalid("not a JSON object".into()))?;
    let kind = object.get("type").and_then(Value::as_str).unwrap_or("?").to_string();
    // Required payloads may be null; every optional field must be absent instead.
    const MAY_BE_NULL: [&str; 3] = ["snapshot", "value", "event"];
    if let Some((field, _)) = object.iter().find(|(k, v)| v.is_null() && !MAY_BE_NULL.contains(&k.as_str())) {
        return Err(invalid(format!("{kind}.{field} is null")));
    }
    if let Some(timestamp) = object.get("timestamp") {
        if timestamp.as_i64().is_none() {
            return Err(invalid(format!("{kind}.timestamp is not an integer")));
        }
    }
    let envelope: Envelope = serde_json::from_value(value).map_err(|e| invalid(format!("{kind}: {e}")))?;
    Ok(envelope.event)
}

/// The ordering rules of AG-UI 1.0 (what the official client's verification enforces), for
/// the events the gateway relays.
#[derive(Default)]
struct UpstreamOrder {
    started: bool,
    messages: HashSet<String>,
    calls: HashSet<String>,
    steps: HashSet<String>,
    /// Reasoning spans and reasoning messages are tracked apart, as the client tracks them.
    reasoning_spans: HashSet<String>,
    reasoning_messages: HashSet<String>,
}

impl UpstreamOrder {
    fn check(&mut self, event: &Event) -> Result<(), String> {
        if !self.started {
            return match event {
                Event::RunStarted { .. } => {
                    self.started = true;
                    Ok(())
                }
                Event::RunError { .. } => Ok(()),
                _ => Err(format!("sent {} before RUN_STARTED", event_name(event))),
            };
        }
        let open = |set: &HashSet<String>, id: &str, what: &str| {
            if set.contains(id) {
                Ok(())
            } else {
                Err(format!("sent {what} for '{id}', which is not open"))
            }
        };
        match event {
            Event::RunStarted { .. } => return Err("sent RUN_STARTED twice".into()),
            Event::TextMessageStart { message_id, .. } => {
                if !self.messages.insert(message_id.clone()) {
                    return Err(format!("started message '{message_id}' twice"));
                }
            }
            Event::TextMessageContent { message_id, .. } => open(&self.messages, message_id, "TEXT_MESSAGE_CONTENT")?,
            Event::TextMessageEnd { message_id, .. } => {
                open(&self.messages, message_id, "TEXT_MESSAGE_END")?;
                self.messages.remove(message_id);
            }
            Event::ToolCallStart { tool_call_id, .. } => {
                if !self.calls.insert(tool_call_id.clone()) {
                    return Err(format!("started tool call '{tool_call_id}' twice"));
                }
            }
            Event::ToolCallArgs { tool_call_id, .. } => open(&self.calls, tool_call_id, "TOOL_CALL_ARGS")?,
            Event::ToolCallEnd { tool_call_id, .. } => {
                open(&self.calls, tool_call_id, "TOOL_CALL_END")?;
                self.calls.remove(tool_call_id);
            }
            Event::StepStarted { step_name, .. } => {
                if !self.steps.insert(step_name.clone()) {
                    return Err(format!("started step '{step_name}' twice"));
                }
            }
            Event::StepFinished { step_name, .. } => {
                open(&self.steps, step_name, "STEP_FINISHED")?;
                self.steps.remove(step_name);
            }
            Event::ReasoningStart { message_id, .. } => {
                if !self.reasoning_spans.insert(message_id.clone()) {
                    return Err(format!("started reasoning span '{message_id}' twice"));
                }
            }
            Event::ReasoningEnd { message_id, .. } => {
                open(&self.reasoning_spans, message_id, "REASONING_END")?;
                self.reasoning_spans.remove(message_id);
            }
            Event::ReasoningMessageStart { message_id, role, .. } => {
                if role != "reasoning" {
                    return Err(format!("sent REASONING_MESSAGE_START with role '{role}', not 'reasoning'"));
                }
                if !self.reasoning_messages.insert(message_id.clone()) {
                    return Err(format!("started reasoning message '{message_id}' twice"));
                }
            }
            Event::ReasoningMessageContent { message_id, .. } => {
                open(&self.reasoning_messages, message_id, "REASONING_MESSAGE_CONTENT")?
            }
            Event::ReasoningMessageEnd { message_id, .. } => {
                open(&self.reasoning_messages, message_id, "REASONING_MESSAGE_END")?;
                self.reasoning_messages.remove(message_id);
            }
            Event::ActivityDelta { patch, .. } => check_patch(patch, "ACTIVITY_DELTA")?,
            Event::StateDelta { delta, .. } => check_patch(delta, "STATE_DELTA")?,
            Event::RunFinished { outcome, .. } => {
                if !(self.messages.is_empty() && self.calls.is_empty() && self.steps.is_empty()) {
                    return Err("sent RUN_FINISHED with messages, tool calls or steps still open".into());
                }
                if !(self.reasoning_spans.is_empty() && self.reasoning_messages.is_empty()) {
                    return Err("sent RUN_FINISHED with reasoning still open".into());
                }
                if let Some(RunOutcome::Interrupt { interrupts }) = outcome {
                    if interrupts.is_empty() {
                        return Err("sent an interrupt outcome without interrupts".into());
                    }
                }
            }
            Event::TextMessageChunk { .. } | Event::ToolCallChunk { .. } | Event::ReasoningMessageChunk { .. } => {
                return Err("sent chunk events, which this gateway does not relay yet".into())
            }
            _ => {}
        }
        Ok(())
    }
}

/// A JSON Patch as the client's schema wants it: a known op, RFC 6901 pointers, and a value
/// where the op needs one.
fn check_patch(patch: &[crate::protocol::events::PatchOp], kind: &str) -> Result<(), String> {
    let pointer = |p: &str| p.is_empty() || p.starts_with('/');
    for op in patch {
        if !["add", "remove", "replace", "move", "copy", "test"].contains(&op.op.as_str()) {
            return Err(format!("sent {kind} with an unknown patch op '{}'", op.op));
        }
        if !pointer(&op.path) || op.from.as_deref().is_some_and(|from| !pointer(from)) {
            return Err(format!("sent {kind} with a path that is not a JSON pointer"));
        }
        if ["add", "replace", "test"].contains(&op.op.as_str()) && op.value.is_none() {
            return Err(format!("sent {kind} with a '{}' op without a value", op.op));
        }
        if ["move", "copy"].contains(&op.op.as_str()) && op.from.is_none() {
            return Err(format!("sent {kind} with a '{}' op without 'from'", op.op));
        }
    }
    Ok(())
}

fn event_name(event: &Event) -> String {
    serde_json::to_value(event).ok().and_then(|v| v["type"].as_str().map(str::to_string)).unwrap_or_default()
}

/// Re-serves checked upstream events under the gateway's ids.
struct Relay<'a> {
    state: &'a mut Upstream,
    /// Upstream message ids → the gateway's, for this upstream run.
    messages: BTreeMap<String, String>,
    /// Upstream reasoning span ids → the gateway's, for this upstream run.
    spans: BTreeMap<String, String>,
    /// Upstream reasoning message ids → the gateway's, for this upstream run.
    thoughts: BTreeMap<String, String>,
}

impl Relay<'_> {
    async fn forward(&mut self, turn: &mut TurnContext, event: Event) -> Result<Option<Ending>, AgentError> {
        match event {
            Event::TextMessageStart { message_id, .. } => {
                let id = turn.text_start().await?;
                self.messages.insert(message_id, id);
            }
            Event::TextMessageContent { message_id, delta, .. } => {
                if let (Some(id), false) = (self.messages.get(&message_id), delta.is_empty()) {
                    turn.text_delta(&id.clone(), &delta).await?;
                }
            }
            Event::TextMessageEnd { message_id, .. } => {
                if let Some(id) = self.messages.remove(&message_id) {
                    turn.text_end(&id).await?;
                }
            }
            Event::ToolCallStart { tool_call_id, tool_call_name, .. } => {
                let id = turn.tool_call_open(&tool_call_name).await?;
                self.state.calls.insert(tool_call_id, id);
            }
            Event::ToolCallArgs { tool_call_id, delta, .. } => {
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    turn.tool_call_args(&id, &delta).await?;
                }
            }
            Event::ToolCallEnd { tool_call_id, .. } => {
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    turn.tool_call_close(&id).await?;
                }
            }
            Event::ToolCallResult { tool_call_id, content, .. } => {
                // A result for a call the gateway never relayed has nothing to attach to.
                if let Some(id) = self.state.calls.get(&tool_call_id).cloned() {
                    let text = match content {
                        ToolResultContent::Text(text) => text,
                        ToolResultContent::Parts(parts) => Value::Array(parts).to_string(),
                    };
                    turn.tool_result(&id, &text).await?;
                }
            }
            Event::ReasoningStart { message_id, .. } => {
                let id = turn.reasoning_span_start().await?;
                self.spans.insert(message_id, id);
            }
            Event::ReasoningEnd { message_id, .. } => {
                if let Some(id) = self.spans.remove(&message_id) {
                    turn.reasoning_span_end(&id).await?;
                }
            }
            Event::ReasoningMessageStart { message_id, .. } => {
                let id = turn.reasoning_message_start().await?;
                self.thoughts.insert(message_id, id);
            }
            Event::ReasoningMessageContent { message_id, delta, .. } => {
                if let Some(id) = self.thoughts.get(&message_id).cloned() {
                    turn.reasoning_delta(&id, &delta).await?;
                }
            }
            Event::ReasoningMessageEnd { message_id, .. } => {
                if let Some(id) = self.thoughts.remove(&message_id) {
                    turn.reasoning_message_end(&id).await?;
                }
            }
            Event::ActivitySnapshot { message_id, activity_type, content, replace, .. } => {
                let id = match self.state.activities.get(&message_id) {
                    Some(id) => id.clone(),
                    None => {
                        let id = turn.activity_id();
                        self.state.activities.insert(message_id, id.clone());
                        id
                    }
                };
                turn.emit(Event::ActivitySnapshot {
                    message_id: id,
                    activity_type,
                    content,
                    replace,
                    subagent_run_id: None,
                })
                .await?;
            }
            Event::ActivityDelta { message_id, activity_type, patch, .. } => {
                // A delta of an activity never shown has nothing to apply to (the client drops it too).
                if let Some(id) = self.state.activities.get(&message_id).cloned() {
                    turn.emit(Event::ActivityDelta { message_id: id, activity_type, patch, subagent_run_id: None })
                        .await?;
                }
            }
            // The upstream's state, steps and custom events pass through as they are.
            event @ (Event::StateSnapshot { .. }
            | Event::StateDelta { .. }
            | Event::StepStarted { .. }
            | Event::StepFinished { .. }
            | Event::Custom { .. }
            | Event::Raw { .. }) => turn.emit(event).await?,
            Event::RunError { message, code, .. } => {
                let code = code.map(|c| format!(" ({c})")).unwrap_or_default();
                return Err(AgentError::Failed(format!("the upstream agent failed{code}: {message}")));
            }
            Event::RunFinished { result, outcome, usage, .. } => {
                return Ok(Some(match outcome {
                    Some(RunOutcome::Interrupt { interrupts }) => Ending::Interrupted(interrupts),
                    _ => Ending::Finished { result, usage },
                }));
            }
            // The gateway keeps the conversation itself (MESSAGES_SNAPSHOT). Encrypted reasoning
            // is for the upstream's own model and names upstream ids; subagent events are not
            // relayed yet.
            _ => {}
        }
        Ok(None)
    }
}

/// Splits an SSE byte stream into the `data` of its events (bytes are kept whole until a line
/// ends, so a character split across chunks stays intact).
#[derive(Default)]
struct SseFrames {
    buffer: Vec<u8>,
    data: Vec<String>,
}

impl SseFrames {
    fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                self.data.push(value.strip_prefix(' ').unwrap_or(value).to_string());
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_frames_join_across_chunks_and_lines() {
        let mut frames = SseFrames::default();
        assert!(frames.push(b"id: 1\ndata: {\"a\":").is_empty());
        assert_eq!(frames.push(b"1}\n\ndata: x\r\ndata: y\r\n\r\n"), vec!["{\"a\":1}".to_string(), "x\ny".to_string()]);
        // A two-byte character split between chunks.
        let bytes = "data: é\n\n".as_bytes();
        assert!(frames.push(&bytes[..7]).is_empty());
        assert_eq!(frames.push(&bytes[7..]), vec!["é".to_string()]);
    }

    #[test]
    fn upstream_events_are_checked_like_the_official_client() {
        assert!(parse_upstream_event(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":""}"#).is_ok());
        for bad in [
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":null}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"tool"}"#,
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r","timestamp":1.5}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt"}}"#,
            r#"not json"#,
        ] {
            assert!(parse_upstream_event(bad).is_err(), "{bad}");
        }
        let mut order = UpstreamOrder::default();
        let content = parse_upstream_event(r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#).unwrap();
        assert!(order.check(&content).is_err(), "before RUN_STARTED");
        let started = parse_upstream_event(r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).unwrap();
        assert!(order.check(&started).is_ok());
        assert!(order.check(&content).is_err(), "content of a message never started");
    }

    fn checked(order: &mut UpstreamOrder, event: &str) -> Result<(), String> {
        order.check(&parse_upstream_event(event).map_err(|e| e.to_string())?)
    }

    #[test]
    fn upstream_reasoning_and_activity_are_checked_like_the_official_client() {
        let mut order = UpstreamOrder::default();
        checked(&mut order, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#).expect("started");
        assert!(checked(&mut order, r#"{"type":"REASONING_MESSAGE_CONTENT","messageId":"x","delta":"a"}"#).is_err());
        assert!(checked(&mut order, r#"{"type":"REASONING_END","messageId":"s"}"#).is_err(), "a span never started");
        checked(&mut order, r#"{"type":"REASONING_START","messageId":"s"}"#).expect("span");
        assert!(checked(&mut order, r#"{"type":"REASONING_START","messageId":"s"}"#).is_err(), "twice");
        // Spans and messages are tracked apart: one id may name both.
        checked(&mut order, r#"{"type":"REASONING_MESSAGE_START","messageId":"s","role":"reasoning"}"#).expect("msg");
        assert!(
            parse_upstream_event(r#"{"type":"REASONING_MESSAGE_START","messageId":"m"}"#).is_err(),
            "role is required"
        );
        assert!(
            checked(&mut order, r#"{"type":"REASONING_MESSAGE_START","messageId":"m","role":"assistant"}"#).is_err()
        );
        let finish = r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#;
        assert!(checked(&mut order, finish).is_err(), "reasoning still open");
        checked(&mut order, r#"{"type":"REASONING_MESSAGE_END","messageId":"s"}"#).expect("msg end");
        checked(&mut order, r#"{"type":"REASONING_END","messageId":"s"}"#).expect("span end");
        assert!(checked(&mut order, r#"{"type":"REASONING_MESSAGE_CHUNK","messageId":"s","delta":"x"}"#).is_err());
        checked(
            &mut order,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"add","path":"/x","value":null}]}"#,
        )
        .expect("a delta of any activity");
        for bad in [
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"add","path":"x","value":1}]}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"replace","path":"/x"}]}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"p","patch":[{"op":"merge","path":"/x"}]}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"move","path":"/x"}]}"#,
        ] {
            assert!(checked(&mut order, bad).is_err(), "{bad}");
        }
        assert!(parse_upstream_event(
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"p","content":[1]}"#
        )
        .is_err());
        checked(&mut order, finish).expect("nothing open");
    }

    #[test]
    fn decisions_become_resume_entries() {
        let plain = UpstreamInterrupt { id: "u1".into(), gateway_id: None, response_schema: None };
        assert_eq!(
            resume_entry(&plain, json!({"approved": true, "answer": "Paris"})),
            json!({"interruptId": "u1", "status": "resolved", "payload": {"answer": "Paris"}})
        );
        assert_eq!(
            resume_entry(&plain, json!({"approved": false, "expired": true})),
            json!({"interruptId": "u1", "status": "cancelled"})
        );
        let approval = UpstreamInterrupt {
            id: "u2".into(),
            gateway_id: None,
            response_schema: Some(json!({"type": "object", "properties": {"approved": {"type": "boolean"}}})),
        };
        assert_eq!(
            resume_entry(&approval, json!({"approved": false})),
            json!({"interruptId": "u2", "status": "resolved", "payload": {"approved": false}})
        );
    }
}
