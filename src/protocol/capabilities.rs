//! AG-UI 1.0's capabilities vocabulary (`AgentCapabilities` of `@ag-ui/core`), the part of it
//! the gateway declares for its agents. Every field is optional in the vocabulary: an omitted
//! one means "not declared", so the gateway writes only what it knows.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// What an agent can do, in 1.0's categories; `custom.gateway` holds what the vocabulary has
/// no words for (who decides, the frontend tools admitted, the editable state keys).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    pub identity: IdentityCapabilities,
    pub transport: TransportCapabilities,
    pub tools: ToolsCapabilities,
    pub state: StateCapabilities,
    pub multi_agent: MultiAgentCapabilities,
    pub reasoning: ReasoningCapabilities,
    pub multimodal: MultimodalCapabilities,
    #[serde(skip_serializing_if = "ExecutionCapabilities::is_empty")]
    pub execution: ExecutionCapabilities,
    pub human_in_the_loop: HumanInTheLoopCapabilities,
    /// `{"gateway": {...}}`: see [`GatewayCapabilities`].
    #[schema(value_type = Object)]
    pub custom: Value,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityCapabilities {
    pub name: String,
    /// `agui-gateway/<kind>`: `script`, `openai` or `agui`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransportCapabilities {
    pub streaming: bool,
    pub websocket: bool,
    pub http_binary: bool,
    pub push_notifications: bool,
    /// A cut stream continues with `Last-Event-ID`, on any instance.
    pub resumable: bool,
}

/// One tool the agent holds itself (not a client's).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolDescription {
    pub name: String,
    pub description: String,
    #[schema(value_type = Object)]
    pub parameters: Value,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCapabilities {
    pub supported: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ToolDescription>,
    /// Whether the agent takes tools the client declares (the ones it admits).
    pub client_provided: bool,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateCapabilities {
    pub snapshots: bool,
    pub deltas: bool,
    /// The thread's state and board outlive a run.
    pub persistent_state: bool,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiAgentCapabilities {
    pub supported: bool,
    pub delegation: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentInfo>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SubagentInfo {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct ReasoningCapabilities {
    pub supported: bool,
    pub streaming: bool,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct MultimodalCapabilities {
    pub input: MultimodalInputCapabilities,
}

/// The content parts a user message may carry for this agent.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct MultimodalInputCapabilities {
    pub image: bool,
    pub audio: bool,
    pub video: bool,
    pub pdf: bool,
    pub file: bool,
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionCapabilities {
    /// Most model calls of one turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

impl ExecutionCapabilities {
    fn is_empty(&self) -> bool {
        self.max_iterations.is_none()
    }
}

#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HumanInTheLoopCapabilities {
    pub supported: bool,
    /// Some call asks a person's approval first.
    pub approvals: bool,
    /// Runs end with an interrupt outcome and take the answers in `resume`.
    pub interrupts: bool,
    /// Some approval takes `editedArgs`.
    pub approve_with_edits: bool,
}

/// `custom.gateway`: what the gateway adds to the vocabulary.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayCapabilities {
    /// The client-declared tools the agent admits, by name (§2 `tools`).
    pub frontend_tools: Vec<String>,
    /// The state keys a run's `state` may write, each with the JSON Schema its value must match.
    #[schema(value_type = Object)]
    pub editable_state: Value,
    /// Who decides what: one entry per tool (or question) whose calls wait for a person.
    pub decisions: Vec<DecisionPolicy>,
}

/// Who decides the calls of one tool (or an agent's questions).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionPolicy {
    /// The tool's name; `*` for every interrupt of an upstream.
    pub tool: String,
    /// `always`, or `when_tainted` (the turn carries outside content: every AG-UI turn does).
    pub approval: String,
    /// Persons and `role:<name>` entries; empty: the person who started the turn.
    pub deciders: Vec<String>,
    pub four_eyes: bool,
    pub allow_edit: bool,
}
