//! The `openai` agent's HTTP tools (SPEC §9.2): the configured endpoints the model may call,
//! their arguments checked against the tool's JSON Schema first. Every failure becomes the
//! text the model reads as the tool's result, so a broken tool never fails the turn.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use super::{secret_args, OpenaiAgent};
use crate::config::HttpTool;

/// The header an HTTP tool call carries its idempotency key in (the IETF draft's name).
pub(super) const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// The tool as the model is offered it (its secret arguments as their placeholders).
pub(super) fn definition(tool: &HttpTool) -> Value {
    secret_args::offered_definition(&tool.name, &tool.description, &tool.parameters, &tool.secret_args, true)
}

impl OpenaiAgent {
    pub(super) fn tool(&self, name: &str) -> Option<&HttpTool> {
        self.config.tools.iter().find(|tool| tool.name == name)
    }

    /// Calls an HTTP tool; any failure becomes the result the model reads. `idempotency_key`
    /// goes in the `Idempotency-Key` header: the same for each attempt at one call.
    #[tracing::instrument(name = "tool_call", skip_all, fields(tool = %tool.name))]
    pub(super) async fn run_tool(&self, tool: &HttpTool, arguments: &str, idempotency_key: &str) -> String {
        let mut args: Value = match serde_json::from_str(arguments) {
            Ok(args) => args,
            Err(e) => return format!("error: the arguments are not JSON ({e})"),
        };
        // The model sent placeholders for the credentials: the values go in only now, in the
        // request to the tool, and nowhere else (the log shows what the model sent).
        if let Err(why) = secret_args::fill_in_and_check(&mut args, &tool.parameters, &tool.secret_args, true) {
            return why;
        }
        let http = match self.http.client() {
            Ok(http) => http,
            Err(why) => return format!("error: {why}"),
        };
        let method = reqwest::Method::from_bytes(tool.method.as_bytes()).unwrap_or(reqwest::Method::POST);
        let mut request = http.request(method.clone(), &tool.url).timeout(Duration::from_secs(tool.timeout_secs));
        request = if method == reqwest::Method::GET {
            let query: Vec<(String, String)> = args
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                        .collect()
                })
                .unwrap_or_default();
            request.query(&query)
        } else {
            request.json(&args)
        };
        request = request.header(IDEMPOTENCY_KEY, idempotency_key);
        for (header, variable) in &tool.secret_headers {
            if let Ok(value) = std::env::var(variable) {
                request = request.header(header.as_str(), value);
            }
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                return format!("error: the tool could not be reached: {}", crate::agents::http::unreachable_reason(e))
            }
        };
        let status = response.status();
        if status.is_redirection() {
            // Not followed: the redirect could carry the secret headers to another address.
            return format!(
                "error: the tool answered {status}, a redirect, which is not followed (no header goes to another \
                 address); the tool's url must be its final address"
            );
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) if body.len() + chunk.len() <= tool.max_response_bytes => body.extend_from_slice(&chunk),
                Ok(_) => return format!("error: the tool's answer exceeds {} bytes", tool.max_response_bytes),
                Err(e) => return format!("error: the tool's answer broke off ({})", e.without_url()),
            }
        }
        let text = String::from_utf8_lossy(&body).to_string();
        if status.is_success() {
            text
        } else {
            format!("error: the tool answered {status}: {text}")
        }
    }
}
