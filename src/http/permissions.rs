//! Permissions as extractor types (SPEC §2.1–2.2): a handler names what it needs — [`CanRead`],
//! [`CanReadContent`], [`CanStart`] — and cannot run without it. Each is built from the request's
//! head only, so a refused caller costs no body read.
//!
//! Order: the credential (401 `unauthenticated`), the credential's tenant against `?tenant=`
//! (403 `permission_denied`), the tenant is configured (404), then the permission (403).

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Path};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::error::ApiError;
use super::state::AppState;
use crate::auth::{AuthError, Caller};
use crate::config::{AgentConfig, TenantConfig};

/// The tenant a request names, not yet checked: the path's for the CopilotKit runtime routes
/// (`/v1/copilotkit/{tenant}/…`, whose clients join paths to a base URL and cannot add a
/// query), else `?tenant=` (default `default`).
pub(super) fn tenant_name(parts: &Parts) -> Result<String, ApiError> {
    if let Some(tenant) = tenant_in_path(parts.uri.path()) {
        return Ok(tenant);
    }
    let query: HashMap<String, String> = super::query::parse_query(&parts.uri)?;
    Ok(query.get("tenant").cloned().unwrap_or_else(|| "default".to_string()))
}

/// Where the CopilotKit runtime's routes live; the segment after it is the tenant. A
/// configured `copilotkit_path` is mapped onto it before routing ([`super::rebase`]), so this
/// is the only base the routes and this extractor see.
pub(super) const COPILOTKIT_BASE: &str = crate::config::COPILOTKIT_PATH;

/// The tenant of a path under [`COPILOTKIT_BASE`] (`/v1/copilotkit/{tenant}/…`),
/// percent-decoded; `None` for any other path.
fn tenant_in_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix(COPILOTKIT_BASE)?.strip_prefix('/')?;
    let segment = rest.split('/').next().filter(|s| !s.is_empty())?;
    percent_encoding::percent_decode_str(segment).decode_utf8().ok().map(|s| s.into_owned())
}

/// The configured tenant of that name (404 otherwise).
pub(super) fn configured_tenant(state: &AppState, name: &str) -> Result<TenantConfig, ApiError> {
    state.config.tenant(name).cloned().ok_or_else(|| ApiError::NotFound(format!("unknown tenant '{name}'")))
}

/// Counts a refused credential against the tenant, then answers 401 (or 500 when the
/// credential could not be checked at all).
pub(super) fn refuse(state: &AppState, tenant: &str, error: AuthError) -> ApiError {
    if !matches!(error, AuthError::Store(_)) {
        state.auth_failed(tenant, error.reason());
    }
    ApiError::from(error)
}

/// An authenticated caller of the tenant the request names.
pub struct Authorized {
    pub caller: Caller,
    pub tenant: TenantConfig,
}

impl FromRequestParts<AppState> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let name = tenant_name(parts)?;
        let header = parts.headers.get(AUTHORIZATION).map(|v| v.as_bytes());
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
        let authenticated = state.auth.authenticate(header, peer).await.map_err(|e| refuse(state, &name, e))?;
        if authenticated.tenant.as_ref().is_some_and(|tenant| *tenant != name) {
            // A good credential of another tenant: it reaches nothing here, and says so the
            // same way whether or not what it asked for exists.
            state.auth_failed(&name, "other_tenant");
            return Err(ApiError::PermissionDenied);
        }
        let tenant = configured_tenant(state, &name)?;
        Ok(Authorized { caller: authenticated.caller, tenant })
    }
}

/// May read the tenant's threads (`threads:read`); which threads is the engine's
/// `readable_thread` (a person's own, or the tenant's).
pub struct CanRead {
    pub caller: Caller,
    pub tenant: TenantConfig,
}

impl FromRequestParts<AppState> for CanRead {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Authorized { caller, tenant } = Authorized::from_request_parts(parts, state).await?;
        if !caller.scopes().may_read_threads() {
            return Err(ApiError::PermissionDenied);
        }
        Ok(CanRead { caller, tenant })
    }
}

