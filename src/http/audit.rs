//! `GET /v1/threads/{thread}/audit`: a thread's audit trail (§8) for the tenant's admins — who
//! started its turns and through which door, who read its board, who decided its interrupts and
//! via what. Anyone else, and a thread that does not exist, get the same `403`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{thread_refusals, ApiError, Responses};
use super::openapi::{JsonObject, TenantQuery, ThreadPath};
use super::permissions::TenantAdmin;
use super::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(thread_audit))
}

/// What reading a thread's audit trail refuses (each with the error body): one who is no admin
/// of the tenant and a thread that does not exist alike.
struct AuditRefusals;

impl utoipa::IntoResponses for AuditRefusals {
    fn responses() -> Responses {
        thread_refusals((403, "not an admin of the tenant, or no such thread (`permission_denied`)"))
    }
}

/// The audit rows about one thread of the tenant, oldest first, for an admin of the tenant
/// (a role its `admin_roles` lists), whoever's thread it is.
#[utoipa::path(
    get,
    path = "/v1/threads/{thread}/audit",
    tag = "threads",
    params(ThreadPath, TenantQuery),
    responses(
        (status = 200, description = "`threadId` and `audit`: the rows about the thread, oldest first (at most 500), each `at`, `action` (`run.start`, `board.read`, `interrupt.decide`, `interrupt.expire`, …), `actor`, `via` and `detail`.", body = JsonObject),
        AuditRefusals
    )
)]
async fn thread_audit(
    State(state): State<AppState>,
    TenantAdmin { tenant, .. }: TenantAdmin,
    Path(thread): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let thread_id = super::threads::thread_id(&thread)?;
    let thread = state.engine.store().find_thread(&tenant.name, thread_id.as_str()).await?;
    let Some(thread) = thread else { return Err(ApiError::PermissionDenied) };
    let audit = state.engine.thread_audit(&thread).await?;
    Ok(Json(json!({ "threadId": thread.thread_id, "audit": audit })))
}
