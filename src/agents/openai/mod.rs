//! The `openai` agent (SPEC §9.2): any OpenAI-compatible chat-completions endpoint (OpenAI,
//! vLLM, Ollama, llama.cpp server, LiteLLM), streamed.
//!
//! Text and tool-call argument deltas reach the log as they arrive. Tools are HTTP endpoints
//! from config, their arguments validated with the tool's JSON Schema before the call, under
//! the same approval policy as script tools. The conversation is checkpointed after each model
//! answer and each tool result, committed together with the events that close them, so a turn
//! taken over by another instance continues without redoing a finished tool call.
//!
//! This file holds the turn's course (checkpoints, pending calls, decisions, delegation);
//! [`stream`] makes one model call and reads its streamed answer, [`tools`] calls HTTP tools,
//! [`mcp`] the tools of MCP servers.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::config::{HttpTool, McpServerConfig, OpenaiAgentConfig};
use crate::engine::turn::agent::{Agent, AskedNow};
use crate::engine::turn::app_request::{AppRefusal, AppRequest, AppRoute};
use crate::engine::turn::{AgentError, AgentOutput, Checkpoint, ChildCheckpoint, Decided, NotePin, TurnContext};
use crate::protocol::events::ToolResultContent;
use crate::protocol::input::InputMessage;
use crate::protocol::TokenUsage;

mod app_turn;
mod asking;
mod calls;
pub mod content;
mod decisions;
use calls::PendingCall;

use decisions::{approved_arguments, not_run, Decisions};
mod mcp;
use mcp::McpOutcome as Outcome;
mod secret_args;
mod stream;
mod tools;

const ASK_USER: &str = OpenaiAgentConfig::ASK_USER;
const BOARD_WRITE: &str = OpenaiAgentConfig::BOARD_WRITE;
const DELEGATE: &str = OpenaiAgentConfig::DELEGATE;
/// The activity type an MCP App is shown under (as `@ag-ui/mcp-apps-middleware` names it).
const MCP_APPS_ACTIVITY: &str = "mcp-apps";

/// The function definitions of the built-in tools.
fn builtin_definition(name: &str) -> Option<Value> {
    let parameters = match name {
        ASK_USER => json!({ "type": "object", "properties": {
            "question": { "type": "string" },
            "choices": { "type": "array", "items": { "type": "string" } } }, "required": ["question"] }),
        BOARD_WRITE => json!({ "type": "object", "properties": {
            "text": { "type": "string" }, "kind": { "type": "string" },
            "tags": { "type": "array", "items": { "type": "string" } } }, "required": ["text"] }),
        DELEGATE => json!({ "type": "object", "properties": {
            "agent": { "type": "string" }, "task": { "type": "string" } }, "required": ["agent", "task"] }),
        _ => return None,
    };
    let description = match name {
        ASK_USER => "Ask the person a question and wait for the answer.",
        DELEGATE => "Hand a task to another agent and get its answer.",
        _ => "Pin a note to the board the person sees beside the chat.",
    };
    Some(
        json!({ "type": "function", "function": { "name": name, "description": description, "parameters": parameters } }),
    )
}

/// What the checkpoint keeps of an LLM turn.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Conversation {
    /// Messages in the chat-completions format, as sent to the model.
    messages: Vec<Value>,
    /// Model calls made so far.
    steps: u32,
    /// Tool calls of the last answer not yet given a result: (model's id, gateway's id, name,
    /// arguments).
    pending: Vec<PendingCall>,
    usage: Usage,
    /// The turn is an MCP App's tool call (app_turn.rs): it ends once the call is settled,
    /// with no model call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    app: bool,
}

