//! Cards (§3): an answer that matches its agent's card schema is also logged as
//! `CUSTOM gateway.card`, which only callers who may read content are shown.

use serde_json::Value;

use super::context::{logged, TurnContext};
use super::outcome::AgentError;
use crate::engine::log::events::{CardEvent, GatewayEvent};

impl TurnContext {
    /// `CUSTOM gateway.card {"turn", "card"}` when the agent declares a card schema and its
    /// last answer is JSON that matches it (§3).
    pub(super) async fn emit_card(&mut self, agent: &str, turn: &str) -> Result<(), AgentError> {
        let Some(schema) = self.card_schema(agent) else { return Ok(()) };
        let Ok(card) = serde_json::from_str::<Value>(self.last_answer().trim()) else { return Ok(()) };
        let matches = jsonschema::validator_for(schema).is_ok_and(|validator| validator.is_valid(&card));
        if !matches {
            return Ok(());
        }
        self.emit(logged(GatewayEvent::Card(CardEvent { turn: turn.to_string(), card }))?).await
    }
}
