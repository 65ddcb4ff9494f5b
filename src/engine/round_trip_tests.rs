//! The store round trips of the three walks of `docs/architecture.md` ("Three walks"), counted:
//! a new turn on a thread with an earlier turn, a `Last-Event-ID` reconnect, and a resume with a
//! decision. Each walk is the engine's part of a run request — [`Engine::begin_run`], then its
//! stream up to the first event it yields — run inside [`counted`], which counts the connections
//! that work took from the store's pools on its own task: one per store call that reached the
//! database (a transaction is one). What the turn's runner and the log writers do meanwhile runs
//! on tasks of their own and is not counted here (the walks list it apart).
//!
//! Each count is asserted exactly: a change that adds a round trip to a walk fails here, and one
//! that saves one says so (and updates the walk in the docs). Both stores, as every store test.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::plans::RunPlan;
use super::shape::Engine;
use super::stream::tail::StreamItem;
use super::test_engine::{engine_on, plan_run, question, GUARD};
use super::turn::agent::Agent;
use super::turn::{AgentError, AgentOutput, Checkpoint, NotePin, TurnContext};
use crate::ids::EventId;
use crate::protocol::RunAgentInput;
use crate::store::round_trips::counted;

/// On an empty board, pins a note and answers; on a board with a note, asks a question and
/// answers once it is decided. So a thread's first turn leaves notes' text to read, and its
/// second waits for a decision.
struct Walker;

#[async_trait]
impl Agent for Walker {
    async fn run(&self, turn: &mut TurnContext, checkpoint: Checkpoint) -> Result<AgentOutput, AgentError> {
        if !checkpoint.awaiting.is_empty() {
            return Ok(AgentOutput { result: None, usage: None });
        }
        if turn.board().await?.is_empty() {
            let pin = NotePin { kind: "fact", tags: &[], text: "the launch is on Friday", labels: &[], replaces: None };
            turn.pin_note(pin).await?;
            return Ok(AgentOutput { result: None, usage: None });
        }
        let spec = question("which day?", Duration::from_secs(60));
        Err(turn.wait_for(vec![spec], Checkpoint { step: 1, ..Checkpoint::default() }).await)
    }
}

/// What each walk counted.
#[derive(Debug, PartialEq, Eq)]
struct Walks {
    new_turn: usize,
    reconnect: usize,
    resume: usize,
}

