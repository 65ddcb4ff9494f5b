//! Which of a client's runs a thread saw last: [`RunIdStore`]. The CopilotKit runtime's live
//! thread list names it when it tells a page that a thread's turn started or ended
//! (`thread_run_activity`), so the page that made the run knows the news is its own.

use async_trait::async_trait;

use super::backend::Backend;
use super::error::StoreError;
use super::sql::Stmt;

#[async_trait]
pub trait RunIdStore: Send + Sync {
    /// The runId of the tenant's thread's latest run (the client's, or one the gateway made
    /// up); `None` for a thread with no run or no such thread.
    async fn latest_run_id(&self, tenant: &str, thread_id: &str) -> Result<Option<String>, StoreError>;
}

const LATEST_RUN: &str = "SELECT r.run_id FROM runs r JOIN threads t ON t.id = r.thread \
     WHERE t.tenant = $1 AND t.thread_id = $2 ORDER BY r.created_at_ms DESC, r.run_id DESC LIMIT 1";

#[async_trait]
impl<B: Backend> RunIdStore for B {
    async fn latest_run_id(&self, tenant: &str, thread_id: &str) -> Result<Option<String>, StoreError> {
        let row = Stmt::new(LATEST_RUN).bind(tenant).bind(thread_id).fetch_optional(self.read_pool()).await?;
        row.map(|row| row.get("run_id")).transpose()
    }
}
