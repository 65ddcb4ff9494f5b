//! What an agent says, in AG-UI's words: text messages, reasoning spans and messages, tool
//! calls and their results, steps, activities and board notes. Each opens, streams and closes
//! its item through [`TurnContext::emit`], naming it after the turn and remembering what is
//! open so a cut turn can be closed properly.

use serde_json::{json, Value};

use super::context::TurnContext;
use super::naming::Named;
use super::outcome::AgentError;
use crate::protocol::events::{TextRole, ToolResultContent};
use crate::protocol::{iso8601, Event};
use crate::store::WriteOp;

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

/// One reasoning block as the `openai` agent streams it: a span with one message in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reasoning {
    pub span_id: String,
    pub message_id: String,
}

impl TurnContext {
    /// Opens an assistant text message and returns its id (`<turn>:m<n>`).
    pub async fn text_start(&mut self) -> Result<String, AgentError> {
        let message_id = self.new_id(Named::Message);
        self.emit(Event::TextMessageStart {
            message_id: message_id.clone(),
            role: Some(TextRole::Assistant),
            name: None,
            subagent_run_id: None,
        })
        .await?;
        self.answers().opened(message_id.clone());
        Ok(message_id)
    }

    /// Streams a piece of an open message; the tenant's AI label leads its first piece.
    pub async fn text_delta(&mut self, message_id: &str, delta: &str) -> Result<(), AgentError> {
        let delta = self.answers().piece(message_id, delta);
        self.emit(Event::TextMessageContent { message_id: message_id.to_string(), delta, subagent_run_id: None }).await
    }

    pub async fn text_end(&mut self, message_id: &str) -> Result<(), AgentError> {
        self.answers().ended(message_id);
        self.emit(Event::TextMessageEnd { message_id: message_id.to_string(), subagent_run_id: None }).await
    }

    /// Opens a reasoning span (`REASONING_START`) and returns its id (`<turn>:reasoning<n>`).
    pub async fn reasoning_span_start(&mut self) -> Result<String, AgentError> {
        let span_id = self.new_id(Named::ReasoningSpan);
        self.emit(Event::ReasoningStart { message_id: span_id.clone(), subagent_run_id: None }).await?;
        Ok(span_id)
    }

    /// Opens a reasoning message (`REASONING_MESSAGE_START`, role `reasoning`) and returns its
    /// id (`<turn>:thought<n>`). It is not an assistant message: it is never part of the
    /// conversation, so it does not become the parent of later tool calls.
    pub async fn reasoning_message_start(&mut self) -> Result<String, AgentError> {
        let message_id = self.new_id(Named::ReasoningMessage);
        self.emit(Event::ReasoningMessageStart {
            message_id: message_id.clone(),
            role: "reasoning".into(),
            subagent_run_id: None,
        })
        .await?;
        Ok(message_id)
    }

    /// Streams a piece of an open reasoning message (no AI label: it is not an answer).
    pub async fn reasoning_delta(&mut self, message_id: &str, delta: &str) -> Result<(), AgentError> {
        self.emit(Event::ReasoningMessageContent {
            message_id: message_id.to_string(),
            delta: delta.to_string(),
            subagent_run_id: None,
        })
        .await
    }

    pub async fn reasoning_message_end(&mut self, message_id: &str) -> Result<(), AgentError> {
        self.emit(Event::ReasoningMessageEnd { message_id: message_id.to_string(), subagent_run_id: None }).await
    }

    pub async fn reasoning_span_end(&mut self, span_id: &str) -> Result<(), AgentError> {
        self.emit(Event::ReasoningEnd { message_id: span_id.to_string(), subagent_run_id: None }).await
    }

    /// A new activity message id (`<turn>:a<n>`), for `ACTIVITY_SNAPSHOT` / `ACTIVITY_DELTA`.
    /// Activity messages share the id space of text messages on the client, hence their own
    /// marker.
    pub fn activity_id(&mut self) -> String {
        self.new_id(Named::Activity)
    }

    /// A new id for a sub-agent an agent relays (`<turn>:s<n>`), numbered after every one the
    /// turn's log holds: unique within the turn across runs again and takeovers (§9.3).
    pub fn subagent_id(&mut self) -> String {
        self.new_id(Named::Subagent)
    }

    /// Shows a new activity (`ACTIVITY_SNAPSHOT`, generative UI, §3) and returns its id. The
    /// thread keeps it as a `role: "activity"` message (`engine::conversation`).
    pub async fn activity_show(
        &mut self,
        activity_type: &str,
        content: serde_json::Map<String, Value>,
    ) -> Result<String, AgentError> {
        let message_id = self.activity_id();
        self.emit(Event::ActivitySnapshot {
            message_id: message_id.clone(),
            activity_type: activity_type.to_string(),
            content,
            replace: None,
            subagent_run_id: None,
        })
        .await?;
        Ok(message_id)
    }

    /// Updates the activity this turn showed last (`ACTIVITY_DELTA`); a turn that showed none
    /// has nothing to update, and says nothing.
    pub async fn activity_update_latest(
        &mut self,
        activity_type: &str,
        patch: Vec<crate::protocol::events::PatchOp>,
    ) -> Result<(), AgentError> {
        let Some(message_id) = self.latest_id(Named::Activity) else { return Ok(()) };
        self.emit(Event::ActivityDelta {
            message_id,
            activity_type: activity_type.to_string(),
            patch,
            subagent_run_id: None,
        })
        .await
    }

