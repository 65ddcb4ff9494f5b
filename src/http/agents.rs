//! `GET /v1/agents` and `GET /v1/agents/{agent}`: the agents this caller may start in the
//! tenant (its scopes name them), each with what it can do in AG-UI 1.0's capabilities
//! vocabulary (`crate::agents::capabilities`).

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{documented, ApiError, ErrorBody, Responses, TenantRefusals, INTERNAL, UNAUTHENTICATED};
use super::openapi::{AgentPath, TenantQuery};
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

/// What describing one agent refuses (each with the error body).
struct AgentRefusals;

impl utoipa::IntoResponses for AgentRefusals {
    fn responses() -> Responses {
        let unknown = (404, "unknown tenant, or no such agent the caller may start (`not_found`)");
        documented(&[UNAUTHENTICATED, (403, "the caller may not do this (`permission_denied`)"), unknown, INTERNAL])
    }
}

/// One agent this caller may start, with its capabilities; an agent it may not start answers
/// like one that does not exist.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent}",
    tag = "agents",
    params(AgentPath, TenantQuery),
    responses(
        (status = 200, description = "The agent and its AG-UI 1.0 capabilities.", body = AgentDescription),
        AgentRefusals
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