/// May read threads and their content: messages, the board (`threads:read threads:content`).
pub struct CanReadContent {
    pub caller: Caller,
    pub tenant: TenantConfig,
}

impl FromRequestParts<AppState> for CanReadContent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let CanRead { caller, tenant } = CanRead::from_request_parts(parts, state).await?;
        if !caller.scopes().may_read_content() {
            return Err(ApiError::PermissionDenied);
        }
        Ok(CanReadContent { caller, tenant })
    }
}

/// What a permission grants: the caller, in the tenant. An extractor built on a permission
/// (the thread a caller may read, [`super::threads::ReadableThread`]) takes any that does.
pub trait Grant: FromRequestParts<AppState, Rejection = ApiError> + Send {
    fn granted(self) -> (Caller, TenantConfig);
}

impl Grant for CanRead {
    fn granted(self) -> (Caller, TenantConfig) {
        (self.caller, self.tenant)
    }
}

impl Grant for CanReadContent {
    fn granted(self) -> (Caller, TenantConfig) {
        (self.caller, self.tenant)
    }
}

/// Administers the tenant (`threads:read` and a role the tenant's `admin_roles` lists; the
/// local person of development mode too): reads its threads' audit trails (§8).
pub struct TenantAdmin {
    pub caller: Caller,
    pub tenant: TenantConfig,
}

impl FromRequestParts<AppState> for TenantAdmin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let CanRead { caller, tenant } = CanRead::from_request_parts(parts, state).await?;
        let admin = caller == Caller::local() || caller.roles().iter().any(|role| tenant.admin_roles.contains(role));
        if !admin {
            return Err(ApiError::PermissionDenied);
        }
        Ok(TenantAdmin { caller, tenant })
    }
}

/// May start a turn on the route's `{agent}` (§2.2): read, content, and `agent:<name>`.
pub struct CanStart {
    pub caller: Caller,
    pub tenant: TenantConfig,
    pub agent: AgentConfig,
}

impl FromRequestParts<AppState> for CanStart {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let CanReadContent { caller, tenant } = CanReadContent::from_request_parts(parts, state).await?;
        // The route's `{agent}` (beside a `{tenant}` or `{thread}` on the CopilotKit routes).
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound("unknown agent".into()))?;
        let name = params.get("agent").ok_or_else(|| ApiError::NotFound("unknown agent".into()))?;
        let agent = startable_agent(state, &caller, &tenant, name)?;
        Ok(CanStart { caller, tenant, agent })
    }
}

/// The agent `name` when the caller may start it in the tenant. The name is checked against
/// the caller's scopes before it is looked up: to a caller who may not start it, an agent that
/// exists and one that does not answer alike (§8).
pub(super) fn startable_agent(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantConfig,
    name: &str,
) -> Result<AgentConfig, ApiError> {
    if !caller.scopes().may_start(name) {
        return Err(ApiError::PermissionDenied);
    }
    state
        .config
        .agent(name)
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&tenant.name))
        .cloned()
        .ok_or_else(|| ApiError::NotFound(format!("unknown agent '{name}'")))
}

#[cfg(test)]
mod tests {
    use super::tenant_in_path;

    #[test]
    fn the_copilotkit_routes_name_their_tenant_in_the_path() {
        assert_eq!(tenant_in_path("/v1/copilotkit/acme/info").as_deref(), Some("acme"));
        assert_eq!(tenant_in_path("/v1/copilotkit/acme").as_deref(), Some("acme"));
        assert_eq!(tenant_in_path("/v1/copilotkit/ac%2Dme/threads").as_deref(), Some("ac-me"));
        for other in ["/v1/copilotkit", "/v1/copilotkit/", "/v1/copilotkitx/acme", "/v1/agui/agents/demo", "/"] {
            assert_eq!(tenant_in_path(other), None, "{other}");
        }
    }
}
