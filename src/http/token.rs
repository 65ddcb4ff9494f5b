//! `POST /v1/auth/token`: the token exchange (SPEC §2.1, shaped like RFC 8693). A registered
//! app's backend presents its app key (`Authorization: Bearer agk_…`, a key made with
//! `keys create --app`) and a person's identity-provider token; it gets a short-lived gateway
//! app token acting as that person, with `via: app:<name>`, holding exactly the scopes both the
//! person and the app key hold (an exchange whose shared scopes start no turn is refused). The
//! app key is checked before the body is read, and is accepted by no other route.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{documented, ApiError, ErrorCode, Responses};
use super::error::{BODY_TIMEOUT, INTERNAL, UNKNOWN_TENANT};
use super::openapi::{JsonObject, TenantQuery};
use super::permissions::{configured_tenant, refuse, tenant_name};
use super::state::AppState;
use crate::auth::{AppKey, MintRequest};
use crate::config::TenantConfig;
use crate::store::AuditEntry;

/// An exchange request is a few short fields and a token.
const MAX_BODY_BYTES: usize = 64 * 1024;
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const SUBJECT_TYPES: [&str; 3] =
    [JWT_TYPE, "urn:ietf:params:oauth:token-type:access_token", "urn:ietf:params:oauth:token-type:id_token"];

pub fn router() -> OpenApiRouter<AppState> {
    // The route measures its own body limit while reading (413 with the JSON error body).
    OpenApiRouter::new().routes(routes!(exchange)).layer(DefaultBodyLimit::disable())
}

/// The app whose key authenticated the request, of the tenant the request names.
struct App {
    key: AppKey,
    tenant: TenantConfig,
}

impl FromRequestParts<AppState> for App {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let name = tenant_name(parts)?;
        let header = parts.headers.get(AUTHORIZATION).map(|v| v.as_bytes());
        let key = state.auth.authenticate_app(header).await.map_err(|e| refuse(state, &name, e))?;
        if key.tenant != name {
            state.auth_failed(&name, "other_tenant");
            return Err(ApiError::PermissionDenied);
        }
        let tenant = configured_tenant(state, &name)?;
        Ok(App { key, tenant })
    }
}

/// RFC 8693 token exchange, as a form or JSON.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct ExchangeRequest {
    grant_type: Option<String>,
    subject_token: Option<String>,
    subject_token_type: Option<String>,
    requested_token_type: Option<String>,
}

/// Scopes as an error message shows them.
fn shown(scopes: &crate::auth::Scopes) -> String {
    if scopes.is_empty() {
        "none".into()
    } else {
        scopes.to_string()
    }
}

fn invalid(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::Grant { code, message: message.into() }
}

/// What a token exchange refuses, as OpenAPI documents it (each with the error body).
struct ExchangeRefusals;

impl utoipa::IntoResponses for ExchangeRefusals {
    fn responses() -> Responses {
        documented(&[
            (400, "an RFC 6749 error (`invalid_request`, `unsupported_grant_type`, `invalid_grant`)"),
            (401, "no valid app key (`unauthenticated`)"),
            (403, "the key belongs to another tenant (`permission_denied`)"),
            UNKNOWN_TENANT,
            BODY_TIMEOUT,
            (413, "the body exceeds 64 KiB (`payload_too_large`)"),
            (415, "neither a form nor JSON (`unsupported_media_type`)"),
            INTERNAL,
        ])
    }
}

