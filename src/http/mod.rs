//! The HTTP transport: routes, extractors and SSE rendering. Each resource module exports its
//! `router()`; [`router`] merges them. [`serve`] takes a bound listener and a shutdown signal;
//! [`crate::server::Server::serve`] wraps it in the whole shutdown (turns handed over, grace).

mod accept;
mod agents;
mod audit;
mod body;
mod connections;
mod console;
mod content;
mod copilotkit;
mod error;
pub mod frames;
mod health;
mod interrupts;
mod mcp_apps;
pub mod openapi;
pub mod permissions;
mod query;
mod runs;
pub mod sse;
mod state;
mod threads;
pub mod tls;
mod token;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use error::{ApiError, ErrorBody, ErrorCode};
pub use state::AppState;

use crate::config::Config;

/// Every route, and the OpenAPI document describing exactly them.
fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    // One count of open streams for this server, made with its routes.
    let slots = Arc::new(sse::StreamSlots::default());
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(runs::router(slots.clone()))
        .merge(copilotkit::router(slots))
        .merge(threads::router())
        .merge(agents::router())
        .merge(token::router())
        .merge(health::router())
        .merge(interrupts::router())
        .merge(audit::router())
        .split_for_parts()
}

/// The OpenAPI 3.1 document of every route (`GET /openapi.json`).
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    routes().1
}

pub fn router(state: AppState) -> Router {
    let base = state.config.copilotkit_path.clone();
    let app = canonical_router(state);
    if base == permissions::COPILOTKIT_BASE {
        return app;
    }
    // The rewrite must run before routing: a layer on the routes themselves runs after it.
    Router::new().fallback_service(app).layer(axum::middleware::map_request(move |request| {
        let base = base.clone();
        async move { rebase(request, &base) }
    }))
}

/// Maps a configured `copilotkit_path` onto the canonical base the runtime's routes, their
/// tenant extractor and the OpenAPI document use: `{base}/acme/info` is served as
/// `/v1/copilotkit/acme/info`. The canonical base itself then answers 404, as any path the
/// gateway does not serve. The query is kept as it came.
fn rebase(
    mut request: axum::http::Request<axum::body::Body>,
    base: &str,
) -> Result<axum::http::Request<axum::body::Body>, ApiError> {
    let path = request.uri().path();
    let under = |prefix: &str| path.strip_prefix(prefix).filter(|rest| rest.is_empty() || rest.starts_with('/'));
    let Some(rest) = under(base) else {
        return match under(permissions::COPILOTKIT_BASE) {
            Some(_) => Err(ApiError::NotFound(format!("no route {path}"))),
            None => Ok(request),
        };
    };
    let mut rewritten = format!("{}{rest}", permissions::COPILOTKIT_BASE);
    if let Some(query) = request.uri().query() {
        rewritten = format!("{rewritten}?{query}");
    }
    let mut parts = request.uri().clone().into_parts();
    // The path came from a valid URI and the base is plain segments: it parses again.
    parts.path_and_query = Some(rewritten.parse().map_err(|error| ApiError::bad_request("path", format!("{error}")))?);
    *request.uri_mut() = axum::http::Uri::from_parts(parts).map_err(|error| ApiError::Internal(Box::new(error)))?;
    Ok(request)
}

/// Every route at its canonical path, with the layers every answer goes through.
fn canonical_router(state: AppState) -> Router {
    let cors = cors(state.config.clone());
    let (routes, document) = routes();
    let document = Arc::new(serde_json::to_value(document).unwrap_or_default());
    routes
        // The console's page is no API route: it is not in the document.
        .merge(console::router(state.config.console))
        .route(
            "/openapi.json",
            get(move |State(state): State<AppState>, headers: HeaderMap, extensions: Extensions| {
                openapi::serve_document(state, document.clone(), headers, extensions)
            }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(error::json_refusals))
        .layer(cors)
        // Layers run outside-in from the last one: the id is set (or kept from the caller's
        // `X-Request-Id`), the request's span records it, and the response echoes it.
        .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone()))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeRequestUuid))
        .with_state(state)
}

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The span every log line of a request (and of a turn it starts) is under. The path only:
/// query strings are not logged. The HTTP version tells HTTP/2 streams from HTTP/1.1 requests.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let id = request.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
    tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path(),
        version = ?request.version()
    )
}

