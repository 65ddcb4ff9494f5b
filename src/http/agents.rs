//! `GET /v1/agents`: the agents this caller may start in the tenant.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{AppState, Tenant};
use crate::auth::Caller;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/agents", get(list_agents))
}

async fn list_agents(State(state): State<AppState>, _caller: Caller, Tenant(tenant): Tenant) -> Json<Value> {
    let agents: Vec<Value> = state
        .config
        .agents
        .iter()
        .filter(|agent| agent.tenants.is_empty() || agent.tenants.contains(&tenant.name))
        .map(|agent| json!({ "name": agent.name, "title": agent.title, "description": agent.description }))
        .collect();
    Json(json!({ "agents": agents }))
}
