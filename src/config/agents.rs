//! Agent settings as the configuration states them: one struct per agent kind, plain data with
//! their defaults and the checks loading makes. The `agents` module builds running agents from
//! them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::protocol::Modality;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScriptAgentConfig {
    /// Characters per `TEXT_MESSAGE_CONTENT` when a `say` step streams its text.
    #[serde(default = "default_chunk_chars")]
    pub chunk_chars: usize,
    /// Pause between chunks, so a person watching sees the text stream.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    pub steps: Vec<ScriptStep>,
}

fn default_chunk_chars() -> usize {
    16
}

/// One step of a script. In config each is a table whose first key names the step, e.g.
/// `{ say = "Hello {input}" }` or `{ burst = 1000, bytes = 200 }`. `{input}` in any text is
/// replaced by the user's message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ScriptStep {
    /// An assistant message, streamed in chunks.
    Say { say: String },
    /// A tool call with its arguments, a canned result and the tool's policy (§5.1).
    Tool {
        tool: String,
        #[serde(default = "empty_object")]
        args: Value,
        result: String,
        #[serde(flatten)]
        policy: ToolPolicy,
    },
    /// Several tool calls proposed at once, each waiting for its own approval under `policy`.
    Tools {
        tools: Vec<CallSpec>,
        #[serde(flatten)]
        policy: ToolPolicy,
    },
    /// A question for a person (`input_required`), free text or one of `choices`. The answer
    /// fills `{answer}` in later steps.
    Ask {
        ask: String,
        #[serde(default)]
        choices: Vec<String>,
        #[serde(default)]
        deciders: Vec<String>,
        #[serde(default = "default_ttl_secs")]
        ttl_secs: u64,
    },
    /// An escalation (`confirmation`): a person confirms the turn may go on. Approved, the
    /// script goes on (a comment fills `{answer}`); declined or expired, the turn ends here.
    Escalate {
        escalate: String,
        #[serde(default)]
        deciders: Vec<String>,
        #[serde(default = "default_ttl_secs")]
        ttl_secs: u64,
    },
    /// A note pinned to the board.
    Note {
        note: String,
        #[serde(default = "default_note_kind")]
        kind: String,
        #[serde(default)]
        tags: Vec<String>,
        /// Labels a reader needs clearance for (§7); others see the note redacted.
        #[serde(default)]
        labels: Vec<String>,
        /// Supersedes the newest note of this kind on the board (taking its place).
        #[serde(default)]
        replaces: Option<String>,
    },
    /// A delegation marker: `STEP_STARTED` and `STEP_FINISHED` named `step`.
    Step { step: String },
    /// A call of a frontend tool the client declared (and the agent admits): the run ends
    /// `success` with `pendingToolCallIds`; the client's `role: "tool"` message on its next run
    /// is the result (`{answer}` in later steps). Skipped when the client did not declare it.
    ClientTool {
        client_tool: String,
        #[serde(default = "empty_object")]
        args: Value,
    },
    /// A child turn on another agent, inside a step named by its id (§3 steps); `input` (default
    /// `{input}`) is what the child is asked.
    Delegate {
        delegate: String,
        #[serde(default)]
        input: Option<String>,
    },
    /// Generative UI (§3): with `content`, a new activity of type `activity` shown with that
    /// content (`ACTIVITY_SNAPSHOT`); with `patch` (RFC 6902 operations) instead, the turn's
    /// latest activity updated (`ACTIVITY_DELTA`).
    Activity {
        activity: String,
        #[serde(default)]
        content: Option<serde_json::Map<String, Value>>,
        #[serde(default)]
        patch: Option<Vec<crate::protocol::events::PatchOp>>,
    },
    /// A pause (cancellable).
    Wait { wait_ms: u64 },
    /// The turn fails with this message (`RUN_ERROR` `failed`).
    Fail { fail: String },
    /// `tick` `CUSTOM` events named `gateway.tick`, one every `every_ms`, each carrying its
    /// number and the microsecond it was made (`{"n", "madeAtUs"}`), for latency measurements.
    Tick {
        tick: u64,
        #[serde(default = "default_tick_ms")]
        every_ms: u64,
    },
    /// One message of `burst` content events of `bytes` characters each, as fast as possible.
    Burst {
        burst: u64,
        #[serde(default = "default_burst_bytes")]
        bytes: usize,
    },
}

/// One call of a `tools` step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSpec {
    pub tool: String,
    #[serde(default = "empty_object")]
    pub args: Value,
    pub result: String,
}

