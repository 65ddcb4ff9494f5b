//! The outbound HTTP client every agent kind shares (tools, models, MCP servers, upstream
//! AG-UI servers), and how a request that got no answer is put in words. Below the agent kinds:
//! they import it, it imports none of them.

use std::sync::Arc;

/// The HTTP client agents call tools, models and upstream servers with, over HTTP or HTTPS
/// (the gateway's outbound TLS configuration, `src/tls.rs`). It follows no redirect: a request
/// carries the configured (secret) headers, and a redirect could hand them to any other
/// address. A 3xx answer is the caller's to report.
#[derive(Debug, Clone)]
pub struct AgentHttp(Result<reqwest::Client, String>);

impl AgentHttp {
    pub fn new(tls: &Arc<rustls::ClientConfig>) -> AgentHttp {
        AgentHttp(
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .tls_backend_preconfigured(rustls::ClientConfig::clone(tls))
                .build()
                .map_err(|e| format!("the HTTP client could not be set up ({e})")),
        )
    }

    /// The client, or why there is none.
    pub fn client(&self) -> Result<&reqwest::Client, &str> {
        self.0.as_ref().map_err(String::as_str)
    }
}

/// Why a request got no answer, in words for the run's error: a failed TLS handshake says what
/// was wrong with the certificate and for which host; anything else is the client's own words,
/// without the URL (it may carry a query with secrets).
pub fn unreachable_reason(error: reqwest::Error) -> String {
    let host = error.url().and_then(|url| url.host_str()).unwrap_or("?").to_string();
    match crate::tls::describe_failure(&error, &host) {
        Some(tls) => tls,
        None => error.without_url().to_string(),
    }
}
