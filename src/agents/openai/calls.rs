//! A call the model made that is not settled yet, as the turn's checkpoint keeps it: the
//! model's id and the gateway's, the tool and its arguments, and the interrupt it waits on.
//! Below the files that settle calls (`decisions.rs`, the agent's course in `mod.rs`), which
//! all read it.

use serde::{Deserialize, Serialize};

/// One call of the model's answer not yet given a result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PendingCall {
    pub(super) model_id: String,
    pub(super) gateway_id: String,
    pub(super) name: String,
    pub(super) arguments: String,
    /// A client-declared tool: its result comes from the client.
    #[serde(default)]
    pub(super) client: bool,
    /// The interrupt opened for this call (an approval or a question), whose decision it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) interrupt: Option<String>,
}