/// When a tool call needs a person's approval, and whose (§5.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolPolicy {
    /// `never`, `always`, or `when_tainted` (asks only for a tool that exfiltrates, in a turn
    /// that carries outside content, which every AG-UI turn does). Unset: `when_tainted` for a
    /// tool that exfiltrates (§8: data-sending tools ask on untrusted turns unless told
    /// otherwise), `never` for any other.
    #[serde(default)]
    pub approval: Option<Approval>,
    #[serde(default)]
    pub exfiltrates: bool,
    /// Person ids and `role:<name>` entries; empty: the person who started the turn.
    #[serde(default)]
    pub deciders: Vec<String>,
    /// The person who started the turn may not approve.
    #[serde(default)]
    pub four_eyes: bool,
    #[serde(default = "default_ttl_secs")]
    pub ttl_secs: u64,
    /// The approver may change the arguments (`editedArgs`).
    #[serde(default)]
    pub allow_edit: bool,
    /// A value the approver must type to confirm.
    #[serde(default)]
    pub confirm: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    Never,
    Always,
    WhenTainted,
}

/// Why a data-sending tool asks on a tainted turn (recorded with the interrupt it opens).
pub const TAINT_REASON: &str =
    "the turn carries outside content (its text came from an app through AG-UI) and the tool sends data out";

impl ToolPolicy {
    /// Why a call of this tool asks a person first when the turn's taint is the reason (a
    /// policy that always asks needs no reason given).
    pub fn approval_reason(&self) -> Option<&'static str> {
        match self.approval {
            Some(Approval::WhenTainted) | None if self.exfiltrates => Some(TAINT_REASON),
            _ => None,
        }
    }

    pub fn needs_approval(&self) -> bool {
        match self.approval {
            Some(Approval::Never) => false,
            Some(Approval::Always) => true,
            // Every turn started through AG-UI is tainted (§8): its text came from an app.
            Some(Approval::WhenTainted) | None => self.exfiltrates,
        }
    }
}

fn default_ttl_secs() -> u64 {
    3600
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn default_note_kind() -> String {
    "note".to_string()
}

fn default_tick_ms() -> u64 {
    100
}

fn default_burst_bytes() -> usize {
    64
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenaiAgentConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key; none sent when empty or unset.
    #[serde(default)]
    pub api_key_env: String,
    #[serde(default)]
    pub system_prompt: String,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default = "default_request_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Retries of a model call answered 429 or 5xx (or not answered), with backoff.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Model calls per turn at most (a tool loop ends there).
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    #[serde(default)]
    pub tools: Vec<HttpTool>,
    /// Built-in tools offered to the model: `ask_user` (a question for the person, an
    /// `input_required` interrupt) and `board_write` (pins a note to the thread's board).
    #[serde(default = "default_builtins")]
    pub builtins: Vec<String>,
    /// Agents the `delegate` built-in may hand tasks to.
    #[serde(default)]
    pub delegates: Vec<String>,
    /// MCP servers whose tools the model may call (docs/agents.md).
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// What the model takes in a user message: `text` always, and any of `image`, `audio`
    /// and `document` it reads (chat completions has no video part). A part of another kind
    /// is refused `unsupported_content` before the turn starts.
    #[serde(default = "default_input_modalities")]
    pub input_modalities: Vec<Modality>,
}

fn default_input_modalities() -> Vec<Modality> {
    vec![Modality::Text]
}

/// An MCP server (Streamable HTTP transport) whose tools the agent offers the model, each as
/// `<name>__<tool>`, under one approval policy for all of them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// Letters, digits, `-` and single `_`: the prefix of its tools' names.
    pub name: String,
    /// The server's MCP endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    pub url: String,
    /// Headers sent as they are.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Header name → environment variable holding its value (secrets never reach the stream).
    #[serde(default)]
    pub secret_headers: BTreeMap<String, String>,
    /// Argument name → environment variable holding a credential the server's tools take in
    /// their arguments: each of its tools whose input schema has that argument is offered it
    /// as the placeholder (`‹secret:NAME›`), and the gateway puts the value in only when it
    /// calls the tool.
    #[serde(default)]
    pub secret_args: BTreeMap<String, String>,
    /// The server's tools offered to the model, by the server's names; empty: all of them.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Most seconds one exchange with the server may take (listing its tools, or one call).
    #[serde(default = "default_mcp_timeout_secs")]
    pub timeout_secs: u64,
    /// Seconds a listing of the server's tools is used before it is asked again, when the
    /// server does not say (`ttlMs`, which a server of MCP 2026-07-28 gives and which wins).
    #[serde(default = "default_mcp_tools_ttl_secs")]
    pub tools_ttl_secs: u64,
    #[serde(flatten)]
    pub policy: ToolPolicy,
}

fn default_mcp_timeout_secs() -> u64 {
    30
}

/// Five minutes: a changed tool list is seen soon enough, and a model call rarely waits on a
/// listing.
fn default_mcp_tools_ttl_secs() -> u64 {
    300
}

