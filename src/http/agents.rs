//! `GET /v1/agents` and `GET /v1/agents/{agent}`: the agents this caller may start in the
//! tenant (its scopes name them), each with what it can do in AG-UI 1.0's capabilities
//! vocabulary (`crate::agents::capabilities`).

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody, TenantRefusals};
use super::openapi::TenantQuery;
use super::permissions::Authorized;
use super::state::AppState;
use crate::config::{AgentConfig, Config};
use crate::protocol::capabilities::AgentCapabilities;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_agents)).routes(routes!(one_agent))
}

/// One agent as a client discovers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentDescription {
    pub name: String,
    pub title: String,
    pub description: String,
    pub capabilities: AgentCapabilities,
}

/// `{"agents": [...]}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentDescription>,
}

fn described(agent: &AgentConfig, config: &Config) -> AgentDescription {
    AgentDescription {
        name: agent.name.clone(),
        title: agent.title.clone(),
        description: agent.description.clone(),
        capabilities: crate::agents::capabilities::capabilities(agent, config),
    }
}

/// The agents of the tenant this caller may start.
fn startable<'a>(state: &'a AppState, auth: &'a Authorized) -> impl Iterator<Item = &'a AgentConfig> + 'a {
    state
        .config
        .agents
        .iter()
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&auth.tenant.name))
        .filter(|agent| auth.caller.scopes().may_start(&agent.name))
}

/// The agents this caller may start in the tenant, with their capabilities.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    params(TenantQuery),
    responses(
        (status = 200, description = "The agents this caller may start, each with its AG-UI 1.0 capabilities.", body = AgentList),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        TenantRefusals
    )
)]
async fn list_agents(State(state): State<AppState>, auth: Authorized) -> Json<AgentList> {
    let agents = startable(&state, &auth).map(|agent| described(agent, &state.config)).collect();
    Json(AgentList { agents })
}

/// One agent this caller may start, with its capabilities; an agent it may not start answers
/// like one that does not exist.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent}",
    tag = "agents",
    params(("agent" = String, Path, description = "The configured agent's name."), TenantQuery),
    responses(
        (status = 200, description = "The agent and its AG-UI 1.0 capabilities.", body = AgentDescription),
        (status = 401, description = "no valid credential (`unauthenticated`)", body = ErrorBody),
        (status = 403, description = "the caller may not do this (`permission_denied`)", body = ErrorBody),
        (status = 404, description = "unknown tenant, or no such agent the caller may start (`not_found`)", body = ErrorBody),
        (status = 500, description = "internal error (`internal`); the cause is logged", body = ErrorBody)
    )
)]
async fn one_agent(
    State(state): State<AppState>,
    Path(name): Path<String>,
    auth: Authorized,
) -> Result<Json<AgentDescription>, ApiError> {
    match startable(&state, &auth).find(|agent| agent.name == name) {
        Some(agent) => Ok(Json(described(agent, &state.config))),
        None => Err(ApiError::NotFound(format!("agent '{name}' not found"))),
    }
}
