//! The check of the newest user message's content parts before a turn starts (SPEC §2
//! `messages`): each part is an AG-UI 1.0 part whose content can be read, of a modality the
//! agent takes, and within `limits.max_content_part_bytes`, all of them within
//! `limits.max_content_bytes`. The gateway never fetches a URL part: it only measures it.

use crate::config::{AgentConfig, AgentKindConfig, Limits};
use crate::protocol::{InputMessage, Modality, PartSource, RunAgentInput, UserContent};

use super::error::{ApiError, ErrorCode};

pub fn check_newest_user_message(input: &RunAgentInput, agent: &AgentConfig, limits: &Limits) -> Result<(), ApiError> {
    let newest = input.messages.iter().enumerate().rev().find_map(|(index, m)| match m {
        InputMessage::User(user) => Some((index, user)),
        _ => None,
    });
    let Some((index, user)) = newest else { return Ok(()) };
    let UserContent::Parts(parts) = &user.content else { return Ok(()) };
    let mut total = 0usize;
    for (at, part) in parts.iter().enumerate() {
        let field = format!("messages[{index}].content[{at}]");
        let unsupported = |why: String| ApiError::BadRequest {
            code: ErrorCode::UnsupportedContent,
            message: format!("{field}: {why}"),
        };
        let Some(modality) = part.modality() else {
            return Err(unsupported(format!("a '{}' part is no AG-UI 1.0 content part", part.kind)));
        };
        if modality == Modality::Text {
            continue;
        }
        if !agent.takes(modality) {
            return Err(unsupported(format!(
                "agent '{}' takes no {} part ({} part)",
                agent.name,
                modality.as_str(),
                part.kind
            )));
        }
        let source = part.content_source().map_err(|why| ApiError::bad_request(&field, why))?;
        if let AgentKindConfig::Openai(_) = agent.kind {
            crate::agents::openai::content::chat_part(part).map_err(unsupported)?;
        }
        let size = match source {
            PartSource::Data { value, .. } | PartSource::Url { value, .. } | PartSource::File { value } => value.len(),
        };
        if size > limits.max_content_part_bytes {
            return Err(ApiError::ContentTooLarge(format!(
                "{field}: the part's content is {size} bytes, more than limits.max_content_part_bytes ({})",
                limits.max_content_part_bytes
            )));
        }
        total += size;
        if total > limits.max_content_bytes {
            return Err(ApiError::ContentTooLarge(format!(
                "messages[{index}].content: the parts' content is more than limits.max_content_bytes ({}) together",
                limits.max_content_bytes
            )));
        }
    }
    Ok(())
}