impl McpServerConfig {
    /// What separates the server's name from a tool's in the name the model sees (a dot is
    /// not allowed in a function name).
    pub const SEPARATOR: &'static str = "__";

    fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !self.name.contains(Self::SEPARATOR)
            && !self.name.ends_with('_');
        if !name_ok {
            return Err(format!(
                "'{}' is not an MCP server name: letters, digits, '-' and single '_' (not last)",
                self.name
            ));
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!("MCP server '{}': url must be an http(s) URL", self.name));
        }
        if self.timeout_secs == 0 {
            return Err(format!("MCP server '{}': timeout_secs must be at least 1", self.name));
        }
        for name in self.headers.keys().chain(self.secret_headers.keys()) {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("MCP server '{}': '{name}' is not a header name", self.name));
            }
        }
        Ok(())
    }
}

fn default_builtins() -> Vec<String> {
    vec![OpenaiAgentConfig::ASK_USER.into(), OpenaiAgentConfig::BOARD_WRITE.into()]
}

/// A tool the model may call: an HTTP endpoint taking the arguments as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    /// JSON Schema of the arguments; validated before the call.
    #[serde(default = "any_object")]
    pub parameters: Value,
    #[serde(default = "default_tool_timeout_secs")]
    pub timeout_secs: u64,
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Header name → environment variable holding its value (secrets never reach the stream).
    #[serde(default)]
    pub secret_headers: BTreeMap<String, String>,
    /// Argument name → environment variable holding a credential the call's arguments carry:
    /// the model is told to send the placeholder (`‹secret:NAME›`), and the gateway puts the
    /// value in only when it calls the tool.
    #[serde(default)]
    pub secret_args: BTreeMap<String, String>,
    #[serde(flatten)]
    pub policy: ToolPolicy,
}

fn default_request_timeout_secs() -> u64 {
    60
}
fn default_retries() -> u32 {
    2
}
fn default_max_steps() -> u32 {
    8
}
fn default_method() -> String {
    "POST".into()
}
fn any_object() -> Value {
    json!({ "type": "object" })
}
fn default_tool_timeout_secs() -> u64 {
    10
}
fn default_max_response_bytes() -> usize {
    64 * 1024
}

