//! A thread's conversation as its branches show it (§6): the messages of a branch with the
//! alternatives of each user message ([`BranchView`]), the thread's tree of turns
//! ([`TreeTurn`]), and the `CUSTOM gateway.branches` event a restated conversation is followed
//! by (`branches_event`, which the streams use).

use super::conversation;
use super::errors::EngineError;
use super::shape::Engine;
use crate::store::{branches, ThreadRow, TurnRow};

impl Engine {
    /// The thread's conversation as AG-UI messages (see [`conversation`]), without activity.
    pub async fn messages(&self, thread: &ThreadRow) -> Result<Vec<crate::protocol::InputMessage>, EngineError> {
        Ok(conversation::load(self.inner.store.as_ref(), thread.pk, conversation::Activity::Left).await?)
    }

    /// A branch of the thread (§6): the current one, or the one ending at the turn `head` (its
    /// public id; one not of this thread: [`EngineError::NotFound`]), with the alternatives of
    /// each of its user messages; with the activity its turns showed when `activity` says so.
    pub async fn branch_view(
        &self,
        thread: &ThreadRow,
        head: Option<&str>,
        activity: conversation::Activity,
    ) -> Result<BranchView, EngineError> {
        let store = self.inner.store.as_ref();
        let turns = store.thread_turns(thread.pk).await?;
        let branch = match head {
            None => branches::current(&turns),
            Some(head) => {
                let turn = turns
                    .iter()
                    .find(|t| t.public_id == head)
                    .ok_or_else(|| EngineError::NotFound(format!("turn '{head}' not found in this thread")))?;
                branches::ending_at(&turns, turn.pk)
            }
        };
        let messages = match branch.last() {
            Some(last) => conversation::load_branch(store, thread.pk, last.pk, activity).await?,
            None => Vec::new(),
        };
        let alternatives = alternatives_of(&turns, &branch, &messages);
        Ok(BranchView {
            head: branch.last().map(|t| t.public_id.clone()),
            current: branch.last().map(|t| t.pk) == branches::newest(&turns).map(|t| t.pk),
            messages,
            alternatives,
        })
    }

    /// The thread's turns with their parents, oldest first (§6), each saying whether it is on
    /// the current branch.
    pub async fn turn_tree(&self, thread: &ThreadRow) -> Result<Vec<TreeTurn>, EngineError> {
        let turns = self.inner.store.thread_turns(thread.pk).await?;
        let current = branches::current(&turns);
        let public = |pk: i64| turns.iter().find(|t| t.pk == pk).map(|t| t.public_id.clone());
        Ok(turns
            .iter()
            .map(|turn| TreeTurn {
                id: turn.public_id.clone(),
                parent: turn.parent.and_then(public),
                agent: turn.agent.clone(),
                status: turn.status.as_str(),
                created_at_ms: turn.created_at_ms,
                on_current_branch: current.iter().any(|c| c.pk == turn.pk),
            })
            .collect())
    }
}

/// The alternatives of each user message of `branch` (whose conversation is `messages`).
fn alternatives_of(
    turns: &[TurnRow],
    branch: &[TurnRow],
    messages: &[crate::protocol::InputMessage],
) -> Vec<Alternatives> {
    // Each turn of the branch opens with its user message, in order.
    let user_ids = messages.iter().filter(|m| matches!(m, crate::protocol::InputMessage::User(_))).map(|m| m.id());
    branch
        .iter()
        .zip(user_ids)
        .map(|(turn, message_id)| {
            let (place, siblings) = branches::alternatives(turns, turn);
            Alternatives {
                message_id: message_id.to_string(),
                turn: turn.public_id.clone(),
                index: place + 1,
                count: siblings.len(),
                turns: siblings
                    .iter()
                    .map(|sibling| {
                        let head = branches::latest_through(turns, sibling);
                        let head = turns.iter().find(|t| t.pk == head).map_or(&sibling.public_id, |t| &t.public_id);
                        AlternativeTurn { turn: sibling.public_id.clone(), head: head.clone() }
                    })
                    .collect(),
            }
        })
        .collect()
}

/// The name of the `CUSTOM` event that follows a `MESSAGES_SNAPSHOT` of a branch whose user
/// messages have alternatives (§6): `{"turn", "alternatives"}`, as `GET …/messages` gives them.
pub const BRANCHES_EVENT: &str = "gateway.branches";

/// The `CUSTOM gateway.branches` event for a snapshot of the branch ending at turn `head` of the
/// thread whose turns are `turns` (`messages` being that snapshot's); `None` when none of its
/// user messages has an alternative.
pub(crate) fn branches_event(
    turns: &[TurnRow],
    head: i64,
    messages: &[crate::protocol::InputMessage],
) -> Option<crate::protocol::Event> {
    let branch = branches::ending_at(turns, head);
    let alternatives = alternatives_of(turns, &branch, messages);
    if alternatives.iter().all(|a| a.count < 2) {
        return None;
    }
    let value = serde_json::json!({
        "turn": branch.last().map(|t| t.public_id.clone()),
        "alternatives": alternatives,
    });
    Some(crate::protocol::Event::Custom { name: BRANCHES_EVENT.into(), value, subagent_run_id: None })
}

/// A branch of a thread as `GET /v1/threads/{thread}/messages` shows it (§6).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchView {
    /// The branch's last turn; `None` for a thread with no turn.
    pub head: Option<String>,
    /// Whether this is the thread's current branch (the one a run without a choice goes on).
    pub current: bool,
    pub messages: Vec<crate::protocol::InputMessage>,
    /// One entry per user message of the branch, in order.
    pub alternatives: Vec<Alternatives>,
}

/// The alternatives of one user message: the turns that share its parent (regenerates and
/// edits), so a client can show "‹ index / count ›" and open any of them.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alternatives {
    pub message_id: String,
    /// The branch's turn this message started.
    pub turn: String,
    /// Its place among the alternatives, from 1.
    pub index: usize,
    pub count: usize,
    /// Every alternative, oldest first: its turn, and the head to open (`?turn=`) to see it as
    /// it was last continued.
    pub turns: Vec<AlternativeTurn>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct AlternativeTurn {
    pub turn: String,
    pub head: String,
}

/// One turn of a thread's tree (`GET /v1/threads/{thread}/turns`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreeTurn {
    pub id: String,
    /// The turn it went on from; `None` for a first turn.
    pub parent: Option<String>,
    pub agent: String,
    pub status: &'static str,
    pub created_at_ms: i64,
    pub on_current_branch: bool,
}
