//! What the engine's own tests share: a real engine on a real store with one agent of the
//! test's, a run planned as the local person, its events read to the end, and a question to ask.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::interrupts::Deciders;
use super::turn::agent::{Agent, AgentRegistry};
use super::turn::{new_interrupt_id, InterruptSpec};
use super::{Engine, RunPlan, RunRequest};
use crate::caller::Caller;
use crate::clock::{Clock, TestClock};
use crate::config::Config;
use crate::ids::{EventId, RunId, TenantId, ThreadId};
use crate::protocol::RunAgentInput;
use crate::store::{self, Store};

/// A guard against a hung test, never a wait for time to pass.
pub(super) const GUARD: Duration = Duration::from_secs(20);

/// An engine on the store at `url` (migrated, `connections` wide) whose `demo` agent is
/// `agent`, reading `clock`. The background sweep is left far apart, so each test sweeps when
/// it means to.
pub(super) async fn engine_on(
    url: &str,
    connections: u32,
    agent: Arc<dyn Agent>,
    clock: Arc<dyn Clock>,
    configure: impl FnOnce(&mut Config),
) -> (Engine, Arc<dyn Store>) {
    let store = store::connect(url, connections).await.expect("the store opens");
    store.migrate().await.expect("migrations apply");
    let mut config = Config::builtin().expect("the built-in configuration");
    config.turns.sweep_ms = 3_600_000;
    configure(&mut config);
    let agents: AgentRegistry = std::iter::once(("demo".to_string(), agent)).collect();
    let engine = Engine::start_with_clock(Arc::new(config), store.clone(), Arc::new(agents), clock)
        .await
        .expect("the engine starts");
    (engine, store)
}

pub(super) struct Setup {
    pub(super) engine: Engine,
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<TestClock>,
    pub(super) _dir: tempfile::TempDir,
}

/// An engine on a fresh SQLite file whose `demo` agent is `agent`, on a [`TestClock`] at
/// 2023-11-14T22:13:20Z, a few seconds into its minute (no quota window starts at once).
pub(super) async fn engine_with(agent: Arc<dyn Agent>, configure: impl FnOnce(&mut Config)) -> Setup {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("gateway.db").display());
    let clock = TestClock::at(1_700_000_000_000);
    let (engine, store) = engine_on(&url, 2, agent, clock.clone(), configure).await;
    Setup { engine, store, clock, _dir: dir }
}

/// Plans a run of `demo` on `thread` as the local person with `input` (its thread and run ids
/// are the ones given), continuing after `last_event_id` when given.
pub(super) async fn plan_run(engine: &Engine, input: &RunAgentInput, last_event_id: Option<&EventId>) -> RunPlan {
    let caller = Caller::local();
    let tenant = TenantId::parse("default").expect("a tenant");
    let thread_id = ThreadId::parse(&input.thread_id).expect("a thread id");
    let run_id = RunId::parse(&input.run_id).expect("a run id");
    let request = RunRequest {
        tenant: &tenant,
        caller: &caller,
        agent: "demo",
        thread_id: &thread_id,
        run_id: &run_id,
        input,
        last_event_id,
        state_writes: Default::default(),
    };
    engine.begin_run(request).await.expect("the run is planned")
}

/// Starts a run of `demo` on `thread` as the local person, saying "hello".
pub(super) async fn begin(engine: &Engine, thread: &str, run: &str) -> RunPlan {
    let input = serde_json::from_value(json!({
        "threadId": thread,
        "runId": run,
        "protocolVersion": "1.0",
        "messages": [{ "id": format!("u-{run}"), "role": "user", "content": "hello" }],
    }))
    .expect("a valid input");
    plan_run(engine, &input, None).await
}

/// The run's events up to its terminal one.
pub(super) async fn run_to_end(engine: &Engine, plan: RunPlan) -> Vec<Value> {
    let RunPlan::Follow(plan) = plan else { panic!("the run was refused: {plan:?}") };
    let mut stream = Box::pin(engine.stream(plan));
    let mut events = Vec::new();
    let collected = tokio::time::timeout(GUARD, async {
        while let Some(item) = stream.next().await {
            let event: Value = serde_json::from_slice(&item.json).expect("events are JSON");
            let last = matches!(event["type"].as_str(), Some("RUN_FINISHED" | "RUN_ERROR"));
            events.push(event);
            if last {
                break;
            }
        }
    })
    .await;
    assert!(collected.is_ok(), "the run did not end within {GUARD:?}: {events:?}");
    events
}

/// A question anyone may answer with any object, open for `ttl`.
pub(super) fn question(message: &str, ttl: Duration) -> InterruptSpec {
    InterruptSpec {
        id: new_interrupt_id(),
        reason: "input_required".into(),
        message: message.into(),
        tool_call_id: None,
        response_schema: json!({ "type": "object" }),
        ttl_ms: ttl.as_millis() as i64,
        deciders: Deciders::default(),
        four_eyes: false,
        details: None,
        asks_because: None,
        choices: Vec::new(),
        refusal: None,
    }
}
