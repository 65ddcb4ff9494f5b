//! An MCP App's own requests (SPEC §9.2, docs/agents.md), answered from the agent's own MCP
//! servers: the App's page (`resources/read`), `ping`, its log lines
//! (`notifications/message`) and its tool calls (`tools/call`), each held to what the agent
//! offers a model — a server the agent configures, a tool it lists from that server, the
//! tool's input schema and its policy. A call whose policy asks a person is not made here: it
//! becomes a turn of the thread ([`AppRoute::Turn`]), which waits for the approval as a model's
//! call would.
//!
//! A failure of the server (its JSON-RPC error, a timeout, the server unreachable) is words for
//! the App, in which no URL is named (the exchange's errors are redacted as a model's are).

use rmcp::model::ReadResourceRequestParams;
use serde_json::{json, Value};

use super::super::secret_args;
use super::{McpServers, McpTool};
use crate::engine::turn::app_request::{AppRefusal, AppRequest, AppRoute, TOOLS_CALL};
use crate::protocol::ErrorCode;

/// The methods an App may send through the gateway.
const RESOURCES_READ: &str = "resources/read";
const PING: &str = "ping";
const NOTIFICATIONS_MESSAGE: &str = "notifications/message";

impl McpServers {
    /// Whether the agent serves `request` and how; nothing is asked of the server but its
    /// tool listing (kept as a model call keeps it).
    pub(in crate::agents::openai) async fn check_app(&self, request: &AppRequest) -> Result<AppRoute, AppRefusal> {
        let Some(server) = self.server(&request.server) else {
            return Err(AppRefusal::new(
                ErrorCode::UnknownMcpServer,
                format!("the agent has no MCP server '{}'", request.server),
            ));
        };
        match request.method.as_str() {
            PING | NOTIFICATIONS_MESSAGE => Ok(AppRoute::Answer),
            RESOURCES_READ => match request.params.get("uri").and_then(Value::as_str) {
                Some(_) => Ok(AppRoute::Answer),
                None => Err(AppRefusal::new(ErrorCode::BadRequest, "resources/read needs params.uri, a string")),
            },
            TOOLS_CALL => {
                let (tool, _) = self.app_call(server, request).await?;
                Ok(if server.config.policy.needs_approval() && tool.is_some() {
                    AppRoute::Turn
                } else {
                    AppRoute::Answer
                })
            }
            other => Err(AppRefusal::new(
                ErrorCode::McpMethodNotAllowed,
                format!(
                    "an MCP App may send tools/call, resources/read, ping and notifications/message, not '{other}'"
                ),
            )),
        }
    }

    /// The answer to a request [`McpServers::check_app`] routed [`AppRoute::Answer`]: the MCP
    /// method's result, or why it failed.
    pub(in crate::agents::openai) async fn answer_app(&self, request: &AppRequest) -> Result<Value, String> {
        let server = self.server(&request.server).ok_or_else(|| format!("no MCP server '{}'", request.server))?;
        match request.method.as_str() {
            PING => Ok(json!({})),
            NOTIFICATIONS_MESSAGE => {
                // The App's log line: its level here, its words (which may quote the page's
                // content) only at debug, as a message's text is.
                let level = request.params.get("level").and_then(Value::as_str).unwrap_or("info");
                tracing::info!(server = %request.server, level, "an MCP App's log message");
                tracing::debug!(server = %request.server, data = %request.params["data"], "the MCP App's log message");
                Ok(json!({}))
            }
            RESOURCES_READ => {
                let params: ReadResourceRequestParams =
                    serde_json::from_value(json!({ "uri": request.params["uri"] })).map_err(|e| e.to_string())?;
                let read = self
                    .exchange(server, |peer| async move {
                        peer.read_resource(params)
                            .await
                            .map_err(|e| (super::broken(&e), format!("the read failed ({e})")))
                    })
                    .await?;
                serde_json::to_value(read).map_err(|e| format!("the resource could not be read ({e})"))
            }
            TOOLS_CALL => {
                if server.config.policy.needs_approval() {
                    // Only a turn makes such a call, once a person approved it.
                    return Err(format!("the tool '{}' needs a person's approval", request.tool().unwrap_or("")));
                }
                let (tool, arguments) = self.app_call(server, request).await.map_err(|refused| refused.message)?;
                let Some(tool) = tool else {
                    return Err(format!("the MCP server '{}' could not be listed; nothing was run", request.server));
                };
                let outcome =
                    self.call(&server.config, &tool.name, &arguments.to_string(), &request.idempotency_key).await;
                // A result the server answered, an error result (`isError`) included, is the
                // App's; a call that got none is a failure in words.
                outcome.result.ok_or(outcome.model_text)
            }
            other => Err(format!("'{other}' is not answered")),
        }
    }

    /// The tool a `tools/call` names and its arguments, checked: a tool the agent lists from
    /// that server (by the configuration's allow-list and the server's listing), arguments its
    /// input schema takes. `None` for the tool when the server cannot be listed now (the call
    /// then fails as a model's would, rather than being refused for a tool that may exist).
    async fn app_call(
        &self,
        server: &super::McpServer,
        request: &AppRequest,
    ) -> Result<(Option<McpTool>, Value), AppRefusal> {
        let Some(name) = request.tool() else {
            return Err(AppRefusal::new(ErrorCode::BadRequest, "tools/call needs params.name, a string"));
        };
        let arguments = match request.params.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(Value::Object(arguments)) => Value::Object(arguments.clone()),
            Some(_) => return Err(AppRefusal::new(ErrorCode::InvalidArguments, "params.arguments is not an object")),
        };
        let allowed = server.config.tools.is_empty() || server.config.tools.iter().any(|t| t == name);
        let not_listed = || {
            AppRefusal::new(
                ErrorCode::ToolNotListed,
                format!("the agent lists no tool '{name}' from the MCP server '{}'", request.server),
            )
        };
        if !allowed {
            return Err(not_listed());
        }
        let listed = match self.tools(server).await {
            Ok(listed) => listed,
            Err(why) => {
                tracing::warn!(server = %request.server, "an MCP App's call could not be checked: {why}");
                return Ok((None, arguments));
            }
        };
        let tool = listed.iter().find(|t| t.name == name).cloned().ok_or_else(not_listed)?;
        // Checked as the call will be made (the server's credentials in place of placeholders),
        // on a copy: the credentials are filled in again only when the call is made.
        let mut checked = arguments.clone();
        secret_args::fill_in_and_check(&mut checked, &tool.input_schema, &server.config.secret_args, false).map_err(
            |why| AppRefusal::new(ErrorCode::InvalidArguments, why.trim_start_matches("error: ").to_string()),
        )?;
        Ok((Some(tool), arguments))
    }
}
