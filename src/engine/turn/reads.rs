//! What a running turn reads from the store (its thread, conversation, board, state and
//! earlier checkpoints), each read through [`TurnContext::patiently`], which waits out a
//! database that is only briefly away.

use std::time::Duration;

use serde_json::Value;

use super::context::TurnContext;
use super::outcome::AgentError;
use crate::retry::Backoff;

/// How long a running turn waits for a database that is away before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

impl TurnContext {
    /// The thread's conversation as the log holds it just before event `before_seq` of this
    /// turn: earlier turns whole, this turn's user message, and what the turn said before that
    /// event (its answers, tool calls and results, the client's tool results).
    pub async fn conversation_before(&self, before_seq: i64) -> Result<Vec<crate::protocol::InputMessage>, AgentError> {
        self.patiently("the thread could not be read", || {
            crate::engine::conversation::load_at(
                self.store(),
                self.identity().thread_pk,
                self.identity().turn_pk,
                before_seq,
                crate::engine::conversation::Activity::Left,
            )
        })
        .await
    }

    /// The checkpoints of the earlier turns of this turn's branch and agent, newest first (an
    /// agent that keeps what an upstream last said across turns reads it there).
    pub async fn earlier_checkpoints(&self) -> Result<Vec<String>, AgentError> {
        Ok(self.checkpoints_by_branch().await?.0)
    }

    /// This agent's checkpoints of the thread, from one read of its turns: those of the earlier
    /// turns of this turn's branch, newest first — only they are this conversation's (§6) — and
    /// those of the turns on other branches, which an agent keeping a session per branch reads
    /// to know which sessions another branch has used.
    pub async fn checkpoints_by_branch(&self) -> Result<(Vec<String>, Vec<String>), AgentError> {
        let turns = self
            .patiently("the thread could not be read", || self.store().thread_turns(self.identity().thread_pk))
            .await?;
        let (this_turn, agent) = (self.identity().turn_pk, &self.identity().agent);
        let branch = crate::store::branches::ending_at(&turns, this_turn);
        let on_branch: Vec<i64> = branch.iter().map(|turn| turn.pk).collect();
        let earlier = branch
            .into_iter()
            .rev()
            .filter(|turn| turn.pk != this_turn && turn.agent == *agent)
            .filter_map(|turn| turn.checkpoint)
            .collect();
        let elsewhere = turns
            .into_iter()
            .filter(|turn| !on_branch.contains(&turn.pk) && turn.pk != this_turn && turn.agent == *agent)
            .filter_map(|turn| turn.checkpoint)
            .collect();
        Ok((earlier, elsewhere))
    }

    /// The thread's editable state (§7): the keys clients wrote, as an object.
    pub async fn editable_state(&self) -> Result<serde_json::Map<String, Value>, AgentError> {
        let stored = self
            .patiently("the thread could not be read", || self.store().thread_state(self.identity().thread_pk))
            .await?;
        Ok(crate::engine::board::stored_state(stored.as_deref()))
    }

    /// Reads (or records) something for the running turn, waiting out a database that is only
    /// briefly away (a restart, a failover): a turn must not fail because one read met a
    /// dropped connection. Gives up after [`PATIENCE`], or at once on any other error; stops
    /// waiting when the turn must stop.
    pub(crate) async fn patiently<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, AgentError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_transient() && tokio::time::Instant::now() + backoff.peek() < deadline => {
                    tracing::warn!(turn = %self.turn_id(), %error, what, "the database is away; retrying");
                    self.check_cancelled()?;
                    tokio::select! {
                        _ = backoff.wait() => {}
                        _ = self.signalled() => self.check_cancelled()?,
                    }
                }
                Err(source) => return Err(AgentError::Store { what: what.to_string(), source }),
            }
        }
    }

    /// The thread's board as it stands: read once, then kept here as this turn pins notes (its
    /// pins may not be committed yet, and only the thread's one turn pins).
    pub async fn board(&mut self) -> Result<Vec<Value>, AgentError> {
        if let Some(board) = self.known_board() {
            return Ok(board.to_vec());
        }
        let thread = self.identity().thread_pk;
        let notes = self.patiently("the board could not be read", || self.store().notes(thread)).await?;
        let turns = self.patiently("the board could not be read", || self.store().thread_turns(thread)).await?;
        let branch = crate::store::branches::ending_at(&turns, self.identity().turn_pk);
        let notes = crate::engine::board::on_branch(notes, &turns, &branch);
        let board = crate::engine::board::from_stored(&notes);
        self.know_board(board.clone());
        Ok(board)
    }

    /// The thread's tenant and the client's thread id.
    pub async fn thread(&self) -> Result<(String, String), AgentError> {
        match self
            .patiently("the thread could not be read", || self.store().thread_by_pk(self.identity().thread_pk))
            .await?
        {
            Some(thread) => Ok((thread.tenant, thread.thread_id)),
            None => Err(AgentError::Failed("the turn's thread is gone".into())),
        }
    }

    /// The thread's earlier turns as AG-UI messages (the gateway's record, never the client's).
    pub async fn history(&self) -> Result<Vec<crate::protocol::InputMessage>, AgentError> {
        self.patiently("the thread could not be read", || {
            crate::engine::conversation::load_before(self.store(), self.identity().thread_pk, self.turn_id())
        })
        .await
    }
}
