//! Logs and traces: the `tracing` subscriber `serve` and the commands install. Lines go to
//! stderr, for people (`pretty`) or as one JSON object each (`json`, with the span chain, so a
//! turn's lines carry the request id). With the `otel` cargo feature and `log.otel_endpoint`
//! set, spans (request → turn → agent call → tool call) are also exported over OTLP/HTTP.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::{Config, LogFormat};

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
    crate::redact::hold_secrets_of(config.secret_variables());
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
    use opentelemetry_otlp::WithExportConfig;

    if config.log.otel_endpoint.is_empty() {
        return Telemetry { provider: None };
    }
    let endpoint = format!("{}/v1/traces", config.log.otel_endpoint.trim_end_matches('/'));
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(endpoint).build() {
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

#[cfg(not(feature = "otel"))]
fn exporter(_config: &Config, _layers: &mut Vec<BoxedLayer>) -> Telemetry {
    Telemetry {}
}
