//! An MCP App's own request (SPEC §9.2, docs/agents.md): what the App's page asked its host,
//! which the host sends as a run carrying `forwardedProps.__proxiedMCPRequest`, and how an
//! agent answers it. The engine checks who asks and on which thread; the agent, which alone
//! knows its MCP servers, says whether it serves the request and answers it.

use serde_json::Value;

use crate::protocol::ErrorCode;

/// The request, as the host forwarded it, with the names the gateway knows it by.
#[derive(Debug, Clone)]
pub struct AppRequest {
    /// The configured server's name (`serverId`, or `serverHash`, which the gateway's
    /// `mcp-apps` activity sets to the same name).
    pub server: String,
    /// The MCP method: `tools/call`, `resources/read`, `ping`, `notifications/message`.
    pub method: String,
    /// Its params (`{}` when the App sent none).
    pub params: Value,
    /// A key naming this request alone, the same when the host sends it again (the run's id
    /// on its thread): a tool can make a call's effect once.
    pub idempotency_key: String,
}

impl AppRequest {
    /// The tool a `tools/call` names, for the audit trail and the logs.
    pub fn tool(&self) -> Option<&str> {
        (self.method == TOOLS_CALL).then(|| self.params.get("name").and_then(Value::as_str)).flatten()
    }
}

/// `tools/call`.
pub const TOOLS_CALL: &str = "tools/call";

/// How an agent will answer an App's request, once it passed the agent's checks.
#[derive(Debug, Clone, PartialEq)]
pub enum AppRoute {
    /// Answered straight away ([`crate::engine::turn::Agent::answer_app_request`]): nothing of
    /// it is kept in the thread.
    Answer,
    /// A `tools/call` whose tool's policy asks a person first: the call becomes a turn of the
    /// thread, which waits on the tool's approval as an agent's own call would.
    Turn,
}

/// Why an agent does not serve an App's request: a code and words for the client.
#[derive(Debug, Clone, PartialEq)]
pub struct AppRefusal {
    pub code: ErrorCode,
    pub message: String,
}

impl AppRefusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> AppRefusal {
        AppRefusal { code, message: message.into() }
    }
}
