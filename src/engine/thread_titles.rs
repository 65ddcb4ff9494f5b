//! A thread's name and archived mark (the CopilotKit runtime's `useThreads` routes): read for a
//! list, changed by the thread's owner with an audit row in the same transaction (§8).

use std::collections::HashMap;

use serde_json::json;

use super::errors::EngineError;
use super::shape::Engine;
use crate::caller::Caller;
use crate::store::{AuditEntry, ThreadRow, ThreadTitle, TitleChange};

/// The longest name a thread takes, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

impl Engine {
    /// The names and marks of those of `threads` that have any.
    pub async fn thread_titles(&self, threads: &[i64]) -> Result<HashMap<i64, ThreadTitle>, EngineError> {
        Ok(self.inner.store.thread_titles(threads).await?)
    }

    /// Renames, archives or unarchives a thread the caller may read and owns (the same owner
    /// who may erase it, [`Caller::may_delete`]); appends `thread.rename`, `thread.archive` or
    /// `thread.unarchive` (who, which thread; never the name, which is content). A thread erased
    /// meanwhile is `NotFound`.
    pub async fn change_thread_title(
        &self,
        caller: &Caller,
        thread: &ThreadRow,
        change: &TitleChange,
    ) -> Result<ThreadTitle, EngineError> {
        if !caller.may_read(thread) || !caller.may_delete(thread) {
            return Err(EngineError::PermissionDenied);
        }
        if let Some(title) = &change.title {
            if title.trim().is_empty() || title.chars().count() > MAX_TITLE_CHARS {
                return Err(EngineError::BadRequest {
                    field: "name",
                    message: format!("must be 1 to {MAX_TITLE_CHARS} characters, not only spaces"),
                });
            }
            if title.contains('\0') {
                return Err(EngineError::BadRequest { field: "name", message: "holds a NUL character".into() });
            }
        }
        let action = match (change.title.is_some(), change.archived) {
            (_, Some(true)) => "thread.archive",
            (_, Some(false)) => "thread.unarchive",
            (true, None) => "thread.rename",
            (false, None) => {
                return Err(EngineError::BadRequest {
                    field: "body",
                    message: "changes nothing: give name or archived".into(),
                })
            }
        };
        let audit = AuditEntry {
            tenant: thread.tenant.clone(),
            action: action.into(),
            actor: caller.label(),
            via: caller.via().map(str::to_string),
            detail: json!({ "thread": thread.thread_id, "renamed": change.title.is_some() }).to_string(),
            at_ms: self.now_ms(),
        };
        // Erased meanwhile: as unknown as any other missing thread.
        self.inner
            .store
            .change_thread_title(thread.pk, change, &audit)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("thread '{}'", thread.thread_id)))
    }
}