/// What a call of the model's stands for, by its name.
enum CallKind<'a> {
    /// A tool the client declared: the client runs it.
    Client,
    Http(&'a HttpTool),
    /// A tool of an MCP server: the server's config and its name for the tool.
    Mcp(&'a McpServerConfig, String),
    AskUser,
    BoardWrite,
    Delegate,
    /// A name the agent did not offer the model: nothing runs.
    Unoffered,
}

/// The idempotency key a tool call is made with (docs/agents.md): the same for every attempt
/// at one call, so a tool can make its effect once. The gateway's call id (`<turn>:c<n>`) is
/// saved in the checkpoint with the pending call, so a takeover that re-issues a call whose
/// result was never recorded sends the key the first attempt sent.
async fn idempotency_key(turn: &TurnContext, call: &PendingCall) -> Result<String, AgentError> {
    let (tenant, thread) = turn.thread().await?;
    Ok(tool_call_key(&tenant, &thread, &call.gateway_id))
}

/// A SHA-256 over the tenant, the thread and the call id, each prefixed by its length (no
/// two triples hash alike by shifting a separator), in hex: a header-safe value that names no
/// tenant or thread to the tool.
fn tool_call_key(tenant: &str, thread: &str, call_id: &str) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [tenant, thread, call_id] {
        digest.update(&(part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    digest.finish().as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Usage {
    input: u64,
    output: u64,
}

#[derive(Debug, Clone)]
pub struct OpenaiAgent {
    config: OpenaiAgentConfig,
    http: crate::agents::http::AgentHttp,
    mcp: mcp::McpServers,
}

impl OpenaiAgent {
    pub fn new(config: OpenaiAgentConfig, tls: &std::sync::Arc<rustls::ClientConfig>) -> OpenaiAgent {
        let http = crate::agents::http::AgentHttp::new(tls);
        let mcp = mcp::McpServers::new(&config.mcp_servers, http.clone());
        OpenaiAgent { config, http, mcp }
    }
}

#[async_trait]
impl Agent for OpenaiAgent {
    fn asked_now(&self, checkpoint: &Checkpoint, interrupt_id: &str) -> AskedNow {
        let Some(conversation) = checkpoint
            .conversation
            .as_ref()
            .and_then(|saved| serde_json::from_value::<Conversation>(saved.clone()).ok())
        else {
            return AskedNow::Unknown;
        };
        let Some(call) = conversation.pending.iter().find(|c| c.interrupt.as_deref() == Some(interrupt_id)) else {
            // A delegated child's call, or one saved before calls named their interrupt.
            return AskedNow::Unknown;
        };
        match self.interrupt_for(call) {
            Some(spec) => AskedNow::Asks(spec),
            None => AskedNow::Nobody,
        }
    }

    async fn check_app_request(&self, request: &AppRequest) -> Result<AppRoute, AppRefusal> {
        self.mcp.check_app(request).await
    }

    async fn answer_app_request(&self, request: &AppRequest) -> Result<Value, String> {
        self.mcp.answer_app(request).await
    }

    async fn run(&self, turn: &mut TurnContext, from: Checkpoint) -> Result<AgentOutput, AgentError> {
        // A delegation the turn stopped in (a takeover, or a wait inside the child).
        let mut child = from.child.clone().map(|c| *c);
        let mut conversation: Conversation = match &from.conversation {
            Some(saved) => serde_json::from_value(saved.clone())
                .map_err(|e| AgentError::Internal(format!("the turn's saved conversation does not parse: {e}")))?,
            None => match turn.app_request().cloned() {
                Some(request) => return self.app_turn(turn, &request, &mut child).await,
                None => self.opening(turn).await?,
            },
        };
        // Spent before a takeover or a wait: still spent if the turn fails from here.
        if conversation.steps > 0 {
            turn.report_usage(USAGE_REPORTER, self.usage_of(&conversation));
        }
        if !from.awaiting.is_empty() {
            // The calls waited for people; the decisions are in now.
            let decided = turn.decisions(&from.awaiting).await?;
            let (superseded, decided): (Vec<Decided>, Vec<Decided>) =
                decided.into_iter().partition(|d| d.decision["superseded"] == Value::Bool(true));
            let awaiting: Vec<String> =
                from.awaiting.iter().filter(|id| !superseded.iter().any(|s| s.interrupt_id == **id)).cloned().collect();
            if !superseded.is_empty() {
                self.ask_again(turn, &mut conversation, &superseded, &awaiting).await?;
            }
            let decisions = Decisions::new(awaiting, decided);
            self.settle_pending(turn, &mut conversation, Some(decisions), &mut child).await?;
        } else if !conversation.pending.is_empty() {
            // Taken over between tool calls: run the ones without a result (none twice).
            self.settle_pending(turn, &mut conversation, None, &mut child).await?;
        }
        if conversation.app {
            // An App's call, settled: the App reads its result; no model is asked.
            return Ok(AgentOutput::default());
        }
        // Taken over after the last answer was committed but before the turn ended: that answer
        // stands (asking the model again would give it twice).
        let answered = conversation
            .messages
            .last()
            .is_some_and(|last| last["role"] == "assistant" && last.get("tool_calls").is_none());
        if answered && conversation.pending.is_empty() {
            return Ok(AgentOutput { result: None, usage: Some(vec![self.usage_of(&conversation)]) });
        }
        loop {
            if conversation.steps >= self.config.max_steps {
                return Err(AgentError::Failed(format!(
                    "the agent made {} model calls without an answer",
                    conversation.steps
                )));
            }
            turn.check_cancelled()?;
            turn.check_token_budget().await?;
            let answer = self.call_model(turn, &conversation.messages).await?;
            turn.charge_tokens(answer.usage.input + answer.usage.output).await?;
            conversation.steps += 1;
            conversation.usage.input += answer.usage.input;
            conversation.usage.output += answer.usage.output;
            turn.report_usage(USAGE_REPORTER, self.usage_of(&conversation));
            let mut assistant = json!({ "role": "assistant", "content": answer.text });
            if !answer.calls.is_empty() {
                assistant["tool_calls"] = Value::Array(
                    answer
                        .calls
                        .iter()
                        .map(|c| json!({ "id": c.model_id, "type": "function", "function": { "name": c.name, "arguments": c.arguments } }))
                        .collect(),
                );
            }
            conversation.messages.push(assistant);
            conversation.pending = answer.calls;
            // The events closing this answer were held back; they commit with this checkpoint.
            turn.commit_step(&self.checkpoint(&conversation, &[])).await?;
            if conversation.pending.is_empty() {
                return Ok(AgentOutput { result: None, usage: Some(vec![self.usage_of(&conversation)]) });
            }
            self.settle_pending(turn, &mut conversation, None, &mut child).await?;
        }
    }
}

/// A tool's work, unless the turn is asked to stop first (§4.1): the request is dropped. On a
/// cancel the call gets a result saying so, so the conversation never holds a call without one
/// (the next model call would be refused); on a hand-over the step is left for the next owner,
/// which runs the call again under the same idempotency key.
async fn until_stopped<T>(
    turn: &mut TurnContext,
    call: &PendingCall,
    work: impl std::future::Future<Output = T>,
) -> Result<T, AgentError> {
    match turn.unless_stopped(work).await {
        Err(AgentError::Cancelled) => {
            // What the step held (nothing said yet but a pinned note) goes in before the result.
            turn.release_held().await?;
            turn.tool_result(&call.gateway_id, CANCELLED_TOOL).await?;
            Err(AgentError::Cancelled)
        }
        other => other,
    }
}

/// The result of a tool call the turn's cancel cut short.
const CANCELLED_TOOL: &str = "error: the turn was cancelled while this tool ran; it may have acted";

/// How the agent names itself when it reports what it spent ([`TurnContext::report_usage`]).
const USAGE_REPORTER: &str = "openai";

impl OpenaiAgent {
    /// The tokens the conversation's model calls took so far, as AG-UI reports them.
    fn usage_of(&self, conversation: &Conversation) -> TokenUsage {
        TokenUsage {
            provider: Some("openai".into()),
            model: Some(self.config.model.clone()),
            input_tokens: Some(conversation.usage.input),
            output_tokens: Some(conversation.usage.output),
            total_tokens: Some(conversation.usage.input + conversation.usage.output),
            ..TokenUsage::default()
        }
    }

    /// `awaiting`: the interrupts whose decisions are being applied to the pending calls.
    fn checkpoint(&self, conversation: &Conversation, awaiting: &[String]) -> Checkpoint {
        Checkpoint {
            conversation: serde_json::to_value(conversation).ok(),
            awaiting: awaiting.to_vec(),
            ..Checkpoint::default()
        }
    }

    /// The system prompt, the thread's earlier turns (the gateway's record) and the new message.
    async fn opening(&self, turn: &TurnContext) -> Result<Conversation, AgentError> {
        let mut messages = Vec::new();
        if !self.config.system_prompt.is_empty() {
            messages.push(json!({ "role": "system", "content": self.config.system_prompt }));
        }
        for message in turn.history().await? {
            match message {
                InputMessage::User(user) => {
                    messages.push(json!({ "role": "user", "content": content::chat_content(&user.content) }))
                }
                InputMessage::Assistant(assistant) => {
                    let mut entry = json!({ "role": "assistant", "content": assistant.content.unwrap_or_default() });
                    if let Some(calls) = assistant.tool_calls {
                        entry["tool_calls"] = Value::Array(
                            calls
                                .iter()
                                .map(|c| json!({ "id": c.id, "type": "function", "function": { "name": c.function.name, "arguments": c.function.arguments } }))
                                .collect(),
                        );
                    }
                    messages.push(entry);
                }
                InputMessage::Tool(tool) => {
                    // The model reads a result's text, as when the result first came in (a
                    // picture as a note: content::tool_text).
                    let content = content::tool_text(&ToolResultContent::from_message(&tool.content));
                    messages.push(json!({ "role": "tool", "tool_call_id": tool.tool_call_id, "content": content }));
                }
                _ => {}
            }
        }
        match turn.action() {
            // A person's action on generative UI: the `log_a2ui_event` call and its result, as
            // the A2UI middleware gives it and as earlier actions stand in the history above.
            Some(action) => {
                let call = format!("{}:action", crate::ids::user_message_id(turn.turn_id()));
                messages.push(json!({ "role": "assistant", "content": "", "tool_calls": [{
                    "id": call, "type": "function",
                    "function": { "name": crate::protocol::a2ui::LOG_EVENT_TOOL, "arguments": action.to_string() },
                }] }));
                messages.push(json!({ "role": "tool", "tool_call_id": call, "content": turn.user_text() }));
            }
            None => messages.push(json!({ "role": "user", "content": content::chat_content(&turn.user_content()) })),
        }
        Ok(Conversation { messages, ..Conversation::default() })
    }

    /// Gives every pending call a result: runs it (when approved, or when its policy needs no
    /// approval), reports it denied, or, when people must decide first, opens an interrupt for
    /// each call that needs one and waits. A decision applies only to the call whose interrupt
    /// it answers; a call that opened no interrupt takes none.
    async fn settle_pending(
        &self,
        turn: &mut TurnContext,
        conversation: &mut Conversation,
        decisions: Option<Decisions>,
        child: &mut Option<ChildCheckpoint>,
    ) -> Result<(), AgentError> {
        let client_results = if conversation.pending.iter().any(|c| c.client) {
            turn.client_results().await?
        } else {
            Default::default()
        };
        let Some(decisions) = decisions else {
            let mut specs = Vec::new();
            for call in conversation.pending.iter_mut() {
                if let Some(spec) = self.interrupt_for(call) {
                    call.interrupt = Some(spec.id.clone());
                    specs.push(spec);
                }
            }
            if !specs.is_empty() {
                let checkpoint = self.checkpoint(conversation, &[]);
                return Err(turn.wait_for(specs, checkpoint).await);
            }
            return self.run_pending(turn, conversation, None, &client_results, child).await;
        };
        self.run_pending(turn, conversation, Some(&decisions), &client_results, child).await
    }

    /// Runs the pending calls in order, each committed with its result and the checkpoint.
    async fn run_pending(
        &self,
        turn: &mut TurnContext,
        conversation: &mut Conversation,
        decisions: Option<&Decisions>,
        client_results: &BTreeMap<String, ToolResultContent>,
        child: &mut Option<ChildCheckpoint>,
    ) -> Result<(), AgentError> {
        let awaiting = decisions.map_or(&[][..], |d| d.awaiting.as_slice());
        let mut owed = Vec::new();
        while !conversation.pending.is_empty() {
            let call = conversation.pending.remove(0);
            let kind = self.kind_of(&call);
            if let CallKind::Client = kind {
                match client_results.get(&call.gateway_id) {
                    Some(result) => {
                        turn.begin_step();
                        // Recorded and shown as the client sent it; the model reads its text.
                        turn.tool_result_content(&call.gateway_id, result.clone()).await?;
                        conversation.messages.push(
                            json!({ "role": "tool", "tool_call_id": call.model_id, "content": result.as_text() }),
                        );
                        turn.commit_step(&self.checkpoint(conversation, awaiting)).await?;
                    }
                    None => owed.push(call),
                }
                continue;
            }
            if let CallKind::Delegate = kind {
                let outcome = self.delegate(turn, conversation, &call, child.take(), awaiting).await?;
                turn.begin_step();
                turn.tool_result(&call.gateway_id, &outcome).await?;
                conversation
                    .messages
                    .push(json!({ "role": "tool", "tool_call_id": call.model_id, "content": outcome }));
                turn.commit_step(&self.checkpoint(conversation, awaiting)).await?;
                continue;
            }
            // The decision this call waited for, if it waited: found before anything is said.
            let decision = match self.interrupt_for(&call) {
                Some(_) => match decisions {
                    Some(decisions) => Some(decisions.for_call(&call)?),
                    None => {
                        return Err(AgentError::Failed(format!(
                            "the tool call {} ({}) needs a decision, but no interrupt was opened for it",
                            call.gateway_id, call.name
                        )))
                    }
                },
                None => None,
            };
            // What the call does (a pinned note) commits with its result and the checkpoint.
            turn.begin_step();
            // The arguments the call ran with, for an App that shows it.
            let mut ran_with = call.arguments.clone();
            let outcome = match (kind, decision) {
                (CallKind::AskUser, Some(decision)) => Outcome::failed(match decision["answer"].as_str() {
                    Some(answer) => answer.to_string(),
                    None => "the person did not answer".to_string(),
                }),
                (CallKind::BoardWrite, _) => Outcome::failed({
                    let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
                    let tags: Vec<String> = serde_json::from_value(args["tags"].clone()).unwrap_or_default();
                    let kind = args["kind"].as_str().unwrap_or("note").to_string();
                    match args["text"].as_str() {
                        Some(text) => {
                            let pin = NotePin { kind: &kind, tags: &tags, text, labels: &[], replaces: None };
                            let note = turn.pin_note(pin).await?;
                            format!("pinned note {}", note["id"].as_str().unwrap_or(""))
                        }
                        None => "error: board_write needs a text".to_string(),
                    }
                }),
                (CallKind::Http(tool), Some(decision)) => {
                    if decision["approved"] == Value::Bool(true) {
                        let key = idempotency_key(turn, &call).await?;
                        let arguments = approved_arguments(decision, &tool.policy, &call);
                        Outcome::failed(until_stopped(turn, &call, self.run_tool(tool, &arguments, &key)).await?)
                    } else {
                        Outcome::failed(not_run(decision))
                    }
                }
                (CallKind::Mcp(server, tool), Some(decision)) => {
                    if decision["approved"] == Value::Bool(true) {
                        let key = idempotency_key(turn, &call).await?;
                        ran_with = approved_arguments(decision, &server.policy, &call);
                        until_stopped(turn, &call, self.mcp.call(server, &tool, &ran_with, &key)).await?
                    } else {
                        Outcome::failed(not_run(decision))
                    }
                }
                (CallKind::Mcp(server, tool), None) => {
                    let key = idempotency_key(turn, &call).await?;
                    until_stopped(turn, &call, self.mcp.call(server, &tool, &call.arguments, &key)).await?
                }
                (CallKind::Http(tool), None) => {
                    let key = idempotency_key(turn, &call).await?;
                    Outcome::failed(until_stopped(turn, &call, self.run_tool(tool, &call.arguments, &key)).await?)
                }
                _ => Outcome::failed(format!("error: the tool '{}' is not available; nothing was run", call.name)),
            };
            turn.tool_result_content(&call.gateway_id, outcome.content.clone()).await?;
            // A tool whose server offers a UI is shown in its App after its call (MCP Apps).
            if let Some((server, _, uri)) = self.mcp.app_of(&call.name) {
                if let Some(content) = outcome.app_content(&server, &uri, &ran_with) {
                    turn.activity_show(MCP_APPS_ACTIVITY, content).await?;
                }
            }
            conversation
                .messages
                .push(json!({ "role": "tool", "tool_call_id": call.model_id, "content": outcome.model_text }));
            turn.commit_step(&self.checkpoint(conversation, awaiting)).await?;
        }
        if !owed.is_empty() {
            // Only the client can run these: the run ends with them pending (§9.2).
            let ids = owed.iter().map(|c| c.gateway_id.clone()).collect();
            conversation.pending = owed;
            return Err(turn.wait_for_client(ids, self.checkpoint(conversation, awaiting)).await);
        }
        Ok(())
    }

    /// Runs a `delegate` call: a child turn on the named agent (a step of this run); its last
    /// answer is the call's result. While the child runs, the call stays pending in the saved
    /// conversation, so a takeover or a resume re-enters the child.
    async fn delegate(
        &self,
        turn: &mut TurnContext,
        conversation: &Conversation,
        call: &PendingCall,
        resumed: Option<ChildCheckpoint>,
        awaiting: &[String],
    ) -> Result<String, AgentError> {
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        let (Some(agent), Some(task)) = (args["agent"].as_str(), args["task"].as_str()) else {
            return Ok("error: delegate needs an agent and a task".into());
        };
        if !self.config.delegates.iter().any(|d| d == agent) {
            return Ok(format!("error: '{agent}' is not an agent this one may delegate to"));
        }
        let mut waiting = conversation.clone();
        waiting.pending.insert(0, call.clone());
        let asked_by = Some(call.gateway_id.as_str());
        turn.delegate(agent, task.to_string(), self.checkpoint(&waiting, awaiting), resumed, asked_by).await?;
        Ok(match turn.last_answer() {
            "" => format!("{agent} finished without an answer"),
            answer => answer.to_string(),
        })
    }

    /// What a call stands for: a client's tool, an HTTP tool, a built-in this agent offers, or
    /// a name it never offered the model.
    fn kind_of(&self, call: &PendingCall) -> CallKind<'_> {
        if call.client {
            return CallKind::Client;
        }
        if let Some(tool) = self.tool(&call.name) {
            return CallKind::Http(tool);
        }
        if let Some((server, tool)) = self.mcp.find(&call.name) {
            return CallKind::Mcp(server, tool);
        }
        if !self.config.builtins.contains(&call.name) {
            return CallKind::Unoffered;
        }
        match call.name.as_str() {
            ASK_USER => CallKind::AskUser,
            BOARD_WRITE => CallKind::BoardWrite,
            DELEGATE => CallKind::Delegate,
            _ => CallKind::Unoffered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tool_call_key;

    #[test]
    fn a_tool_calls_key_is_stable_and_names_its_call_alone() {
        let key = tool_call_key("acme", "th-1", "t-1:c1");
        assert_eq!(key, tool_call_key("acme", "th-1", "t-1:c1"));
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(key, tool_call_key("acme", "th-1", "t-1:c2"));
        assert_ne!(key, tool_call_key("acme2", "th-1", "t-1:c1"));
        // The length prefix keeps a separator from shifting between parts.
        assert_ne!(tool_call_key("a:b", "c", "d"), tool_call_key("a", "b:c", "d"));
    }
}
