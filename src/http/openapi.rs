//! The OpenAPI 3.1 document served at `GET /openapi.json`. Each route declares its own
//! operation beside its handler (`#[utoipa::path]`) and is mounted with `utoipa_axum::routes!`,
//! so the document lists exactly the routes the router serves; this module holds the parts
//! they share: the error body (the one [`ErrorBody`] every refusal is answered with, defined
//! beside `ApiError` in `error.rs`), the caller's credential and the `tenant` parameter, and
//! [`serve_document`], which names this deployment's tenants and agents only to a caller
//! allowed to know them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::http::header::AUTHORIZATION;
use axum::http::{Extensions, HeaderMap};
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

use super::error::{ErrorBody, ErrorCode, ErrorDetail};
use super::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agui-gateway",
        description = "An AG-UI 1.0 gateway: durable threads, a persisted event log with replay, \
                       interrupts and multi-tenant auth in front of AI agents.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCode, SseEvent, BinaryFrames)),
    modifiers(&BearerCredential),
    security(("bearer" = []), ()),
)]
pub struct ApiDoc;

/// `?tenant=`: the tenant whose agents and threads the request is about (default `default`).
#[derive(serde::Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct TenantQuery {
    /// A configured tenant's name; unknown tenants are `404 not_found`.
    pub tenant: Option<String>,
}

/// `{thread}`: the thread a route is about, named by the client's `threadId`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct ThreadPath {
    /// The client's threadId.
    #[param(pattern = r"^[A-Za-z0-9._:@-]{1,200}$")]
    pub thread: String,
}

/// `{agent}`: the agent a route starts or describes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct AgentPath {
    /// The configured agent's name.
    pub agent: String,
}

/// One server-sent event of a run (the response is a stream of these): `data` is one AG-UI
/// event as JSON, `id` names its place in the turn's log (send it back as `Last-Event-ID`).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SseEvent {
    /// `<turn>.<seq>` or `<turn>.<seq>.<part>`; `0` on a refused run's lone `RUN_ERROR`.
    pub id: Option<String>,
    /// One AG-UI 1.0 event, as JSON on one line (`{"type": "RUN_STARTED", …}`).
    #[schema(content_media_type = "application/json")]
    pub data: String,
    /// Always `message` (unnamed events).
    pub event: Option<String>,
}

/// The binary transport's body (`Accept: application/vnd.ag-ui.event+proto`): one frame per
/// event, each a 4-byte big-endian length and then an `@ag-ui/proto` `Event` message whose
/// `metadata.eventId` is the event's id (send it back as `Last-Event-ID`).
#[derive(Serialize, ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct BinaryFrames(pub Vec<u8>);

/// A JSON object whose members the route's documentation lists (any JSON object validates).
#[derive(Serialize, ToSchema)]
#[schema(value_type = Object)]
pub struct JsonObject(pub Value);

/// The credential: an app token, an identity provider's token or a tenant API key, as a bearer
/// token. Loopback callers may omit it while no verifier is configured (development).
struct BearerCredential;

impl Modify for BearerCredential {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A gateway app token, an identity provider's token, or a tenant API key (agk_…).",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /openapi.json` needs no caller, and tells an anonymous one (or one whose credential is
/// refused) nothing about this deployment: the `agent` and `tenant` parameters are plain
/// strings. A caller with a credential gets them as enums of what it can reach: its tenant and
/// the agents it may start there (the local person of development mode: every tenant and agent),
/// so a client (or a fuzzer) knows which values exist.
pub async fn serve_document(
    state: AppState,
    document: Arc<Value>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Json<Value> {
    let header = headers.get(AUTHORIZATION).map(|v| v.as_bytes());
    let peer = extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
    let Ok(authenticated) = state.auth.authenticate(header, peer).await else {
        return Json(document.as_ref().clone());
    };
    let config = &state.config;
    let tenants: Vec<&str> = match &authenticated.tenant {
        Some(tenant) => config.tenant(tenant).map(|t| t.name.as_str()).into_iter().collect(),
        None => config.tenants.iter().map(|t| t.name.as_str()).collect(),
    };
    let scopes = authenticated.caller.scopes();
    let agents: Vec<&str> = config
        .agents
        .iter()
        .filter(|_| !tenants.is_empty())
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.iter().any(|t| tenants.contains(&t.as_str())))
        .filter(|agent| scopes.may_start(&agent.name))
        .map(|agent| agent.name.as_str())
        .collect();
    Json(naming(document.as_ref().clone(), &agents, &tenants))
}

/// The document with the `agent` path and `tenant` query parameters limited to these names.
fn naming(mut document: Value, agents: &[&str], tenants: &[&str]) -> Value {
    let operations = document.get_mut("paths").and_then(|p| p.as_object_mut()).into_iter().flat_map(|p| p.values_mut());
    for operation in operations.flat_map(|item| item.as_object_mut().into_iter().flat_map(|m| m.values_mut())) {
        // `get_mut`, not indexing: indexing would add `"parameters": null` where there are none.
        for parameter in operation.get_mut("parameters").and_then(|p| p.as_array_mut()).into_iter().flatten() {
            let names = match (parameter["name"].as_str(), parameter["in"].as_str()) {
                (Some("agent"), Some("path")) => agents,
                (Some("tenant"), Some("query")) => tenants,
                _ => continue,
            };
            parameter["schema"] = serde_json::json!({ "type": "string", "enum": names });
        }
    }
    document
}