/// Token exchange (RFC 8693): an app key (the bearer credential) and a person's identity-provider
/// token for a short-lived gateway app token.
#[utoipa::path(
    post,
    path = "/v1/auth/token",
    tag = "auth",
    params(TenantQuery),
    request_body(content(
        (ExchangeRequest = "application/x-www-form-urlencoded"),
        (ExchangeRequest = "application/json"),
    )),
    responses(
        (status = 200, description = "`{access_token, issued_token_type, token_type, expires_in}`", body = JsonObject),
        ExchangeRefusals
    )
)]
async fn exchange(
    State(state): State<AppState>,
    App { key, tenant }: App,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = super::body::read_limited(body, MAX_BODY_BYTES, super::body::body_timeout(&state)).await?;
    let form = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let request: ExchangeRequest = if form.starts_with("application/x-www-form-urlencoded") {
        serde_urlencoded::from_bytes(&body).map_err(|e| invalid(ErrorCode::InvalidRequest, format!("body: {e}")))?
    } else if form.starts_with("application/json") {
        serde_json::from_slice(&body).map_err(|e| invalid(ErrorCode::InvalidRequest, format!("body: {e}")))?
    } else {
        return Err(ApiError::UnsupportedMediaType);
    };
    if request.grant_type.as_deref() != Some(GRANT_TYPE) {
        return Err(invalid(ErrorCode::UnsupportedGrantType, format!("grant_type must be {GRANT_TYPE}")));
    }
    let subject_type = request.subject_token_type.as_deref().unwrap_or("");
    if !SUBJECT_TYPES.contains(&subject_type) {
        return Err(invalid(ErrorCode::InvalidRequest, "subject_token_type must name a JWT, access token or ID token"));
    }
    if request.requested_token_type.as_deref().is_some_and(|t| t != JWT_TYPE && t != SUBJECT_TYPES[1]) {
        return Err(invalid(ErrorCode::InvalidRequest, "requested_token_type: only a JWT access token is issued"));
    }
    let subject = request.subject_token.as_deref().filter(|t| !t.is_empty());
    let subject = subject.ok_or_else(|| invalid(ErrorCode::InvalidRequest, "subject_token is required"))?;
    let identity = state.auth.verify_identity_token(subject).map_err(|error| {
        state.auth_failed(&tenant.name, error.reason());
        invalid(ErrorCode::InvalidGrant, format!("the subject token was not accepted: {error}"))
    })?;
    if identity.tenant != tenant.name {
        state.auth_failed(&tenant.name, "other_tenant");
        return Err(invalid(ErrorCode::InvalidGrant, "the subject token belongs to another tenant"));
    }
    let mut person = identity.person;
    let via = format!("app:{}", key.name);
    let shared = person.scopes.shared_with(&key.scopes);
    let tenant_agents = state
        .config
        .agents
        .iter()
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&tenant.name))
        .map(|agent| agent.name.as_str());
    if !shared.may_start_any(tenant_agents) {
        // A token that starts nothing is no use to the app, and an empty list must never be
        // mistaken for "everything" further on: refuse the exchange instead.
        state.auth_failed(&tenant.name, "no_shared_scope");
        return Err(invalid(
            ErrorCode::InvalidGrant,
            format!(
                "the person's scopes ({}) and the app key's ({}) share none that starts a turn on an agent of this \
                 tenant (a run needs threads:read, threads:content and the agent's scope)",
                shown(&person.scopes),
                shown(&key.scopes)
            ),
        ));
    }
    person.scopes = shared;
    person.via = Some(via.clone());
    person.app_key = Some(key.id.clone());
    let minted = state.auth.mint(&MintRequest {
        tenant: &tenant.name,
        person: &person,
        ttl_secs: state.auth.exchange_ttl_secs(),
        not_after: Some(identity.expires_at),
    });
    let (token, expires_at) = minted?;
    let audit = AuditEntry {
        tenant: tenant.name.clone(),
        action: "token.exchange".into(),
        actor: format!("person:{}", person.id),
        via: Some(via),
        detail: json!({
            "appKey": key.id,
            "provider": identity.provider,
            "scope": person.scopes.to_string(),
            "expiresAt": expires_at,
        })
        .to_string(),
        at_ms: state.auth.clock().now_ms(),
    };
    state.auth.audit(audit).await?;
    let expires_in = expires_at.saturating_sub(state.auth.clock().now_secs());
    let mut response = Json(json!({
        "access_token": token,
        "issued_token_type": JWT_TYPE,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "scope": person.scopes.to_string(),
    }))
    .into_response();
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
