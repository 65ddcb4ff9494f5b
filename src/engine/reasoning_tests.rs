//! Reasoning as content: every `REASONING_*` event reaches a caller who may read content, and
//! none reaches one who may not; the thread's conversation holds none of it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::conversation;
use super::plans::RunPlan;
use super::test_engine::{begin, engine_with, run_to_end};
use super::turn::agent::Agent;
use super::turn::{AgentError, AgentOutput, Checkpoint, TurnContext};

/// Thinks, then answers.
struct Thinker;

#[async_trait]
impl Agent for Thinker {
    async fn run(&self, turn: &mut TurnContext, _checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        let thought = turn.reasoning_open().await?;
        turn.reasoning_delta(&thought.message_id, "a secret plan").await?;
        turn.reasoning_close(&thought).await?;
        // Left open on purpose: the turn's end must close it before RUN_FINISHED.
        let dangling = turn.reasoning_open().await?;
        turn.reasoning_delta(&dangling.message_id, "still thinking").await?;
        let message = turn.text_start().await?;
        turn.text_delta(&message, "the answer").await?;
        turn.text_end(&message).await?;
        Ok(AgentOutput::default())
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

#[tokio::test]
async fn reasoning_reaches_only_callers_who_may_read_content() {
    let setup = engine_with(Arc::new(Thinker), |_| {}).await;
    let plan = begin(&setup.engine, "th-think", "run-1").await;
    let RunPlan::Follow(follow) = &plan else { panic!("refused: {plan:?}") };
    let thread = follow.thread_pk;
    let events = run_to_end(&setup.engine, plan).await;
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|k| k.starts_with("REASONING_")).count(), 10, "{kinds:?}");
    // The open reasoning is closed, message then span, before the run ends.
    let n = kinds.len();
    assert_eq!(kinds[n - 3..], ["REASONING_MESSAGE_END", "REASONING_END", "RUN_FINISHED"], "{kinds:?}");

    // The same run, followed by a caller without `threads:content`.
    let RunPlan::Follow(mut plan) = begin(&setup.engine, "th-think", "run-1").await else { panic!("refused") };
    plan.viewer.clearance.content = false;
    let hidden = run_to_end(&setup.engine, RunPlan::Follow(plan)).await;
    let kinds = types(&hidden);
    assert!(!kinds.iter().any(|k| k.starts_with("REASONING_")), "{kinds:?}");
    assert!(!serde_json::to_string(&hidden).unwrap_or_default().contains("secret plan"));
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"));

    // Not conversation: the thread's messages are the user's and the answer.
    let messages = conversation::load(setup.store.as_ref(), thread, conversation::Activity::Shown)
        .await
        .expect("the conversation");
    let text = serde_json::to_string(&messages).unwrap_or_default();
    assert_eq!(messages.len(), 2, "{text}");
    assert!(!text.contains("secret plan") && !text.contains("reasoning"), "{text}");
}