    /// A span with one reasoning message open in it: what a model's reasoning deltas go into.
    pub async fn reasoning_open(&mut self) -> Result<Reasoning, AgentError> {
        let span_id = self.reasoning_span_start().await?;
        let message_id = self.reasoning_message_start().await?;
        Ok(Reasoning { span_id, message_id })
    }

    /// Ends the message and then its span, in the order the protocol nests them.
    pub async fn reasoning_close(&mut self, reasoning: &Reasoning) -> Result<(), AgentError> {
        self.reasoning_message_end(&reasoning.message_id).await?;
        self.reasoning_span_end(&reasoning.span_id).await
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
        let parent = self.open_items().last_message().map(str::to_string);
        self.tool_call_open_with(name, parent, None).await
    }

    /// A new assistant message id (`<turn>:m<n>`) for a message that holds only tool calls:
    /// the parent a relayed call names when its upstream gave it no message of its own words.
    pub fn message_id(&mut self) -> String {
        self.new_id(Named::Message)
    }

    /// Opens a tool call in the assistant message `parent` (a relayed call keeps the message
    /// its upstream put it in), attributed to the subagent `subagent` when one made it.
    pub async fn tool_call_open_in(
        &mut self,
        name: &str,
        parent: String,
        subagent: Option<String>,
    ) -> Result<String, AgentError> {
        self.tool_call_open_with(name, Some(parent), subagent).await
    }

    async fn tool_call_open_with(
        &mut self,
        name: &str,
        parent: Option<String>,
        subagent: Option<String>,
    ) -> Result<String, AgentError> {
        let call_id = self.new_id(Named::ToolCall);
        self.emit(Event::ToolCallStart {
            tool_call_id: call_id.clone(),
            tool_call_name: name.to_string(),
            parent_message_id: parent,
            subagent_run_id: subagent,
        })
        .await?;
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
        self.emit(Event::ToolCallEnd { tool_call_id: call_id.to_string(), subagent_run_id: None }).await
    }

    /// A call's result, as a tool message named after the call (`<turn>:r<n>` for `<turn>:c<n>`).
    pub async fn tool_result(&mut self, call_id: &str, result: &str) -> Result<(), AgentError> {
        self.tool_result_content(call_id, ToolResultContent::Text(result.to_string())).await.map(|_| ())
    }

    /// A call's result as text or as AG-UI 1.0 content parts (an upstream's pictures or files
    /// stay parts, recorded and relayed as they came), as a tool message named after the call.
    /// Returns the tool message's id.
    pub async fn tool_result_content(
        &mut self,
        call_id: &str,
        content: ToolResultContent,
    ) -> Result<String, AgentError> {
        let message_id = match call_id.rsplit_once(":c") {
            Some((turn, n)) => format!("{turn}:r{n}"),
            None => format!("{call_id}:r"),
        };
        self.emit(Event::ToolCallResult {
            message_id: message_id.clone(),
            tool_call_id: call_id.to_string(),
            content,
            role: Some("tool".into()),
            subagent_run_id: None,
        })
        .await?;
        Ok(message_id)
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
        let note_no = self.new_note_no();
        let note = json!({
            "id": note_no.to_string(),
            "kind": pin.kind,
            "tags": pin.tags,
            "text": pin.text,
            "turn": self.identity().turn_id,
            "agent": self.identity().agent,
            "createdAt": iso8601(self.now_ms()),
            "supersedes": supersedes,
            // Every turn started through AG-UI is tainted: its text came from an app (§8).
            "tainted": true,
            "taintedBecause": "the turn's text came from an app through AG-UI",
            "labels": pin.labels,
        });
        let delta = crate::engine::board::pin_patch(&board, &note).map_err(AgentError::Failed)?;
        let delta = self.event_op(Event::StateDelta { delta, subagent_run_id: None })?;
        let pin = WriteOp::PinNote { thread: self.identity().thread_pk, note_no, body: note.to_string() };
        self.append(vec![delta, pin]).await?;
        self.know_board(crate::engine::board::assemble(board.into_iter().chain([note.clone()])));
        Ok(note)
    }

    pub async fn step_start(&mut self, name: &str) -> Result<(), AgentError> {
        // The step's owner is the lane it starts in, which the event is tagged with.
        self.emit(Event::StepStarted { step_name: name.to_string(), subagent_run_id: None }).await
    }

    pub async fn step_finish(&mut self, name: &str) -> Result<(), AgentError> {
        self.emit(Event::StepFinished { step_name: name.to_string(), subagent_run_id: None }).await
    }

    /// Starts a subagent (`SUBAGENT_STARTED`), whose id the agent chose.
    pub async fn subagent_start(&mut self, started: Event) -> Result<(), AgentError> {
        if !matches!(started, Event::SubagentStarted { .. }) {
            return Err(AgentError::Internal("subagent_start takes SUBAGENT_STARTED".into()));
        }
        self.emit(started).await
    }

    /// Ends a subagent (`SUBAGENT_FINISHED` or `SUBAGENT_ERROR`).
    pub async fn subagent_end(&mut self, ended: Event) -> Result<(), AgentError> {
        if !matches!(ended, Event::SubagentFinished { .. } | Event::SubagentError { .. }) {
            return Err(AgentError::Internal("subagent_end takes SUBAGENT_FINISHED or SUBAGENT_ERROR".into()));
        }
        self.emit(ended).await
    }
}
