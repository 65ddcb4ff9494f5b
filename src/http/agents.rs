//! `GET /v1/agents`: the agents this caller may start in the tenant (its scopes name them).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::permissions::Authorized;
use super::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/agents", get(list_agents))
}

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