/// Walks a thread through the three requests on the store at `url` and counts each.
async fn walk(url: &str) -> Walks {
    let (engine, _store) = engine_on(url, 4, Arc::new(Walker), crate::clock::system(), |_| {}).await;
    let thread = "th-walks";
    const SAID: &[&str] = &["remember the launch", "which day?"];

    // The thread's first turn pins a note: the thread now has an earlier turn and a board.
    let first = run(&engine, thread, "run-1", &["remember the launch"], None, None).await;
    read_to_end(&engine, first).await;

    // A new turn: its request, and its stream up to the first event.
    let ((mut stream, first), new_turn) = counted(async {
        let plan = run(&engine, thread, "run-2", SAID, None, None).await;
        let mut stream = Box::pin(engine.stream(follow_plan(plan)));
        let first = next(&mut stream).await;
        (stream, first)
    })
    .await;
    // The rest of the run is read outside the count.
    let mut items = vec![first];
    items.extend(rest(&mut stream).await);
    let outcome = event_of(items.last().expect("the run ended"));
    assert_eq!(outcome["outcome"]["type"], "interrupt", "the second turn waits: {outcome}");
    let interrupt = outcome["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt id").to_string();

    // The reconnect is counted on a waiting turn: its runner here has let the turn go (its feed
    // no longer stands for the log, so the stream reads the table), as a page that reloads later
    // finds it. Counted while the runner still winds down, it would read one table less.
    tokio::time::timeout(GUARD, async {
        while !engine.inner.running.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the waiting turn's runner lets it go");

    // A reconnect of that run after its next-to-last event: the same request again.
    let before_last = EventId::parse(&items[items.len() - 2].id).expect("an event id");
    let (_, reconnect) = counted(async {
        let plan = run(&engine, thread, "run-2", SAID, Some(&before_last), None).await;
        let mut stream = Box::pin(engine.stream(follow_plan(plan)));
        let first = next(&mut stream).await;
        assert_eq!(event_of(&first)["outcome"]["type"], "interrupt", "the reconnect goes on after the id");
    })
    .await;

    // A resume with a decision, on a run of its own.
    let answer = json!([{ "interruptId": interrupt, "status": "resolved", "payload": { "answer": "Friday" } }]);
    let ((), resume) = counted(async {
        let plan = run(&engine, thread, "run-3", &[], None, Some(answer)).await;
        let mut stream = Box::pin(engine.stream(follow_plan(plan)));
        let first = next(&mut stream).await;
        assert_eq!(event_of(&first)["type"], "RUN_STARTED", "the resume run opens");
    })
    .await;
    Walks { new_turn, reconnect, resume }
}

/// Plans a run of `demo` on `thread` as the local person, sending the user messages `said`: a
/// new message, a reconnect, or a resume.
async fn run(
    engine: &Engine,
    thread: &str,
    run: &str,
    said: &[&str],
    last_event_id: Option<&EventId>,
    resume: Option<Value>,
) -> RunPlan {
    // The user's messages, `u1`, `u2`, …: the history so far and the new one.
    let messages: Vec<Value> = said
        .iter()
        .enumerate()
        .map(|(n, text)| json!({ "id": format!("u{}", n + 1), "role": "user", "content": text }))
        .collect();
    let mut input = json!({ "threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": messages });
    if let Some(resume) = resume {
        input["resume"] = resume;
    }
    let input: RunAgentInput = serde_json::from_value(input).expect("a valid input");
    plan_run(engine, &input, last_event_id).await
}

fn follow_plan(plan: RunPlan) -> super::FollowPlan {
    match plan {
        RunPlan::Follow(plan) => plan,
        RunPlan::Refused(refusal) => panic!("the run was refused: {refusal:?}"),
    }
}

async fn next(stream: &mut (impl futures_util::Stream<Item = StreamItem> + Unpin)) -> StreamItem {
    tokio::time::timeout(GUARD, stream.next()).await.expect("an event within the guard").expect("an event")
}

/// The stream's items up to the one that ends the run.
async fn rest(stream: &mut (impl futures_util::Stream<Item = StreamItem> + Unpin)) -> Vec<StreamItem> {
    let mut items = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(GUARD, stream.next()).await {
        items.push(item);
    }
    items
}

async fn read_to_end(engine: &Engine, plan: RunPlan) {
    let mut stream = Box::pin(engine.stream(follow_plan(plan)));
    let items = rest(&mut stream).await;
    let last = event_of(items.last().expect("events"));
    assert_eq!(last["type"], "RUN_FINISHED", "the first turn ends: {last}");
}

fn event_of(item: &StreamItem) -> Value {
    serde_json::from_slice(&item.json).expect("events are JSON")
}

#[tokio::test]
async fn the_three_walks_make_their_counted_round_trips_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("gateway.db").display());
    let walks = walk(&url).await;
    // A new turn: find_thread, find_run, thread_turns, tenant_usage, notes, start_turn, and the
    // earlier turn's log for the conversation its RUN_STARTED restates.
    // A reconnect: find_thread, find_run, the events at the id, notes, append_audit (board.read),
    // and the log after the id.
    // A resume: find_thread, find_run, thread_turns, turn_interrupts, notes, decide_interrupts
    // (with the run and its board.read row), and the two turns' logs its RUN_STARTED restates.
    assert_eq!(walks, Walks { new_turn: 7, reconnect: 6, resume: 8 });
}

#[tokio::test]
async fn the_three_walks_make_their_counted_round_trips_on_postgres() {
    let database = PgDatabase::new().await;
    let walks = walk(&database.url).await;
    // As on SQLite, and a new turn announces its start to the other instances (`pg_notify`).
    assert_eq!(walks, Walks { new_turn: 8, reconnect: 6, resume: 8 });
}

/// A database of its own on the tests' PostgreSQL server (`DATABASE_URL`'s, else the one on
/// 127.0.0.1:5432), as the api suite makes one per test.
struct PgDatabase {
    url: String,
    server: String,
    name: String,
}

impl PgDatabase {
    async fn new() -> PgDatabase {
        use sqlx::Connection;
        let server = match std::env::var("DATABASE_URL").ok().filter(|u| u.starts_with("postgres")) {
            Some(url) => url.rsplit_once('/').map_or(url.clone(), |(server, _)| server.to_string()),
            None => "postgres://postgres@127.0.0.1:5432".to_string(),
        };
        let name = format!("agui_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres"))
            .await
            .unwrap_or_else(|e| panic!("no PostgreSQL server at {server}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("a test database");
        PgDatabase { url: format!("{server}/{name}"), server, name }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // The test's runtime is going away: the database is dropped from a runtime of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                use sqlx::Connection;
                let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres")).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await.ok()
            })
        })
        .join();
    }
}
