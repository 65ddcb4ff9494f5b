//! `GET /v1/agents`: the agents this caller may start in the tenant (its scopes name them).

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ErrorBody;
use super::openapi::{JsonObject, TenantQuery};
use super::permissions::Authorized;
use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_agents))
}

/// The agents this caller may start in the tenant.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    params(TenantQuery),
    responses(
        (status = 200, description = "`{\"agents\": [{name, title, description}]}`", body = JsonObject),
        (status = 401, description = "no valid credential (`unauthenticated`)", body = ErrorBody),
        (status = 403, description = "the caller may not do this, or the thread is not theirs (`permission_denied`)", body = ErrorBody),
        (status = 404, description = "unknown tenant (`not_found`)", body = ErrorBody),
        (status = 500, description = "internal error (`internal`); the cause is logged", body = ErrorBody)
    )
)]
async fn list_agents(State(state): State<AppState>, Authorized { caller, tenant }: Authorized) -> Json<Value> {
    let agents: Vec<Value> = state
        .config
        .agents
        .iter()
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&tenant.name))
        .filter(|agent| caller.scopes().may_start(&agent.name))
        .map(|agent| json!({ "name": agent.name, "title": agent.title, "description": agent.description }))
        .collect();
    Json(json!({ "agents": agents }))
}
