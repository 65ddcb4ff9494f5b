//! A person's action on an A2UI surface (SPEC §3, generative UI), in the two forms a run brings
//! it: `forwardedProps.a2uiAction.userAction`, as `@copilotkit/a2ui-renderer` sends a click, and
//! the form `@ag-ui/a2ui-middleware` turns that into (and a CopilotKit runtime in front of the
//! gateway sends): an assistant message whose one tool call is `log_a2ui_event` with the action
//! as its arguments, then that call's tool result saying in words what the person did, and no
//! new user message. The words are the middleware's own, so an agent reads the same sentence
//! whichever way the action came.

use serde_json::Value;

use super::input::{AssistantMessage, FunctionCall, InputMessage, ToolCall, ToolMessage};

/// The tool call that stands for a person's action in a conversation.
pub const LOG_EVENT_TOOL: &str = "log_a2ui_event";

/// The activity type of an A2UI surface.
pub const SURFACE_ACTIVITY: &str = "a2ui-surface";

/// The key of an A2UI surface activity's content that holds its operations.
const OPERATIONS_KEY: &str = "a2ui_operations";

/// The `userAction` of `forwardedProps.a2uiAction`, when the run brings one (an object).
pub fn forwarded_action(forwarded_props: Option<&Value>) -> Option<&Value> {
    forwarded_props?.get("a2uiAction")?.get("userAction").filter(|action| action.is_object())
}

/// What the action says in words: the middleware's tool result for it, letter for letter.
pub fn action_text(action: &Value) -> String {
    let name = action.get("name").and_then(Value::as_str).unwrap_or("unknown_action");
    let surface = action.get("surfaceId").and_then(Value::as_str).unwrap_or("unknown_surface");
    let mut text = format!("User performed action \"{name}\" on surface \"{surface}\"");
    if let Some(component) = action.get("sourceComponentId").and_then(Value::as_str) {
        text.push_str(&format!(" (component: {component})"));
    }
    let context = match action.get("context") {
        Some(context) if !context.is_null() => context.to_string(),
        _ => "{}".to_string(),
    };
    text.push_str(&format!(". Context: {context}"));
    text
}

/// The surface an action names.
pub fn surface_of(action: &Value) -> Option<&str> {
    action.get("surfaceId").and_then(Value::as_str)
}

/// The surfaces an A2UI activity's content draws (each operation names one).
pub fn surfaces_drawn(content: &serde_json::Map<String, Value>) -> Vec<&str> {
    let Some(Value::Array(operations)) = content.get(OPERATIONS_KEY) else { return Vec::new() };
    operations
        .iter()
        .filter_map(|operation| {
            ["createSurface", "updateComponents", "updateDataModel"]
                .iter()
                .find_map(|key| operation.get(*key)?.get("surfaceId")?.as_str())
        })
        .collect()
}

/// The action as the middleware puts it in a conversation: the `log_a2ui_event` call under
/// `message_id`, then its result.
pub fn as_messages(message_id: &str, action: &Value, text: &str) -> [InputMessage; 2] {
    let call_id = format!("{message_id}:action");
    [
        InputMessage::Assistant(AssistantMessage {
            id: message_id.to_string(),
            content: Some(String::new()),
            tool_calls: Some(vec![ToolCall {
                id: call_id.clone(),
                kind: "function".into(),
                function: FunctionCall { name: LOG_EVENT_TOOL.into(), arguments: action.to_string() },
            }]),
            name: None,
        }),
        InputMessage::Tool(ToolMessage {
            id: format!("{call_id}:result"),
            content: Value::String(text.to_string()),
            tool_call_id: call_id,
            error: None,
        }),
    ]
}

/// When `messages[at]` opens an action in the middleware's form (an assistant message with
/// nothing but one `log_a2ui_event` call, its result next): the action and its result's words.
pub fn action_at(messages: &[InputMessage], at: usize) -> Option<(Value, String)> {
    let InputMessage::Assistant(assistant) = messages.get(at)? else { return None };
    if assistant.content.as_deref().is_some_and(|words| !words.is_empty()) {
        return None;
    }
    let [call] = assistant.tool_calls.as_deref()? else { return None };
    if call.function.name != LOG_EVENT_TOOL {
        return None;
    }
    let InputMessage::Tool(result) = messages.get(at + 1)? else { return None };
    if result.tool_call_id != call.id {
        return None;
    }
    let action: Value = serde_json::from_str(&call.function.arguments).ok().filter(Value::is_object)?;
    let words = match &result.content {
        Value::String(words) => words.clone(),
        other => other.to_string(),
    };
    Some((action, words))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_words_are_the_middlewares() {
        let action = json!({"name": "submit", "surfaceId": "form-1", "sourceComponentId": "go", "context": {"n": 2}});
        assert_eq!(
            action_text(&action),
            "User performed action \"submit\" on surface \"form-1\" (component: go). Context: {\"n\":2}"
        );
        assert_eq!(
            action_text(&json!({})),
            "User performed action \"unknown_action\" on surface \"unknown_surface\". Context: {}"
        );
    }

    #[test]
    fn the_middleware_form_reads_back() {
        let action = json!({"name": "submit", "surfaceId": "form-1"});
        let messages = as_messages("x", &action, "words");
        assert_eq!(action_at(&messages, 0), Some((action, "words".to_string())));
        assert_eq!(action_at(&messages, 1), None);
    }
}
