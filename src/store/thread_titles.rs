//! A thread's name and archived mark: [`ThreadTitleStore`]. They are what a person sets on a
//! thread through the CopilotKit runtime's thread routes (`useThreads`); the thread itself and
//! its log never change for them. A thread without a row has no name and is not archived; the
//! row goes with its thread when the thread is erased (a foreign key with `ON DELETE CASCADE`).

use std::collections::HashMap;

use async_trait::async_trait;

use super::audit::insert_audit;
use super::backend::Backend;
use super::error::StoreError;
use super::rows::audit::AuditEntry;
use super::sql::{Arg, Stmt};

/// What a person set on a thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadTitle {
    pub title: Option<String>,
    /// When it was archived; `None` when it is not.
    pub archived_at_ms: Option<i64>,
}

/// One change to a thread's name or archived mark; `None` leaves that part as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TitleChange {
    pub title: Option<String>,
    pub archived: Option<bool>,
}

#[async_trait]
pub trait ThreadTitleStore: Send + Sync {
    /// The names and marks of those of `threads` (primary keys) that have any.
    async fn thread_titles(&self, threads: &[i64]) -> Result<HashMap<i64, ThreadTitle>, StoreError>;
    /// Applies `change` to the thread at `audit`'s time and appends `audit`, in one transaction; the thread's
    /// row is locked first, so a change never lands on a thread being erased. `None`: the
    /// thread is gone (nothing was written).
    async fn change_thread_title(
        &self,
        thread: i64,
        change: &TitleChange,
        audit: &AuditEntry,
    ) -> Result<Option<ThreadTitle>, StoreError>;
}

const UPSERT_TITLE: &str = "INSERT INTO thread_titles (thread, title, archived_at_ms, updated_at_ms) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (thread) DO UPDATE \
     SET title = excluded.title, archived_at_ms = excluded.archived_at_ms, updated_at_ms = excluded.updated_at_ms";
const ONE_TITLE: &str = "SELECT thread, title, archived_at_ms FROM thread_titles WHERE thread = $1";

#[async_trait]
impl<B: Backend> ThreadTitleStore for B {
    async fn thread_titles(&self, threads: &[i64]) -> Result<HashMap<i64, ThreadTitle>, StoreError> {
        let mut titles = HashMap::new();
        // A page of a list at a time (at most a few hundred), so one statement each.
        for chunk in threads.chunks(200) {
            let places: Vec<String> = (1..=chunk.len()).map(|n| format!("${n}")).collect();
            let sql = format!(
                "SELECT thread, title, archived_at_ms FROM thread_titles WHERE thread IN ({})",
                places.join(", ")
            );
            let mut statement = Stmt::new(&sql);
            for pk in chunk {
                statement = statement.bind(*pk);
            }
            for row in statement.fetch_all(self.read_pool()).await? {
                titles.insert(
                    row.get("thread")?,
                    ThreadTitle { title: row.get("title")?, archived_at_ms: row.get("archived_at_ms")? },
                );
            }
        }
        Ok(titles)
    }

    async fn change_thread_title(
        &self,
        thread: i64,
        change: &TitleChange,
        audit: &AuditEntry,
    ) -> Result<Option<ThreadTitle>, StoreError> {
        let at_ms = audit.at_ms;
        let mut tx = self.write_pool().begin_with(B::BEGIN_WRITE).await?;
        let lock_thread = format!("SELECT id FROM threads WHERE id = $1 {}", B::LOCK_ROW);
        if Stmt::new(&lock_thread).bind(thread).fetch_optional(&mut tx).await?.is_none() {
            tx.rollback().await?;
            return Ok(None);
        }
        let current = match Stmt::new(ONE_TITLE).bind(thread).fetch_optional(&mut tx).await? {
            Some(row) => ThreadTitle { title: row.get("title")?, archived_at_ms: row.get("archived_at_ms")? },
            None => ThreadTitle::default(),
        };
        let next = ThreadTitle {
            title: change.title.clone().or(current.title),
            archived_at_ms: match change.archived {
                Some(true) => current.archived_at_ms.or(Some(at_ms)),
                Some(false) => None,
                None => current.archived_at_ms,
            },
        };
        Stmt::new(UPSERT_TITLE)
            .bind(thread)
            .bind(Arg::OptText(next.title.as_deref()))
            .bind(next.archived_at_ms)
            .bind(at_ms)
            .execute(&mut tx)
            .await?;
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(Some(next))
    }
}
