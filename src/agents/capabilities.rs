//! What each configured agent can do, in AG-UI 1.0's capabilities vocabulary
//! ([`crate::protocol::capabilities`]), read off its configuration: the transport every agent
//! of the gateway gets (resumable SSE), the tools it holds and the client tools it admits, who
//! decides its calls, its editable state keys, its delegates and the input it takes. Served by
//! `GET /v1/agents` and `GET /v1/agents/{agent}`.

use serde_json::{json, Value};

use crate::config::{AgentConfig, AgentKindConfig, Approval, Config, ScriptStep, ToolPolicy};
use crate::protocol::capabilities::{
    AgentCapabilities, DecisionPolicy, ExecutionCapabilities, GatewayCapabilities, HumanInTheLoopCapabilities,
    IdentityCapabilities, MultiAgentCapabilities, MultimodalCapabilities, MultimodalInputCapabilities,
    ReasoningCapabilities, StateCapabilities, SubagentInfo, ToolDescription, ToolsCapabilities, TransportCapabilities,
};
use crate::protocol::Modality;

/// The capabilities of `agent`, one of `config`'s agents.
pub fn capabilities(agent: &AgentConfig, config: &Config) -> AgentCapabilities {
    let kind = match &agent.kind {
        AgentKindConfig::Script(_) => "script",
        AgentKindConfig::Openai(_) => "openai",
        AgentKindConfig::Agui(_) => "agui",
    };
    let facts = Facts::of(agent);
    let subagents = facts
        .delegates
        .iter()
        .map(|name| SubagentInfo {
            name: name.clone(),
            description: config.agent(name).map(|a| a.description.clone()).unwrap_or_default(),
        })
        .collect::<Vec<_>>();
    let gateway = GatewayCapabilities {
        frontend_tools: agent.frontend_tools.clone(),
        editable_state: Value::Object(agent.editable_state.clone().into_iter().collect()),
        decisions: facts.decisions.clone(),
    };
    AgentCapabilities {
        identity: IdentityCapabilities {
            name: agent.name.clone(),
            kind: format!("agui-gateway/{kind}"),
            description: agent.description.clone(),
        },
        transport: TransportCapabilities {
            streaming: true,
            websocket: false,
            http_binary: true,
            push_notifications: false,
            resumable: true,
        },
        tools: ToolsCapabilities {
            supported: facts.calls_tools || !agent.frontend_tools.is_empty(),
            items: facts.tools,
            client_provided: !agent.frontend_tools.is_empty(),
        },
        state: StateCapabilities { snapshots: true, deltas: facts.relays, persistent_state: true },
        multi_agent: MultiAgentCapabilities {
            supported: !subagents.is_empty(),
            delegation: !subagents.is_empty(),
            subagents,
        },
        reasoning: ReasoningCapabilities { supported: facts.reasons, streaming: facts.reasons },
        // What a user message's parts may carry for this agent (§2 `messages`): `pdf` and
        // `file` both follow documents, which a `binary` part of any other type counts as.
        multimodal: MultimodalCapabilities {
            input: MultimodalInputCapabilities {
                image: agent.takes(Modality::Image),
                audio: agent.takes(Modality::Audio),
                video: agent.takes(Modality::Video),
                pdf: agent.takes(Modality::Document),
                file: agent.takes(Modality::Document),
            },
        },
        execution: ExecutionCapabilities { max_iterations: facts.max_iterations },
        human_in_the_loop: HumanInTheLoopCapabilities {
            supported: facts.interrupts,
            approvals: !facts.decisions.is_empty(),
            interrupts: facts.interrupts,
            approve_with_edits: facts.decisions.iter().any(|d| d.allow_edit),
        },
        custom: json!({ "gateway": gateway }),
    }
}

/// What an agent's kind settings say of it.
#[derive(Default)]
struct Facts {
    calls_tools: bool,
    tools: Vec<ToolDescription>,
    decisions: Vec<DecisionPolicy>,
    interrupts: bool,
    delegates: Vec<String>,
    reasons: bool,
    relays: bool,
    max_iterations: Option<u32>,
}

impl Facts {
    fn of(agent: &AgentConfig) -> Facts {
        let mut facts = Facts::default();
        match &agent.kind {
            AgentKindConfig::Script(script) => {
                for step in &script.steps {
                    match step {
                        ScriptStep::Tool { tool, policy, .. } => facts.tool_policy(tool, policy),
                        ScriptStep::Tools { tools, policy } => {
                            for call in tools {
                                facts.tool_policy(&call.tool, policy);
                            }
                        }
                        ScriptStep::Ask { .. } | ScriptStep::Escalate { .. } => facts.interrupts = true,
                        ScriptStep::ClientTool { .. } => facts.calls_tools = true,
                        ScriptStep::Delegate { delegate, .. } if !facts.delegates.contains(delegate) => {
                            facts.delegates.push(delegate.clone())
                        }
                        _ => {}
                    }
                }
            }
            AgentKindConfig::Openai(openai) => {
                facts.reasons = true;
                facts.max_iterations = Some(openai.max_steps);
                facts.calls_tools = true;
                for tool in &openai.tools {
                    facts.tools.push(ToolDescription {
                        name: tool.name.clone(),
                        description: tool.description.clone(),
                        parameters: tool.parameters.clone(),
                    });
                    facts.tool_policy(&tool.name, &tool.policy);
                }
                for server in &openai.mcp_servers {
                    let tools = format!("{}{}*", server.name, crate::config::McpServerConfig::SEPARATOR);
                    facts.tool_policy(&tools, &server.policy);
                }
                if openai.builtins.iter().any(|b| b == "ask_user") {
                    facts.interrupts = true;
                }
                if openai.builtins.iter().any(|b| b == "delegate") {
                    facts.delegates = openai.delegates.clone();
                }
            }
            AgentKindConfig::Agui(agui) => {
                // The upstream's own tools and interrupts: relayed, its interrupts decided here.
                facts.reasons = true;
                facts.relays = true;
                facts.calls_tools = agui.send_tools;
                facts.interrupts = true;
                facts.decisions.push(DecisionPolicy {
                    tool: "*".into(),
                    approval: "always".into(),
                    deciders: agui.deciders.clone(),
                    four_eyes: agui.four_eyes,
                    allow_edit: false,
                });
            }
        }
        facts
    }

    /// Records who decides the calls of `tool`, when its policy asks anyone.
    fn tool_policy(&mut self, tool: &str, policy: &ToolPolicy) {
        self.calls_tools = true;
        if !policy.needs_approval() {
            return;
        }
        self.interrupts = true;
        let approval = match policy.approval {
            Some(Approval::Always) => "always",
            _ => "when_tainted",
        };
        if self.decisions.iter().any(|d| d.tool == tool) {
            return;
        }
        self.decisions.push(DecisionPolicy {
            tool: tool.to_string(),
            approval: approval.into(),
            deciders: policy.deciders.clone(),
            four_eyes: policy.four_eyes,
            allow_edit: policy.allow_edit,
        });
    }
}
