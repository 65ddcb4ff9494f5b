//! An MCP App's own request (SPEC §9.2, docs/api.md "MCP Apps' own requests"): a run whose
//! `forwardedProps.__proxiedMCPRequest` asks the agent's MCP server for something on the App's
//! behalf. It is answered under the rights of a run: the caller may start the agent (checked
//! before), may read the thread's content, and the thread is one it may see (403 alike for an
//! unknown thread and another's: an App is only ever shown on a thread). The agent then says
//! whether it serves the request ([`Agent::check_app_request`](crate::engine::turn::Agent)):
//! a refusal is a lone `RUN_ERROR` with its code, and nothing is stored.
//!
//! A request that needs no person is answered at once and kept nowhere but the audit trail
//! (`mcp_app.request`, written before the server is asked): it is no turn, so the thread's
//! conversation does not change and a reconnect has nothing to follow. A `tools/call` whose
//! tool's policy asks a person becomes a turn of the thread, with the App's request as its
//! input: the agent makes the call the way it makes a model's, so the approval is the one an
//! agent's call raises (deciders, expiry, schema, the decision route, the console).

use serde_json::{json, Value};

use super::follow::refuse;
use super::plan::{refuse_while_running, refuse_while_waiting, NewMessage};
use crate::engine::errors::EngineError;
use crate::engine::plans::{RunPlan, RunRequest};
use crate::engine::shape::Engine;
use crate::engine::turn::app_request::{AppRequest, AppRoute};
use crate::protocol::ErrorCode;
use crate::store::{branches, AuditEntry, ThreadRow, TurnStatus};

/// What an App's request comes to.
pub enum AppPlan {
    /// Answered: the MCP method's result, or `{"error": "…"}` when the server failed, for the
    /// `result` of the run's `RUN_FINISHED`.
    Answered(Value),
    /// A turn's stream (a call that waits for a person), or a refusal.
    Run(RunPlan),
}

impl Engine {
    /// Answers an MCP App's `app` request brought by the run `request` (see the module's doc).
    pub async fn begin_app_request(
        &self,
        request: RunRequest<'_>,
        mut app: AppRequest,
    ) -> Result<AppPlan, EngineError> {
        let store = &self.inner.store;
        let thread = store.find_thread(request.tenant.as_str(), request.thread_id.as_str()).await?;
        let thread = match thread {
            Some(thread) if request.caller.may_read(&thread) => thread,
            _ => return Err(EngineError::PermissionDenied),
        };
        if !request.caller.scopes().may_read_content() {
            return Err(EngineError::PermissionDenied);
        }
        app.idempotency_key = request_key(request.tenant.as_str(), request.thread_id.as_str(), request.run_id.as_str());
        let Some(agent) = self.inner.agents.get(request.agent).cloned() else {
            return Ok(AppPlan::Run(refuse(ErrorCode::UnknownMcpServer, "the agent is not running on this gateway")));
        };
        let route = match agent.check_app_request(&app).await {
            Ok(route) => route,
            Err(refusal) => return Ok(AppPlan::Run(refuse(refusal.code, &refusal.message))),
        };
        match route {
            AppRoute::Answer => {
                // In the trail before the server is asked: no request goes unrecorded.
                store.append_audit(&self.app_request_entry(&request, &app)).await?;
                let result = match agent.answer_app_request(&app).await {
                    Ok(result) => result,
                    // As `@ag-ui/mcp-apps-middleware` answers a failed request.
                    Err(why) => json!({ "error": why }),
                };
                Ok(AppPlan::Answered(result))
            }
            AppRoute::Turn => self.app_turn(&request, &thread, &app).await.map(AppPlan::Run),
        }
    }

    /// A `tools/call` that waits for a person, as a new turn after the thread's newest: refused
    /// as a new message would be while a turn runs or waits, or past the tenant's limits.
    async fn app_turn(
        &self,
        request: &RunRequest<'_>,
        thread: &ThreadRow,
        app: &AppRequest,
    ) -> Result<RunPlan, EngineError> {
        let turns = self.inner.store.thread_turns(thread.pk).await?;
        let latest = branches::newest(&turns);
        if let Some(latest) = latest {
            match latest.status {
                TurnStatus::Running => return Ok(refuse_while_running()),
                TurnStatus::Waiting => {
                    let interrupts = self.inner.store.turn_interrupts(latest.pk).await?;
                    return Ok(refuse_while_waiting(request, &interrupts));
                }
                _ => {}
            }
        }
        if let Some(refusal) = self.over_quota(request.tenant.as_str()).await? {
            return Ok(RunPlan::Refused(refusal));
        }
        let parent = latest.map(|t| t.pk);
        let text = format!("MCP App: {} {} on '{}'", app.method, app.tool().unwrap_or(""), app.server);
        let message = NewMessage {
            id: String::new(),
            text,
            parts: None,
            parent,
            action: None,
            app_request: Some(json!({ "server": app.server, "method": app.method, "params": app.params })),
        };
        // It goes on from the thread's newest turn: the App was shown on the thread as it stands.
        self.start_turn(request, Some(thread), turns, message).await
    }

    /// The `mcp_app.request` audit row (§8): who asked which server for what, on which thread.
    fn app_request_entry(&self, request: &RunRequest<'_>, app: &AppRequest) -> AuditEntry {
        AuditEntry {
            tenant: request.tenant.to_string(),
            action: "mcp_app.request".into(),
            actor: request.caller.label(),
            via: request.caller.via().map(str::to_string),
            detail: json!({
                "thread": request.thread_id.as_str(),
                "agent": request.agent,
                "server": app.server,
                "method": app.method,
                "tool": app.tool(),
                "run": request.run_id.as_str(),
            })
            .to_string(),
            at_ms: self.now_ms(),
        }
    }
}

/// A SHA-256 over the tenant, the thread and the run id, each prefixed by its length, in hex:
/// the same for the request sent again, naming no tenant or thread to the tool.
fn request_key(tenant: &str, thread: &str, run_id: &str) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [tenant, thread, "mcp-app", run_id] {
        digest.update(&(part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    digest.finish().as_ref().iter().map(|byte| format!("{byte:02x}")).collect()
}
