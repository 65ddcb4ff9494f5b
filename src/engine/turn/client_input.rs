//! What the client sent with a turn's first run besides messages and tools: kept with the turn
//! and read back by the agents that pass it on.

use serde_json::Value;

/// What the client sent with the run that started the turn, besides messages and tools, kept
/// with the turn (`turns.client_input`) for an upstream agent (§9.3).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientInput {
    #[serde(default)]
    pub context: Vec<crate::protocol::input::Context>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
    /// The person's action the turn started with (an A2UI `userAction`), when it started with
    /// one rather than a user message (SPEC §3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Value>,
    /// The MCP App's request the turn started with (`{server, method, params}`): a tool call
    /// of the App's that waits for a person (§9.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_request: Option<Value>,
}
