//! One model call of the `openai` agent: the chat-completions request (the configured tools,
//! the built-ins and the client's), sent with retries, and its streamed answer read chunk by
//! chunk, with text and tool-call argument deltas written to the log as they arrive.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{builtin_definition, OpenaiAgent, PendingCall, Usage, DELEGATE};
use crate::engine::turn::{AgentError, Reasoning, TurnContext};
use crate::protocol::sse::SseDecoder;
use crate::retry::{retry_after, Backoff};

/// The longest a retry waits when the model's answer asks for more in `Retry-After`: the
/// turn should rather fail in words than sit silent for as long as a server says.
const MOST_RETRY_AFTER: Duration = Duration::from_secs(60);

impl OpenaiAgent {
    /// One streamed model call: text deltas and tool-call argument deltas go to the log as
    /// they arrive. The events that close the answer are held back for the checkpoint.
    #[tracing::instrument(name = "agent_call", skip_all, fields(model = %self.config.model))]
    pub(super) async fn call_model(
        &self,
        turn: &mut TurnContext,
        messages: &[Value],
    ) -> Result<ModelAnswer, AgentError> {
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        let client_tools = turn.client_tools().iter().map(|t| {
            let parameters = t.parameters.clone().unwrap_or_else(|| json!({ "type": "object" }));
            json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": parameters } })
        });
        let tools: Vec<Value> = self
            .config
            .tools
            .iter()
            .map(super::tools::definition)
            .chain(self.config.builtins.iter().filter_map(|b| {
                let mut definition = builtin_definition(b)?;
                if b == DELEGATE {
                    definition["function"]["parameters"]["properties"]["agent"]["enum"] = json!(self.config.delegates);
                }
                Some(definition)
            }))
            .chain(self.mcp.definitions().await)
            .chain(client_tools)
            .collect();
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        if let Some(temperature) = self.config.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = self.config.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        // A cancel drops the request (and its retries' waits) at once: the model sees it end.
        let response = turn.unless_stopped(self.send_with_retries(&body)).await??;
        let mut answer = ModelAnswer::default();
        let mut message: Option<String> = None;
        let mut reasoning: Option<Reasoning> = None;
        let mut calls: BTreeMap<u64, PendingCall> = BTreeMap::new();
        let mut started: Vec<u64> = Vec::new();
        let mut decoder = SseDecoder::new();
        let mut stream = response.bytes_stream();
        // Held for the whole answer (made once, not per chunk): a cancel or a hand-over ends
        // the read between two chunks, and dropping the stream closes the model's connection.
        let stop = turn.stop_asked();
        tokio::pin!(stop);
        'read: loop {
            let next = tokio::select! {
                biased;
                why = &mut stop => return Err(why),
                next = stream.next() => next,
            };
            let Some(chunk) = next else { break 'read };
            let chunk = chunk.map_err(|e| AgentError::FailedOn {
                what: "the model's stream broke off".into(),
                source: Box::new(e.without_url()),
            })?;
            for sse in decoder.push(&chunk) {
                let data = sse.data.trim();
                if data == "[DONE]" {
                    break 'read;
                }
                let Ok(event) = serde_json::from_str::<Value>(data) else { continue };
                if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                    answer.usage.input += usage["prompt_tokens"].as_u64().unwrap_or(0);
                    answer.usage.output += usage["completion_tokens"].as_u64().unwrap_or(0);
                }
                let Some(delta) = event["choices"].get(0).map(|c| &c["delta"]) else { continue };
                if let Some(thought) = reasoning_of(delta) {
                    let id = match &reasoning {
                        Some(open) => open.message_id.clone(),
                        None => {
                            let open = turn.reasoning_open().await?;
                            let id = open.message_id.clone();
                            reasoning = Some(open);
                            id
                        }
                    };
                    turn.reasoning_delta(&id, thought).await?;
                }
                let says_more = delta["content"].as_str().is_some_and(|t| !t.is_empty())
                    || delta["tool_calls"].as_array().is_some_and(|calls| !calls.is_empty());
                if says_more {
                    // The thinking is over once the answer or a call begins.
                    if let Some(open) = reasoning.take() {
                        turn.reasoning_close(&open).await?;
                    }
                }
                if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                    let id = match &message {
                        Some(id) => id.clone(),
                        None => {
                            let id = turn.text_start().await?;
                            message = Some(id.clone());
                            id
                        }
                    };
                    turn.text_delta(&id, text).await?;
                    answer.text.push_str(text);
                }
                for call in delta["tool_calls"].as_array().into_iter().flatten() {
                    let index = call["index"].as_u64().unwrap_or(0);
                    let entry = calls.entry(index).or_insert_with(|| PendingCall {
                        model_id: String::new(),
                        gateway_id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                        client: false,
                        interrupt: None,
                    });
                    if let Some(id) = call["id"].as_str() {
                        entry.model_id = id.to_string();
                    }
                    if let Some(name) = call["function"]["name"].as_str() {
                        entry.name.push_str(name);
                    }
                    let arguments = call["function"]["arguments"].as_str().unwrap_or("");
                    if !started.contains(&index) && !entry.name.is_empty() {
                        entry.gateway_id = turn.tool_call_open(&entry.name).await?;
                        started.push(index);
                    }
                    if !arguments.is_empty() {
                        entry.arguments.push_str(arguments);
                        if started.contains(&index) {
                            turn.tool_call_args(&entry.gateway_id, arguments).await?;
                        }
                    }
                }
            }
        }
        // Close what this answer opened, held back to commit with the checkpoint.
        turn.begin_step();
        if let Some(open) = reasoning {
            turn.reasoning_close(&open).await?;
        }
        if let Some(id) = message {
            turn.text_end(&id).await?;
        }
        for call in calls.values() {
            if !call.gateway_id.is_empty() {
                turn.tool_call_close(&call.gateway_id).await?;
            }
        }
        let client_names: Vec<&str> = turn.client_tools().iter().map(|t| t.name.as_str()).collect();
        answer.calls = calls
            .into_values()
            .filter(|c| !c.gateway_id.is_empty())
            .map(|mut c| {
                if c.model_id.is_empty() {
                    c.model_id = c.gateway_id.clone();
                }
                c.client = client_names.contains(&c.name.as_str()) && self.tool(&c.name).is_none();
                c
            })
            .collect();
        Ok(answer)
    }

    async fn send_with_retries(&self, body: &Value) -> Result<reqwest::Response, AgentError> {
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let key = std::env::var(&self.config.api_key_env)
            .ok()
            .filter(|k| !k.is_empty() && !self.config.api_key_env.is_empty());
        let http = self.http.client().map_err(|why| AgentError::Failed(why.to_string()))?;
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::MAX);
        let mut last_problem = String::new();
        // What the last answer asked to wait before the next attempt (`Retry-After`).
        let mut asked_wait = None;
        for attempt in 0..=self.config.retries {
            if attempt > 0 {
                let scheduled = backoff.next_delay();
                tokio::time::sleep(asked_wait.take().map_or(scheduled, |asked: Duration| asked.min(MOST_RETRY_AFTER)))
                    .await;
            }
            // The model never reads a secret the gateway holds, whatever a tool answered.
            let sent = crate::redact::mask_secrets_owned(body.to_string());
            let mut request = http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(sent)
                .timeout(Duration::from_secs(self.config.request_timeout_secs));
            if let Some(key) = &key {
                request = request.bearer_auth(key);
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) if response.status().is_redirection() => {
                    // Not followed: the redirect could carry the API key to another address.
                    return Err(AgentError::Failed(format!(
                        "the model answered {}, a redirect, which is not followed; base_url must be the final address",
                        response.status()
                    )));
                }
                Ok(response) if response.status().as_u16() == 429 || response.status().is_server_error() => {
                    last_problem = format!("the model answered {}", response.status());
                    asked_wait = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|value| value.to_str().ok())
                        .and_then(|value| retry_after(value, std::time::SystemTime::now()));
                    // A wait, not a decision: an HTTP date from the model's server is read
                    // against the machine's clock, which that server's own time is.
                }
                Ok(response) => {
                    return Err(AgentError::Failed(format!("the model refused the request ({})", response.status())))
                }
                Err(e) => {
                    last_problem =
                        format!("the model could not be reached: {}", crate::agents::http::unreachable_reason(e))
                }
            }
        }
        Err(AgentError::Failed(last_problem))
    }
}

/// A reasoning delta, by either name OpenAI-compatible servers give it.
fn reasoning_of(delta: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"].iter().find_map(|field| delta[*field].as_str().filter(|text| !text.is_empty()))
}

#[derive(Debug, Default)]
pub(super) struct ModelAnswer {
    pub(super) text: String,
    pub(super) calls: Vec<PendingCall>,
    pub(super) usage: Usage,
}
