//! A turn an MCP App's tool call started (SPEC §9.2, docs/agents.md): the App asked for a tool
//! whose policy needs a person. No model is asked: the App's call stands as the turn's one
//! tool call (`TOOL_CALL_START/ARGS/END` under the offered name, `<server>__<tool>`), and it
//! goes through the very path a model's call goes through — the same approval interrupt, the
//! same checkpoint, the same run once approved (its `TOOL_CALL_RESULT`, and the updated
//! `mcp-apps` activity the App reads its result from) or the same "not run" when denied. The
//! turn ends after that call: the App, not a model, reads what it gives.

use serde_json::Value;

use super::{Conversation, OpenaiAgent, PendingCall};
use crate::config::McpServerConfig;
use crate::engine::turn::{AgentError, AgentOutput, ChildCheckpoint, TurnContext};

impl OpenaiAgent {
    /// Starts the App's call (`request`: `{server, method, params}` as the turn keeps it) and
    /// settles it: it waits for its approval here (the checkpoint says it is the App's, so the
    /// turn ends once the decision is applied, in [`OpenaiAgent::run`]).
    pub(super) async fn app_turn(
        &self,
        turn: &mut TurnContext,
        request: &Value,
        child: &mut Option<ChildCheckpoint>,
    ) -> Result<AgentOutput, AgentError> {
        let server = request["server"].as_str().unwrap_or_default();
        let tool = request["params"]["name"].as_str().unwrap_or_default();
        let arguments = match &request["params"]["arguments"] {
            Value::Object(arguments) => Value::Object(arguments.clone()).to_string(),
            _ => "{}".to_string(),
        };
        let name = format!("{server}{}{tool}", McpServerConfig::SEPARATOR);
        let mut conversation = Conversation { app: true, ..Conversation::default() };
        turn.begin_step();
        let gateway_id = turn.tool_call_start(&name, &arguments).await?;
        conversation.pending = vec![PendingCall {
            model_id: gateway_id.clone(),
            gateway_id,
            name,
            arguments,
            client: false,
            interrupt: None,
        }];
        turn.commit_step(&self.checkpoint(&conversation, &[])).await?;
        self.settle_pending(turn, &mut conversation, None, child).await?;
        Ok(AgentOutput::default())
    }
}
