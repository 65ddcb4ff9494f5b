//! Logs and traces: the `tracing` subscriber `serve` and the commands install. Lines go to
//! stderr, for people (`pretty`) or as one JSON object each (`json`, with the span chain, so a
//! turn's lines carry the request id). With the `otel` cargo feature and `log.otel_endpoint`
//! set, spans (request → turn → agent call → tool call) are also exported over OTLP/HTTP.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{Config, LogFormat};

/// An error and each of its sources, for a log line (what a client is told never quotes it),, joined with ": " (a source whose text its parent already
/// ends with is left out, as `#[error("…: {0}")]` wrappers repeat it).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !chain.ends_with(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = cause.source();
    }
    chain
}

/// Keeps the trace exporter alive; dropping it flushes what is queued.
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Installs the global subscriber. A bad filter falls back to `info`.
pub fn init(config: &Config) -> Telemetry {
    let filter = EnvFilter::try_new(&config.log.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // No log line shows a secret the gateway holds, whatever error or answer quotes it.
    config.hold_its_secrets();
    let stderr = || crate::redact::MaskingWriter(std::io::stderr());
    let lines: BoxedLayer = match config.log.format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_writer(stderr).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .with_writer(stderr)
            .boxed(),
    };
    let mut layers: Vec<BoxedLayer> = vec![lines];
    let telemetry = exporter(config, &mut layers);
    let _ = Registry::default().with(layers.with_filter(filter)).try_init();
    if !config.log.otel_endpoint.is_empty() && !cfg!(feature = "otel") {
        tracing::warn!("log.otel_endpoint is set, but this build has no OpenTelemetry export (cargo feature `otel`)");
    }
    telemetry
}

#[cfg(feature = "otel")]
fn exporter(config: &Config, layers: &mut Vec<BoxedLayer>) -> Telemetry {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};

    if config.log.otel_endpoint.is_empty() {
        return Telemetry { provider: None };
    }
    let endpoint = format!("{}/v1/traces", config.log.otel_endpoint.trim_end_matches('/'));
    let client = match otlp_http::Blocking::new(config) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("OpenTelemetry export is off: {error}");
            return Telemetry { provider: None };
        }
    };
    let built =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_http_client(client).with_endpoint(endpoint);
    let exporter = match built.build() {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("OpenTelemetry export is off: {error}");
            return Telemetry { provider: None };
        }
    };
    let resource =
        opentelemetry_sdk::Resource::builder().with_service_name(config.log.otel_service_name.clone()).build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("agui-gateway");
    layers.push(tracing_opentelemetry::layer().with_tracer(tracer).boxed());
    Telemetry { provider: Some(provider) }
}

/// The exporter's HTTP client: the gateway's reqwest (0.13), blocking, as the batch exporter
/// sends from a thread of its own with no runtime; HTTPS trusts what every outbound connection
/// trusts (`src/tls.rs`).
#[cfg(feature = "otel")]
mod otlp_http {
    use std::time::Duration;

    use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

    use crate::config::Config;

    #[derive(Debug)]
    pub(super) struct Blocking(reqwest::blocking::Client);

    impl Blocking {
        /// Built on a thread of its own: a blocking client may be neither made nor dropped on
        /// the runtime's threads.
        pub(super) fn new(config: &Config) -> Result<Blocking, String> {
            let tls = crate::tls::client_config(&config.tls).map_err(|e| e.to_string())?;
            std::thread::spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
                    .build()
                    .map(Blocking)
                    .map_err(|e| format!("the HTTP client could not be set up ({e})"))
            })
            .join()
            .unwrap_or_else(|_| Err("the HTTP client could not be set up".into()))
        }
    }

    #[async_trait::async_trait]
    impl HttpClient for Blocking {
        async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
            let mut response = self.0.execute(request.try_into()?)?.error_for_status()?;
            let headers = std::mem::take(response.headers_mut());
            let mut answer = Response::builder().status(response.status()).body(response.bytes()?)?;
            *answer.headers_mut() = headers;
            Ok(answer)
        }
    }
}

#[cfg(not(feature = "otel"))]
fn exporter(_config: &Config, _layers: &mut Vec<BoxedLayer>) -> Telemetry {
    Telemetry {}
}
