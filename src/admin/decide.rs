//! `agui-gateway decide`: an interrupt decided by a person at a terminal, with the same checks
//! as `POST /v1/interrupts/{id}/decision`, recorded with `via: "cli"`.

use serde_json::{json, Value};

use super::{operator, CommandResult, Common, Wiring};
use crate::auth::Caller;
use crate::engine::{Engine, EngineError};
use crate::protocol::input::{ResumeEntry, ResumeStatus};

/// Decide an interrupt as a person, with the same checks as the decision route.
#[derive(clap::Args)]
pub struct DecideArgs {
    #[command(flatten)]
    common: Common,
    #[arg(long, default_value = "default")]
    tenant: String,
    /// The person deciding.
    #[arg(long = "as")]
    person: String,
    /// The person's roles, comma-separated.
    #[arg(long, value_delimiter = ',')]
    roles: Vec<String>,
    /// The interrupt's id (`int_…`).
    interrupt: String,
    /// Approve (or answer, with --payload); without it the interrupt is denied.
    #[arg(long)]
    approve: bool,
    /// The payload, as JSON (e.g. '{"answer": "Paris"}').
    #[arg(long)]
    payload: Option<String>,
}

impl DecideArgs {
    pub async fn run(self, wiring: &dyn Wiring) -> CommandResult {
        let DecideArgs { common, tenant, person, roles, interrupt, approve, payload } = self;
        let config = common.load()?;
        let payload = payload.map(|p| serde_json::from_str(&p)).transpose().map_err(|e| format!("--payload: {e}"))?;
        let grace = std::time::Duration::from_secs(config.turns.shutdown_grace_secs);
        let engine = wiring.engine(config).await?;
        let caller = operator(&person, roles);
        let outcome = decide(&engine, &tenant, &caller, &interrupt, approve, payload).await;
        // A turn the decision set going is handed to the serving instances at once.
        engine.hand_over(grace).await;
        println!("{}", serde_json::to_string_pretty(&outcome.map_err(|e| e.to_string())?)?);
        Ok(())
    }
}

/// Decides one interrupt as `person` (the same checks as `POST /v1/interrupts/{id}/decision`),
/// recorded with `via: "cli"`.
pub async fn decide(
    engine: &Engine,
    tenant: &str,
    caller: &Caller,
    interrupt_id: &str,
    approve: bool,
    payload: Option<Value>,
) -> Result<Value, EngineError> {
    let entry = ResumeEntry {
        interrupt_id: interrupt_id.to_string(),
        status: if approve { ResumeStatus::Resolved } else { ResumeStatus::Cancelled },
        payload: payload.or_else(|| approve.then(|| json!({ "approved": true }))),
        metadata: None,
    };
    engine.decide_out_of_band(tenant, caller, &entry, "cli").await
}
