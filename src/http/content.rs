//! The check of the newest user message's content parts before a turn starts (SPEC §2
//! `messages`): each part is an AG-UI 1.0 part whose content can be read — its media type well
//! formed and of its modality, its base64 data decoding, a URL of a scheme
//! `limits.content_url_schemes` allows — of a modality the agent takes, and within
//! `limits.max_content_part_bytes`, all of them within `limits.max_content_bytes`. A part is
//! measured whole, every byte the turn keeps of it (its data or URL, media type, file name,
//! metadata): the turn stores it and sends it on every model call. The gateway never fetches a
//! URL part: it only measures and checks it.

use crate::config::{AgentConfig, AgentKindConfig, Limits};
use crate::protocol::input::url_scheme;
use crate::protocol::{ContentPart, InputMessage, Modality, PartSource, RunAgentInput, UserContent};

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
        // Measured first, before anything reads the content.
        let size = part_bytes(part);
        if size > limits.max_content_part_bytes {
            return Err(ApiError::ContentTooLarge(format!(
                "{field}: the part is {size} bytes, more than limits.max_content_part_bytes ({})",
                limits.max_content_part_bytes
            )));
        }
        total += size;
        if total > limits.max_content_bytes {
            return Err(ApiError::ContentTooLarge(format!(
                "messages[{index}].content: the parts are more than limits.max_content_bytes ({}) together",
                limits.max_content_bytes
            )));
        }
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
        let source = part.checked_source().map_err(|why| ApiError::bad_request(&field, why))?;
        if let PartSource::Url { value, .. } = source {
            let allowed = url_scheme(value).filter(|scheme| limits.content_url_schemes.contains(scheme));
            if allowed.is_none() {
                let shown: String = value.chars().take(40).collect();
                return Err(unsupported(format!(
                    "the URL '{shown}' is not of a scheme limits.content_url_schemes allows ({})",
                    limits.content_url_schemes.join(", ")
                )));
            }
        }
        if let AgentKindConfig::Openai(_) = agent.kind {
            crate::agents::openai::content::chat_part(part).map_err(unsupported)?;
        }
    }
    Ok(())
}

/// What a part weighs: every byte of it as the turn keeps it (serialized), less the words of a
/// text part, which count as the message's words do (within `limits.max_body_bytes`).
fn part_bytes(part: &ContentPart) -> usize {
    let whole = serde_json::to_vec(part).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
    match (part.modality(), &part.text) {
        (Some(Modality::Text), Some(text)) => {
            let words = serde_json::to_vec(text).map(|bytes| bytes.len().saturating_sub(2)).unwrap_or(0);
            whole.saturating_sub(words)
        }
        _ => whole,
    }
}