impl OpenaiAgentConfig {
    /// The built-in tools, by the name the model calls them with.
    pub const ASK_USER: &'static str = "ask_user";
    pub const BOARD_WRITE: &'static str = "board_write";
    pub const DELEGATE: &'static str = "delegate";
    const BUILTINS: [&'static str; 3] = [Self::ASK_USER, Self::BOARD_WRITE, Self::DELEGATE];

    /// Whether the model takes parts of `modality`.
    pub fn takes(&self, modality: Modality) -> bool {
        modality == Modality::Text || self.input_modalities.contains(&modality)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err("base_url must be an http(s) URL".into());
        }
        if self.max_steps == 0 {
            return Err("max_steps must be at least 1".into());
        }
        if self.input_modalities.contains(&Modality::Video) {
            return Err("input_modalities: chat completions takes no video part (text, image, audio, document)".into());
        }
        if !self.input_modalities.contains(&Modality::Text) {
            return Err("input_modalities must hold \"text\"".into());
        }
        if let Some(unknown) = self.builtins.iter().find(|b| !Self::BUILTINS.contains(&b.as_str())) {
            return Err(format!("unknown built-in tool '{unknown}' (ask_user, board_write, delegate)"));
        }
        if self.builtins.iter().any(|b| b == Self::DELEGATE) && self.delegates.is_empty() {
            return Err("the delegate built-in needs `delegates`, the agents it may hand tasks to".into());
        }
        for tool in &self.tools {
            jsonschema::validator_for(&tool.parameters)
                .map_err(|e| format!("tool '{}': its parameters are not a valid JSON Schema: {e}", tool.name))?;
            if !matches!(tool.method.as_str(), "GET" | "POST" | "PUT") {
                return Err(format!("tool '{}': method must be GET, POST or PUT", tool.name));
            }
        }
        for (n, server) in self.mcp_servers.iter().enumerate() {
            server.validate()?;
            if self.mcp_servers[..n].iter().any(|earlier| earlier.name == server.name) {
                return Err(format!("two MCP servers are named '{}'", server.name));
            }
            // The model's names must say which tool is meant: none of another tool may look
            // like one of this server's.
            let prefix = format!("{}{}", server.name, McpServerConfig::SEPARATOR);
            let others = self.tools.iter().map(|t| t.name.as_str()).chain(self.builtins.iter().map(String::as_str));
            if let Some(clash) = others.into_iter().find(|name| name.starts_with(&prefix)) {
                return Err(format!(
                    "the tool '{clash}' would be taken for a tool of the MCP server '{}'; rename one",
                    server.name
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AguiAgentConfig {
    /// The upstream's AG-UI endpoint (the URL an `HttpAgent` would be given).
    pub url: String,
    /// Headers sent as they are.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers whose values come from environment variables (header → variable), for secrets.
    #[serde(default)]
    pub secret_headers: BTreeMap<String, String>,
    /// Most seconds one upstream run may take, from the request to its last event.
    #[serde(default = "default_upstream_timeout_secs")]
    pub timeout_secs: u64,
    /// How long an upstream interrupt stays open when the upstream gives no `expiresAt`.
    #[serde(default = "default_interrupt_ttl_secs")]
    pub interrupt_ttl_secs: u64,
    /// Who decides the upstream's interrupts: person ids and `role:<name>`; empty: the person who
    /// started the turn.
    #[serde(default)]
    pub deciders: Vec<String>,
    /// The person who started the turn may not decide.
    #[serde(default)]
    pub four_eyes: bool,
    /// Send the client's admitted tools upstream (as the run's `tools`).
    #[serde(default = "yes")]
    pub send_tools: bool,
    /// Send the state upstream: the thread's editable keys and what the upstream last set.
    #[serde(default = "yes")]
    pub send_state: bool,
    /// Send the client's `context` entries upstream.
    #[serde(default = "yes")]
    pub send_context: bool,
    /// Send the client's `forwardedProps` upstream.
    #[serde(default = "yes")]
    pub send_forwarded_props: bool,
    /// The `forwardedProps` keys sent upstream; absent: every key.
    #[serde(default)]
    pub forwarded_props_keys: Option<Vec<String>>,
    /// What a takeover does with an upstream run its instance was relaying when it died.
    #[serde(default)]
    pub on_cut: OnCut,
    /// The option of an upstream interrupt's list (a string `enum` schema, as CrewAI's
    /// `@human_feedback` outcomes) that a deny, a cancel or an expiry is sent as. Without it such
    /// an interrupt cannot be told "no": a denial ends the turn `cancelled` and the upstream is
    /// not resumed (its own default could be a yes).
    #[serde(default)]
    pub deny_option: Option<String>,
}

/// What becomes of an upstream run cut by the death of the instance relaying it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnCut {
    /// Continue it: reconnect with `Last-Event-ID` where the upstream gave its events ids (and
    /// still knows the run), else close what the cut left open and run the upstream again.
    #[default]
    Continue,
    /// End the turn `failed`.
    Fail,
}

fn yes() -> bool {
    true
}

fn default_upstream_timeout_secs() -> u64 {
    300
}
fn default_interrupt_ttl_secs() -> u64 {
    3600
}

impl AguiAgentConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err("url must be an http(s) URL".into());
        }
        if self.timeout_secs == 0 {
            return Err("timeout_secs must be at least 1".into());
        }
        for name in self.headers.keys().chain(self.secret_headers.keys()) {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(format!("'{name}' is not a header name"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::OpenaiAgentConfig;

    fn openai(extra: &str) -> Result<(), String> {
        let toml = format!("base_url = 'http://127.0.0.1:1/v1'\nmodel = 'm'\n{extra}");
        let config: OpenaiAgentConfig = toml::from_str(&toml).map_err(|e| e.to_string())?;
        config.validate()
    }

    #[test]
    fn mcp_servers_are_checked_at_load() {
        let server = "[[mcp_servers]]\nname = 'billing'\nurl = 'http://127.0.0.1:1/mcp'\napproval = 'always'\n";
        assert_eq!(openai(server), Ok(()));
        let twice = format!("{server}{server}");
        assert!(openai(&twice).is_err_and(|e| e.contains("two MCP servers are named 'billing'")));
        for bad in ["bill.ing", "bill__ing", "billing_", ""] {
            let named = format!("[[mcp_servers]]\nname = '{bad}'\nurl = 'http://127.0.0.1:1/mcp'\n");
            assert!(openai(&named).is_err_and(|e| e.contains("is not an MCP server name")), "{bad}");
        }
        let ftp = "[[mcp_servers]]\nname = 'b'\nurl = 'ftp://127.0.0.1/mcp'\n";
        assert!(openai(ftp).is_err_and(|e| e.contains("url must be an http(s) URL")));
        let header = "[[mcp_servers]]\nname = 'b'\nurl = 'http://127.0.0.1:1/mcp'\nheaders = { 'bad header' = 'x' }\n";
        assert!(openai(header).is_err_and(|e| e.contains("is not a header name")));
        // An HTTP tool whose name the model would take for one of the server's.
        let clash = format!("{server}[[tools]]\nname = 'billing__refund'\nurl = 'http://127.0.0.1:1/t'\n");
        assert!(openai(&clash).is_err_and(|e| e.contains("would be taken for a tool of the MCP server 'billing'")));
    }
}
