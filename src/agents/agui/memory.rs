//! What a turn remembers of its upstream, kept in the turn's checkpoint: the upstream runs it
//! started, the interrupts and client tool calls it waits on, the upstream's ids mapped to the
//! gateway's, its state, and the run under way ([`LiveRun`]). Below the relay and the agent,
//! which both read and change it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::check::UpstreamOrder;
use super::chunks::ChunkExpander;

/// What a turn remembers of its upstream (in its checkpoint).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Upstream {
    /// Upstream runs started in this turn.
    pub(super) runs: u32,
    /// An upstream run was under way at the last checkpoint.
    pub(super) streaming: bool,
    /// The upstream interrupts the turn waits on, each with the gateway interrupt standing for it.
    pub(super) waiting: Vec<UpstreamInterrupt>,
    /// Upstream tool call ids → the gateway's, so a later result names the right call.
    pub(super) calls: BTreeMap<String, String>,
    /// Upstream activity message ids → the gateway's: a later run's snapshot or delta of the
    /// same activity updates the same message.
    #[serde(default)]
    pub(super) activities: BTreeMap<String, String>,
    /// Client tool calls the turn waits for the client's results of (the gateway's ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) client_calls: Vec<String>,
    /// The upstream's state as it last set it (`STATE_SNAPSHOT`, then its deltas), sent back on
    /// its next run, in this turn and the thread's next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) state: Option<Value>,
    /// The gateway's ids of the messages, tool calls and results the upstream named → the
    /// upstream's own ids: what goes back upstream (its calls, their results, its messages)
    /// names them in the upstream's terms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) upstream_ids: BTreeMap<String, String>,
    /// Upstream subagent run ids → the gateway's (`<turn>:s<n>`, numbered by the turn after
    /// every one its log holds).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) subagents: BTreeMap<String, String>,
    /// The upstream thread this turn's runs use (`<tenant>:<thread>`, or for a branch the
    /// upstream has not seen, `<tenant>:<thread>:<turn>`); `None` in a turn recorded before
    /// branches had keys of their own: the thread's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) thread_key: Option<String>,
    /// The upstream run under way, while `streaming`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) live: Option<LiveRun>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct UpstreamInterrupt {
    /// The upstream's own id (what its `resume` names).
    pub(super) id: String,
    /// The gateway interrupt opened for it, whose decision goes back upstream.
    #[serde(default)]
    pub(super) gateway_id: Option<String>,
    #[serde(default)]
    pub(super) response_schema: Option<Value>,
    /// The option of its list that a "no" is sent as (the agent's `deny_option`, when the list
    /// holds it), as it stood when the interrupt was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) refusal: Option<String>,
}

/// One upstream run under way.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct LiveRun {
    /// The run's `runId` upstream (the same on a reconnect).
    pub run_id: String,
    /// The conversation the run was given is the log before this event of the turn.
    pub conversation_before: i64,
    /// The `resume` entries the run was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Vec<Value>>,
    /// The upstream id of the last event whose relay the log holds; `None` when the upstream
    /// gives its events no ids (or stopped giving them): a cut run cannot be reconnected then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    /// The order check's state: what the upstream has open.
    #[serde(default)]
    pub order: UpstreamOrder,
    #[serde(default)]
    pub chunks: ChunkExpander,
    /// Upstream message ids → the gateway's.
    #[serde(default)]
    pub messages: BTreeMap<String, String>,
    /// Upstream reasoning span ids → the gateway's.
    #[serde(default)]
    pub spans: BTreeMap<String, String>,
    /// Upstream reasoning message ids → the gateway's.
    #[serde(default)]
    pub thoughts: BTreeMap<String, String>,
    /// Upstream steps run unshown: more were open than `limits.max_open_steps` allows (§3).
    #[serde(default)]
    pub unshown_steps: Vec<String>,
    /// Calls of the client's (frontend) tools in this run that have no result yet, by the
    /// gateway's ids: the client runs them.
    #[serde(default)]
    pub client_calls: Vec<String>,
    /// Upstream tool calls an earlier run of the turn already showed and this resumed run
    /// announces again (LangGraph does): not shown twice; their results go to the first call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeated_calls: Vec<String>,
    /// Upstream message ids of this run → the gateway's, kept after a message ends: a tool
    /// call names the message it belongs to by it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub said: BTreeMap<String, String>,
    /// This run runs a cut one again (a takeover without `Last-Event-ID`, or an upstream that
    /// began the cut run anew): it must answer, or the turn fails (docs/agents.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rerun: bool,
    /// The run said something of its own: text, a tool call or a result, an activity.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answered: bool,
    /// The run changed the upstream's state (a snapshot unlike the last, a delta): something
    /// done, though nothing said.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changed_state: bool,
    /// The upstream's `RUN_FINISHED` as it sent it, once the log holds the run's last word: a
    /// turn taken over after it only acts on the ending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
}
