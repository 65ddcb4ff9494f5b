//! `agui-gateway healthcheck`: a container's HEALTHCHECK, one GET of the gateway's readiness.

use std::time::Duration;

use super::CommandResult;
use crate::config::{redact_url, TlsConfig};

/// Exit 0 when a gateway answers 200 at URL (for a container's HEALTHCHECK), else 1.
#[derive(clap::Args)]
pub struct HealthcheckArgs {
    /// The URL to probe.
    #[arg(default_value = "http://127.0.0.1:8080/readyz")]
    url: String,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3)]
    timeout_secs: u64,
    /// A PEM bundle of CA certificates to trust for an `https://` URL, besides the
    /// platform's roots and `SSL_CERT_FILE`: the CA of the gateway's own certificate.
    #[arg(long, value_name = "FILE")]
    cacert: Option<String>,
}

impl HealthcheckArgs {
    /// One GET: success only for `200`, so a container is healthy exactly when `/readyz` says
    /// so. An `https://` URL is verified like every outbound connection (certificate and host
    /// name), trusting `cacert` too.
    pub async fn run(self) -> CommandResult {
        let HealthcheckArgs { url, timeout_secs, cacert } = self;
        let trust = TlsConfig { extra_ca_file: cacert.unwrap_or_default(), ..Default::default() };
        let tls = crate::tls::client_config(&trust)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(timeout_secs))
            .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
            .build()?;
        let host = reqwest::Url::parse(&url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        let status = match client.get(&url).send().await {
            Ok(response) => response.status(),
            Err(error) => {
                let why =
                    crate::tls::describe_failure(&error, &host).unwrap_or_else(|| error.without_url().to_string());
                return Err(format!("{}: {why}", redact_url(&url)).into());
            }
        };
        if status == reqwest::StatusCode::OK {
            Ok(())
        } else {
            Err(format!("{} answered {status}", redact_url(&url)).into())
        }
    }
}
