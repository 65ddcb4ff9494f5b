//! A user message's content as chat-completions content: text parts as `text`, images as
//! `image_url` (a data: URL, or the client's URL passed on, never fetched here), base64 audio
//! as `input_audio` and base64 documents as `file`. The HTTP layer asks [`chat_part`] before a
//! turn starts, so a part the model cannot be given is refused there, not halfway through it.

use serde_json::{json, Value};

use crate::protocol::{ContentPart, Modality, PartSource, UserContent};

/// The chat-completions part for one content part, or why the model cannot be given it.
pub fn chat_part(part: &ContentPart) -> Result<Value, String> {
    let modality = part.modality().ok_or_else(|| format!("a '{}' part is no AG-UI content part", part.kind))?;
    if modality == Modality::Text {
        return Ok(json!({ "type": "text", "text": part.text.as_deref().unwrap_or("") }));
    }
    // Checked again here, not only at the door: a part a turn recorded before the checks
    // existed is left out of later model calls rather than built into a data: URL.
    let source = part.checked_source()?;
    match (modality, source) {
        (Modality::Image, PartSource::Data { value, mime_type }) => {
            Ok(json!({ "type": "image_url", "image_url": { "url": format!("data:{mime_type};base64,{value}") } }))
        }
        (Modality::Image, PartSource::Url { value, .. }) => {
            Ok(json!({ "type": "image_url", "image_url": { "url": value } }))
        }
        (Modality::Audio, PartSource::Data { value, mime_type }) => {
            let format =
                audio_format(mime_type).ok_or_else(|| format!("the model takes wav or mp3 audio, not {mime_type}"))?;
            Ok(json!({ "type": "input_audio", "input_audio": { "data": value, "format": format } }))
        }
        (Modality::Document, PartSource::Data { value, mime_type }) => {
            let filename = part.filename().unwrap_or("document");
            Ok(
                json!({ "type": "file", "file": { "file_data": format!("data:{mime_type};base64,{value}"), "filename": filename } }),
            )
        }
        (Modality::Audio | Modality::Document, PartSource::Url { .. }) => {
            Err(format!("the model takes {} only as data, not by URL", modality.as_str()))
        }
        (_, PartSource::File { .. }) => Err("the model cannot read a file handle; send the content as data".into()),
        (other, _) => Err(format!("the model takes no {} part", other.as_str())),
    }
}

/// The `content` of a chat-completions user message: the string alone when the message is
/// words only (what models without content-part support read), else the parts.
pub fn chat_content(content: &UserContent) -> Value {
    if content.media().is_empty() {
        return Value::String(content.text());
    }
    let UserContent::Parts(parts) = content else { return Value::String(content.text()) };
    // Parts were checked when the turn started; one that no longer maps (the agent's settings
    // changed since) is left out rather than failing an earlier turn's replay.
    Value::Array(parts.iter().filter_map(|part| chat_part(part).ok()).collect())
}

/// What the model reads of a recorded tool message: its text, or, for content parts, the text
/// parts joined and a note for each other part (`[image/png image]`), since a chat-completions
/// `role: "tool"` message takes text alone. A note the text already carries (an MCP result's,
/// `mcp::result`) is not repeated; a picture's data never reaches the model as text.
pub fn tool_text(content: &crate::protocol::events::ToolResultContent) -> String {
    use crate::protocol::events::ToolResultContent;
    let ToolResultContent::Parts(parts) = content else { return content.as_text() };
    let mut text: String = parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
    for part in parts.iter().filter(|p| p["type"] != "text") {
        let kind = part["type"].as_str().unwrap_or("other");
        let mime_type = part["source"]["mimeType"].as_str().or_else(|| part["mimeType"].as_str());
        let note = match mime_type {
            Some(mime_type) => format!("[{mime_type} {kind}]"),
            None => format!("[{kind}]"),
        };
        if !text.contains(&note) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&note);
        }
    }
    text
}

fn audio_format(mime_type: &str) -> Option<&'static str> {
    match mime_type.split(';').next().unwrap_or("").trim() {
        "audio/wav" | "audio/x-wav" | "audio/wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" => Some("mp3"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(value: Value) -> ContentPart {
        serde_json::from_value(value).expect("a part")
    }

    #[test]
    fn each_modality_maps_to_its_chat_part() {
        let image =
            part(json!({"type": "image", "source": {"type": "data", "value": "iVBO", "mimeType": "image/png"}}));
        assert_eq!(
            chat_part(&image),
            Ok(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}))
        );
        let linked = part(json!({"type": "image", "source": {"type": "url", "value": "https://x/a.png"}}));
        assert_eq!(chat_part(&linked), Ok(json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}})));
        let audio = part(json!({"type": "binary", "mimeType": "audio/wav", "data": "UklG"}));
        assert_eq!(
            chat_part(&audio),
            Ok(json!({"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}))
        );
        let pdf = part(
            json!({"type": "document", "source": {"type": "data", "value": "JVBE", "mimeType": "application/pdf"}}),
        );
        assert_eq!(
            chat_part(&pdf),
            Ok(
                json!({"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "document"}})
            )
        );
        let by_url = part(json!({"type": "audio", "source": {"type": "url", "value": "https://x/a.wav"}}));
        assert!(chat_part(&by_url).is_err());
        let video = part(json!({"type": "video", "source": {"type": "url", "value": "https://x/a.mp4"}}));
        assert!(chat_part(&video).is_err());
    }

    #[test]
    fn a_tool_messages_picture_reaches_the_model_as_a_note() {
        use crate::protocol::events::ToolResultContent;
        let image = json!({"type": "image", "source": {"type": "data", "value": "iVBO", "mimeType": "image/png"}});
        let parts = ToolResultContent::Parts(vec![json!({"type": "text", "text": "a chart"}), image.clone()]);
        assert_eq!(tool_text(&parts), "a chart\n[image/png image]");
        let noted =
            ToolResultContent::Parts(vec![json!({"type": "text", "text": "a chart\n[image/png image]"}), image]);
        assert_eq!(tool_text(&noted), "a chart\n[image/png image]", "the note is not repeated");
        assert_eq!(tool_text(&ToolResultContent::Text("5".into())), "5");
    }
}
