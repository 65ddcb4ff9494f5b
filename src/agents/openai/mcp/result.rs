//! What becomes of an MCP tool call's result (docs/agents.md): the text the model reads, the
//! content the thread records and the client sees, and, for a tool whose server offers a UI
//! (MCP Apps), what the `mcp-apps` activity shows.
//!
//! An image block stays an image: the tool message the client sees carries it as an AG-UI
//! image part (`source: {type: "data", …}`), beside the text parts. The model reads text only,
//! because a chat-completions `role: "tool"` message takes text parts alone; it reads a short
//! note in the image's place (`[image/png image]`), so it knows a picture was returned.

use rmcp::model::CallToolResult;
use serde_json::{json, Map, Value};

use crate::protocol::events::ToolResultContent;

/// A tool call's result, in each of its readers' forms.
#[derive(Debug, Clone)]
pub(in crate::agents::openai) struct McpOutcome {
    /// What the model reads.
    pub model_text: String,
    /// What the thread records and the client sees: the text, or parts when there is more
    /// than text (an image).
    pub content: ToolResultContent,
    /// The server's result as it came (`CallToolResult`), when the call reached the server and
    /// it answered: what an MCP App is given.
    pub result: Option<Value>,
}

impl McpOutcome {
    /// A call that never got a result from the server: the same words for everyone.
    pub fn failed(why: String) -> McpOutcome {
        McpOutcome { content: ToolResultContent::Text(why.clone()), model_text: why, result: None }
    }

    /// The outcome of a result the server answered.
    pub fn of(result: &CallToolResult) -> McpOutcome {
        let model_text = result_text(result);
        let images: Vec<Value> = result
            .content
            .iter()
            .filter_map(|block| serde_json::to_value(block).ok())
            .filter(|value| value["type"] == "image")
            .filter_map(|value| image_part(&value))
            .collect();
        let content = if images.is_empty() {
            ToolResultContent::Text(model_text.clone())
        } else {
            let mut parts = Vec::new();
            if !model_text.is_empty() {
                parts.push(json!({ "type": "text", "text": model_text }));
            }
            parts.extend(images);
            ToolResultContent::Parts(parts)
        };
        McpOutcome { model_text, content, result: serde_json::to_value(result).ok() }
    }

    /// The content of the `mcp-apps` activity that shows the call in its App, in the fields
    /// `@ag-ui/mcp-apps-middleware` gives it: the App's `resourceUri`, the server (`serverId`,
    /// and `serverHash`, which here is the server's configured name too: the middleware hashes
    /// the server's URL, which may carry a secret), the call's `toolInput` and its `result`.
    /// `None` when the call got no result from the server (nothing for the App to show).
    pub fn app_content(&self, server: &str, resource_uri: &str, tool_input: &str) -> Option<Map<String, Value>> {
        let result = self.result.clone()?;
        let tool_input: Value = serde_json::from_str(tool_input).unwrap_or_else(|_| json!({}));
        let content = json!({
            "resourceUri": resource_uri,
            "serverHash": server,
            "serverId": server,
            "toolInput": tool_input,
            "result": result,
        });
        content.as_object().cloned()
    }
}

/// An MCP image block (`{type: "image", data, mimeType}`) as an AG-UI image part; a block
/// without its data or type is left out (its note stays in the text).
fn image_part(block: &Value) -> Option<Value> {
    let data = block["data"].as_str()?;
    let mime_type = block["mimeType"].as_str()?;
    Some(json!({ "type": "image", "source": { "type": "data", "value": data, "mimeType": mime_type } }))
}

/// What the model reads of a call's result: its text content, and its structured content when
/// no text block already carries it (servers are asked to put it in a text block too). An
/// error result says so.
pub(super) fn result_text(result: &CallToolResult) -> String {
    let texts: Vec<String> = result
        .content
        .iter()
        .map(|block| match serde_json::to_value(block) {
            Ok(value) if value["type"] == "text" => value["text"].as_str().unwrap_or_default().to_string(),
            Ok(value) if value["type"] == "image" => {
                format!("[{} image]", value["mimeType"].as_str().unwrap_or("an"))
            }
            Ok(value) => format!("[{} content not shown]", value["type"].as_str().unwrap_or("other")),
            Err(_) => "[content not shown]".to_string(),
        })
        .collect();
    let mut text = texts.join("\n");
    if let Some(structured) = &result.structured_content {
        let echoed = texts.iter().any(|text| says(text, structured));
        if !echoed {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&structured.to_string());
        }
    }
    if result.is_error == Some(true) {
        format!("error: {text}")
    } else {
        text
    }
}

/// Whether `text` already says `structured`: it is its JSON, or `structured` is the one-key
/// wrapper SDKs put around a value that is not an object (`{"result": …}`) and `text` is that
/// value (as JSON, or the string itself).
fn says(text: &str, structured: &Value) -> bool {
    let parsed = serde_json::from_str::<Value>(text).ok();
    if parsed.as_ref() == Some(structured) {
        return true;
    }
    match structured.as_object() {
        Some(object) if object.len() == 1 => {
            object.values().next().is_some_and(|value| value.as_str() == Some(text) || parsed.as_ref() == Some(value))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::says;

    #[test]
    fn text_that_carries_the_structured_content_is_not_repeated() {
        assert!(says(r#"{"sum": 5}"#, &json!({"sum": 5})));
        assert!(says("5", &json!({"result": 5})));
        assert!(says("charged 42 EUR", &json!({"result": "charged 42 EUR"})));
        assert!(!says("done", &json!({"sum": 5})));
        assert!(!says("5", &json!({"a": 5, "b": 1})));
    }
}
