//! The OpenAI chat-completions streaming wire format, as a model server sends it: one
//! `data: {chat.completion.chunk}` frame per delta, a usage frame, and `data: [DONE]`.

use serde_json::{json, Value};

/// The frame that ends every answer.
pub const DONE: &str = "data: [DONE]\n\n";

/// One `chat.completion.chunk` frame carrying `delta` for choice 0.
pub fn chunk(delta: Value) -> String {
    frame(json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "scripted",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}))
}

/// The frame that reports the call's token usage (no choices, as with `include_usage`).
pub fn usage(prompt: u64, completion: u64) -> String {
    frame(json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "scripted", "choices": [],
                 "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}))
}

/// `text` as content deltas, one per word (each with the space after it).
pub fn text(text: &str) -> String {
    text.split_inclusive(' ').map(|piece| chunk(json!({"content": piece}))).collect()
}

/// A tool call at `index` with the model's id `call_<number>`, its arguments in two pieces (as
/// models stream them). The first piece says the role when `with_role`.
pub fn tool_call(index: usize, number: usize, name: &str, args: &Value, with_role: bool) -> String {
    let args = args.to_string();
    let (head, tail) = args.split_at(args.len() / 2);
    let mut opening = json!({"tool_calls": [{"index": index, "id": format!("call_{number}"), "type": "function",
                                             "function": {"name": name, "arguments": head}}]});
    if with_role {
        opening["role"] = json!("assistant");
    }
    chunk(opening) + &chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": tail}}]}))
}

/// How many tool results the conversation of `request` holds (`role: "tool"` messages).
pub fn tool_results(request: &Value) -> usize {
    request["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count())
}

fn frame(event: Value) -> String {
    format!("data: {event}\n\n")
}