/// Unknown paths get the same JSON error body as every other error.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// CORS per tenant (§8): a browser origin may call a tenant's routes only when the tenant's
/// `cors_origins` lists it. The preflight allows `Authorization`, `Content-Type` and
/// `Last-Event-ID`; no response header is exposed beyond the CORS-safelisted ones, and no
/// cookies are involved (credentials are bearer headers). `DELETE` is allowed so a chat page
/// can erase a conversation, `PATCH` so a CopilotKit page can rename or unarchive one.
fn cors(config: Arc<Config>) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, parts: &Parts| {
            let Ok(name) = permissions::tenant_name(parts) else { return false };
            config
                .tenant(&name)
                .is_some_and(|tenant| tenant.cors_origins.iter().any(|o| o.as_bytes() == origin.as_bytes()))
        }))
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([AUTHORIZATION, CONTENT_TYPE, HeaderName::from_static("last-event-id")])
        .max_age(Duration::from_secs(600))
}

/// Serves until `shutdown` resolves; then open streams end and the server drains. With `tls`,
/// the connections are HTTPS ([`tls::TlsListener`]); either way one port speaks HTTP/1.1 and
/// HTTP/2 (over TLS by ALPN, in plain text by prior knowledge), and the same shutdown applies.
pub async fn serve(
    listener: TcpListener,
    tls: Option<&tls::TlsServing>,
    state: AppState,
    stop_streams: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let shutdown = async move {
        shutdown.await;
        stop_streams.send_replace(true);
    };
    let limits = connections::EdgeLimits::from_limits(&state.config.limits);
    // One permit per connection that may be open; the TLS accept loop draws on it too.
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let app = router(state);
    let connections = match tls {
        None => connections::Connections::Plain(listener),
        Some(tls) => connections::Connections::Tls(tls::TlsListener::new(
            listener,
            tls,
            slots.clone(),
            limits.header_read_timeout,
        )?),
    };
    connections::serve(connections, app, shutdown, limits, slots).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rebased(path: &str) -> Result<String, ApiError> {
        let request = axum::http::Request::builder().uri(path).body(axum::body::Body::empty()).expect("request");
        rebase(request, "/api/copilotkit").map(|request| request.uri().to_string())
    }

    #[test]
    fn a_configured_copilotkit_path_is_served_as_the_canonical_one() {
        assert_eq!(rebased("/api/copilotkit/acme/info").ok().as_deref(), Some("/v1/copilotkit/acme/info"));
        assert_eq!(
            rebased("/api/copilotkit/acme/threads?agentId=a&limit=2").ok().as_deref(),
            Some("/v1/copilotkit/acme/threads?agentId=a&limit=2")
        );
        assert_eq!(rebased("/api/copilotkit/acme").ok().as_deref(), Some("/v1/copilotkit/acme"));
        for other in ["/v1/threads?tenant=acme", "/api/copilotkitx/acme/info", "/livez"] {
            assert_eq!(rebased(other).ok().as_deref(), Some(other), "{other}");
        }
        for old in ["/v1/copilotkit/acme/info", "/v1/copilotkit"] {
            assert!(matches!(rebased(old), Err(ApiError::NotFound(_))), "{old}");
        }
    }

    #[test]
    fn every_route_lies_under_a_prefix_the_config_knows() {
        let document = serde_json::to_value(openapi_document()).expect("document");
        let paths = document["paths"].as_object().expect("paths");
        for path in paths.keys() {
            let known = crate::config::GATEWAY_ROUTE_PREFIXES
                .iter()
                .chain([&crate::config::COPILOTKIT_PATH])
                .any(|prefix| path == prefix || path.starts_with(&format!("{prefix}/")));
            assert!(known, "{path} is under no prefix of crate::config::GATEWAY_ROUTE_PREFIXES");
        }
    }
}
