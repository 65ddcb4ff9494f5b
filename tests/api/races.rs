//! Races: two requests about one thread fired at once, round after round, on both stores — for
//! pairs among a run, a resume, the decision route, a cancel, a delete, a retention pass and a
//! takeover — and after each round what must hold whichever way they met:
//!
//! - every turn ends once: one terminal event in its log, and only a finished turn has one;
//! - nothing is decided that nobody decided: an interrupt is decided only when a decision was
//!   answered as taken, and a withdrawn one was never decided;
//! - an active thread is never erased: retention leaves a thread a turn started on, or whose
//!   turn was decided, after its pass listed it;
//! - every answer is kept: a `202` cancel ends its turn `cancelled` with nothing left open
//!   (SPEC §4.1), a `204` delete leaves no thread and a delete on a serving instance is never
//!   refused (§10), a decision answered `200` is recorded, a run that streamed `RUN_STARTED`
//!   has its turn — and nothing is answered `500`.
//!
//! Each round sets a thread up (a turn waiting for the approval of a tool call, or an idle thread
//! for a run to continue), fires both at once (the second after a delay that shifts by a
//! millisecond per round, so the rounds cross the windows between them), waits for the thread
//! to settle and checks. Rounds are few per pair and the scripts quick, so the whole suite
//! stays within a minute or two on two cores.

use std::time::Duration;

use agui_gateway::store::{ThreadRow, TurnStatus};
use serde_json::{json, Value};

use crate::helpers::*;

/// Rounds per pair and store.
const ROUNDS: usize = 8;
/// Rounds of the pairs the issue measured lost answers in (a cancel or an erase racing a resume).
const MANY_ROUNDS: usize = 30;
/// How long a round's thread may take to settle (every turn ended or waiting).
const SETTLE: Duration = Duration::from_secs(20);
/// A month and a day, in milliseconds: older than the retention pass's 30 days.
const MONTH_AND_A_DAY_MS: i64 = 31 * 86_400_000;
/// The agent of every round: a tool call that waits for approval, then a question — so a turn
/// a cancel or an erase failed to stop would go on to a second interrupt.
const RACER: &str = r##"
name = "racer"
kind = "script"
steps = [
  { say = "I will email the team." },
  { tool = "send_email", args = { to = "team@example.com" }, result = "sent", approval = "always" },
  { ask = "Sent. Where should I post it too?", choices = ["#general", "#launch"] },
  { say = "Posted to {answer}." },
]
"##;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// A new user message on the thread (the history a client loaded, plus one message).
    Run,
    /// A run answering the open interrupt: approved.
    Resume,
    /// `POST /v1/interrupts/{id}/decision`: approved.
    Decide,
    /// `POST /v1/threads/{thread}/cancel`.
    Cancel,
    /// `DELETE /v1/threads/{thread}`.
    Delete,
    /// A retention pass erasing what it listed just before the round fired.
    Retention,
    /// The thread's running turn given up by its owner (as at a hand-over): the sweeper takes it
    /// over under a new epoch.
    Takeover,
}

/// What an action was answered.
#[derive(Debug, Clone)]
enum Answer {
    /// A run's or a resume's stream (status 200): its events.
    Stream(Vec<SseEvent>),
    /// A route's status and JSON body (null when it has none).
    Status(u16, Value),
    /// A retention pass: how many threads it erased.
    Erased(usize),
    /// A takeover answers nobody.
    Nothing,
}

impl Answer {
    fn status(&self) -> Option<u16> {
        match self {
            Answer::Stream(_) => Some(200),
            Answer::Status(status, _) => Some(*status),
            _ => None,
        }
    }

    /// A stream that decided something: it opens with the decision's outcomes.
    fn decided_in_stream(&self) -> bool {
        matches!(self, Answer::Stream(events) if events.iter().any(|e| e.data["name"] == "gateway.resume"))
    }

    /// The turn a run's stream followed from its start (`RUN_STARTED` and no decision): the
    /// turn's id, from the event ids.
    fn started_turn(&self) -> Option<String> {
        let Answer::Stream(events) = self else { return None };
        let first = events.first().filter(|e| e.kind() == "RUN_STARTED")?;
        if self.decided_in_stream() {
            return None;
        }
        first.id.as_deref().and_then(|id| id.split('.').next()).map(str::to_string)
    }

    fn last_outcome(&self) -> Option<&Value> {
        match self {
            Answer::Stream(events) => events.last().map(|e| &e.data["outcome"]["type"]),
            _ => None,
        }
    }
}

/// A thread set up for a round.
struct Round {
    thread: String,
    /// The conversation as a client loaded it, for a run's history.
    history: Vec<Value>,
    /// The open interrupt of a waiting thread.
    interrupt: Option<String>,
    /// The retention pass's threshold, and what it listed (the thread, made old).
    idle_before: i64,
    listed: Vec<ThreadRow>,
    /// The thread's turn as set up: an erased thread's id is free, and a run after the erase
    /// starts a new thread under it, without this turn.
    setup_turn: String,
}

/// A thread for a round: with a turn waiting for an approval (`racer`), or idle after a
/// finished turn when one of the pair is a run (which then starts the next turn, one that
/// waits for approval too). With a retention pass in the pair the thread's activity is made a
/// month old and the pass lists it now.
async fn set_up(app: &TestApp, db: &TestDatabase, thread: &str, pair: (Action, Action)) -> Round {
    let has = |action| pair.0 == action || pair.1 == action;
    let deciding = has(Action::Resume) || has(Action::Decide);
    let interrupt = if has(Action::Run) && !deciding {
        let events = app.run_to_end("demo", &first_run(thread, "run-1", "hello")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success");
        None
    } else if has(Action::Takeover) && !deciding && !has(Action::Retention) {
        // A turn that runs (a long pause in its script), for a takeover to move.
        let stream = open_until_waiting(app, "waiter", &first_run(thread, "run-1", "wait")).await;
        drop(stream);
        None
    } else {
        let events = app.run_to_end("racer", &first_run(thread, "run-1", "the launch")).await;
        let end = &events.last().expect("end").data;
        assert_eq!(end["outcome"]["type"], "interrupt", "{end}");
        Some(end["outcome"]["interrupts"][0]["id"].as_str().expect("interrupt id").to_string())
    };
    let body = app.get_json(&format!("/v1/threads/{thread}/messages?tenant=default")).await;
    let history = body["messages"].as_array().expect("messages").clone();
    let idle_before = agui_gateway::clock::Clock::now_ms(&agui_gateway::clock::SystemClock) - 30 * 86_400_000;
    let mut listed = Vec::new();
    if has(Action::Retention) {
        execute_sql(
            &db.url,
            &format!(
                "UPDATE threads SET updated_at_ms = updated_at_ms - {MONTH_AND_A_DAY_MS} WHERE thread_id = '{thread}'"
            ),
        )
        .await;
        listed = app.store.idle_threads(idle_before, 1000).await.expect("the pass's listing");
        listed.retain(|t| t.thread_id == thread);
        assert_eq!(listed.len(), 1, "the pass lists the thread");
    }
    let row = app.store.find_thread("default", thread).await.expect("find").expect("the thread");
    let setup_turn = app.store.thread_turns(row.pk).await.expect("turns").remove(0).public_id;
    Round { thread: thread.to_string(), history, interrupt, idle_before, listed, setup_turn }
}

/// Posts a run and reads its stream to the end (or its refusal's status and body).
async fn stream_or_status(app: &TestApp, agent: &str, input: &Value) -> Answer {
    let response = app.post_run(agent, input).await;
    let status = response.status().as_u16();
    if status != 200 {
        return Answer::Status(status, response.json().await.unwrap_or(Value::Null));
    }
    match tokio::time::timeout(PATIENCE, read_events(response, None)).await {
        Ok(events) => Answer::Stream(events),
        Err(_) => panic!("a stream of {agent} did not end within {PATIENCE:?}"),
    }
}

async fn status_of(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    Answer::Status(status, response.json().await.unwrap_or(Value::Null))
}

async fn act(app: &TestApp, db: &TestDatabase, round: &Round, action: Action, nth: usize) -> Answer {
    let thread = round.thread.as_str();
    let approve = json!({"approved": true});
    match action {
        Action::Run => {
            let mut history = round.history.clone();
            history.push(json!({"id": format!("next-{nth}"), "role": "user", "content": "and then?"}));
            let input = json!({"threadId": thread, "runId": format!("run-next-{nth}"), "protocolVersion": "1.0",
                "messages": history});
            stream_or_status(app, "racer", &input).await
        }
        Action::Resume => {
            let interrupt = round.interrupt.as_deref().expect("a waiting thread");
            let input = json!({"threadId": thread, "runId": format!("run-resume-{nth}"), "protocolVersion": "1.0",
                "messages": [], "resume": [{"interruptId": interrupt, "status": "resolved", "payload": approve}]});
            stream_or_status(app, "racer", &input).await
        }
        Action::Decide => {
            let interrupt = round.interrupt.as_deref().expect("a waiting thread");
            let url = app.url(&format!("/v1/interrupts/{interrupt}/decision"));
            status_of(app.client.post(url).json(&json!({"status": "resolved", "payload": approve}))).await
        }
        Action::Cancel => status_of(app.client.post(app.url(&format!("/v1/threads/{thread}/cancel")))).await,
        Action::Delete => status_of(app.client.delete(app.url(&format!("/v1/threads/{thread}")))).await,
        Action::Retention => {
            Answer::Erased(app.engine.erase_idle_threads(&round.listed, round.idle_before).await.expect("the pass"))
        }
        Action::Takeover => {
            execute_sql(
                &db.url,
                &format!(
                    "UPDATE turns SET owner_instance = NULL, lease_until_ms = 0 WHERE status = 'running' \
                     AND thread IN (SELECT id FROM threads WHERE thread_id = '{thread}')"
                ),
            )
            .await;
            Answer::Nothing
        }
    }
}

/// A turn as the round left it: its row, its interrupts and its terminal events.
struct Settled {
    status: TurnStatus,
    public_id: String,
    interrupts: Vec<agui_gateway::store::InterruptRow>,
    terminals: usize,
    /// `TOOL_CALL_RESULT`s in its log: a call runs once, whoever runs the turn.
    tool_results: usize,
}

/// Waits until no turn of the thread runs (or the thread is gone), then reads each turn.
async fn settle(app: &TestApp, thread: &str) -> Option<Vec<Settled>> {
    let store = &app.store;
    let row = wait_for(SETTLE, "the thread's turns to end or wait", || async {
        match store.find_thread("default", thread).await.expect("find") {
            None => Some(None),
            Some(row) => {
                let turns = store.thread_turns(row.pk).await.expect("turns");
                turns.iter().all(|t| t.status != TurnStatus::Running).then_some(Some(row))
            }
        }
    })
    .await?;
    let mut settled = Vec::new();
    for turn in store.thread_turns(row.pk).await.expect("turns") {
        let events = store.events_after(turn.pk, 0, 100_000).await.expect("log");
        let terminals = events.iter().filter(|e| e.kind.is_terminal()).count();
        let tool_results = events
            .iter()
            .filter(|e| std::str::from_utf8(&e.body).is_ok_and(|body| body.contains("\"TOOL_CALL_RESULT\"")))
            .count();
        let interrupts = store.turn_interrupts(turn.pk).await.expect("interrupts");
        settled.push(Settled { status: turn.status, public_id: turn.public_id, interrupts, terminals, tool_results });
    }
    Some(settled)
}

/// What a round's answers and its settled thread must agree on (see the module's list).
fn check(
    set: &Round,
    pair: (Action, Action),
    answers: &[(Action, Answer)],
    settled: &Option<Vec<Settled>>,
    round: usize,
) {
    let context = format!("{pair:?} round {round}: {answers:?}");
    for (action, answer) in answers {
        if let Some(status) = answer.status() {
            assert!(status < 500, "{action:?} answered {status}: {context}");
        }
    }
    let answer_of = |wanted: Action| answers.iter().find(|(a, _)| *a == wanted).map(|(_, answer)| answer);
    let decided_by_answer = answers.iter().any(|(action, answer)| match action {
        Action::Resume => answer.decided_in_stream(),
        Action::Decide => answer.status() == Some(200),
        _ => false,
    });
    let mut started: Vec<String> = answers.iter().filter_map(|(_, answer)| answer.started_turn()).collect();
    started.dedup();
    let erased_by_retention = matches!(answer_of(Action::Retention), Some(Answer::Erased(1)));
    // The thread as set up is still there (not erased, or erased and begun anew by a run).
    let set_up_alive =
        settled.as_ref().is_some_and(|turns| turns.first().is_some_and(|t| t.public_id == set.setup_turn));
    let present = |id: &str| settled.as_ref().is_some_and(|turns| turns.iter().any(|t| t.public_id == id));

    if let Some(Answer::Status(status, _)) = answer_of(Action::Delete) {
        // A serving instance ends the cancelled turn well within the erase's wait: never 409.
        // Another erase (retention) may have taken the thread first: then it is unknown (403).
        assert!(*status == 204 || (*status == 403 && erased_by_retention), "delete answered {status}: {context}");
        assert!(!set_up_alive, "a 204 delete leaves no thread: {context}");
    }
    if erased_by_retention {
        assert!(!set_up_alive, "retention said it erased the thread: {context}");
        for turn in &started {
            assert!(present(turn), "retention erased turn {turn}, started after its listing: {context}");
        }
        assert!(!decided_by_answer, "retention erased a thread whose turn was decided after its listing: {context}");
    }
    let Some(turns) = settled else { return };
    for turn in turns {
        // One end per turn: a finished turn has exactly one terminal event, an unfinished none.
        let expected = usize::from(turn.status.is_finished());
        assert_eq!(turn.terminals, expected, "turn {} is {:?}: {context}", turn.public_id, turn.status);
        assert!(turn.tool_results <= 1, "a call ran twice in turn {}: {context}", turn.public_id);
        for interrupt in &turn.interrupts {
            let status = interrupt.status.as_str();
            assert!(
                status != "decided" || decided_by_answer,
                "interrupt {} decided though no decision was answered as taken: {context}",
                interrupt.id
            );
            assert!(
                !(status == "withdrawn" && interrupt.decided_by.is_some()),
                "a withdrawn interrupt carries a decision: {context}"
            );
            if turn.status.is_finished() {
                assert_ne!(status, "open", "a finished turn left interrupt {} open: {context}", interrupt.id);
            }
        }
    }
    if let Some(Answer::Status(202, body)) = answer_of(Action::Cancel) {
        let named = body["turn"].as_str().expect("the cancelled turn");
        let turn = turns.iter().find(|t| t.public_id == named).expect("the cancelled turn is the thread's");
        assert_eq!(turn.status, TurnStatus::Cancelled, "a 202 cancel ends its turn cancelled: {context}");
        // Answered while the turn ran: nothing it reached afterwards waits for anyone.
        assert!(turn.interrupts.iter().all(|i| i.status.as_str() != "open"), "{context}");
        for (action, answer) in answers {
            if matches!(action, Action::Run | Action::Resume) && answer.last_outcome() == Some(&json!("interrupt")) {
                // A stream of the cancelled turn that ended waiting for a decision ended before
                // the cancel, which then met the turn waiting (§4.1: a wait is cancelled too):
                // what it showed was withdrawn, never left for anyone to decide.
                let Answer::Stream(events) = answer else { continue };
                if !events.iter().any(|e| e.id.as_deref().is_some_and(|id| id.starts_with(named))) {
                    continue;
                }
                let shown = events.last().map(|e| e.data["outcome"]["interrupts"].clone()).unwrap_or_default();
                for id in shown.as_array().into_iter().flatten().filter_map(|i| i["id"].as_str()) {
                    let stored = turn.interrupts.iter().find(|i| i.id == id);
                    assert!(
                        stored.is_some_and(|i| i.status.as_str() == "withdrawn"),
                        "{action:?}'s stream of the cancelled turn ended at interrupt {id}, which the cancel did not withdraw: {context}"
                    );
                }
            }
        }
    }
    if let Some(Answer::Status(200, _)) = answer_of(Action::Decide) {
        let interrupt = turns.iter().flat_map(|t| &t.interrupts).find(|i| i.decided_by.is_some());
        assert!(interrupt.is_some(), "a decision answered 200 is recorded: {context}");
    }
    // Two runs at once start one turn at most; the thread holds its set-up turn (unless it was
    // erased and begun anew) and every turn started since.
    assert!(started.len() <= 1, "two turns started on one thread at once: {context}");
    let expected = usize::from(set_up_alive) + started.iter().filter(|t| present(t)).count();
    assert_eq!(turns.len(), expected, "a turn nobody started, or one lost: {context}");
}

/// Fires `pair` at once for `rounds` rounds on `backend`, checking every round.
async fn race(backend: Backend, pair: (Action, Action), rounds: usize) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.agents.push(toml::from_str(RACER).expect("the racer agent"));
    let app = TestApp::start_with(config).await;
    for round in 0..rounds {
        let thread = format!("th-race-{round}");
        let set = set_up(&app, &db, &thread, pair).await;
        // The second of the pair leaves after 0–7 ms: the rounds cross the windows between them.
        let delay = Duration::from_millis((round % 8) as u64);
        let first = act(&app, &db, &set, pair.0, 2 * round);
        let second = async {
            tokio::time::sleep(delay).await;
            act(&app, &db, &set, pair.1, 2 * round + 1).await
        };
        let (a, b) = tokio::join!(first, second);
        let answers = [(pair.0, a), (pair.1, b)];
        let settled = settle(&app, &thread).await;
        check(&set, pair, &answers, &settled, round);
    }
}

/// One test per pair and store: `races!(name, first, second, rounds)`.
macro_rules! races {
    ($name:ident, $first:ident, $second:ident, $rounds:expr) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                race(Backend::Sqlite, (Action::$first, Action::$second), $rounds).await
            }

            #[tokio::test]
            async fn postgres() {
                race(Backend::Postgres, (Action::$first, Action::$second), $rounds).await
            }
        }
    };
}

// The pairs the lost answers were measured in.
races!(a_cancel_racing_a_resume_is_kept_or_refused, Resume, Cancel, MANY_ROUNDS);
races!(a_delete_racing_a_resume_erases_the_thread, Resume, Delete, MANY_ROUNDS);

// Every other pair.
races!(two_runs_at_once_start_one_turn, Run, Run, ROUNDS);
races!(a_run_racing_a_resume, Run, Resume, ROUNDS);
races!(a_run_racing_a_decision, Run, Decide, ROUNDS);
races!(a_cancel_racing_a_turns_start_is_kept_or_refused, Run, Cancel, ROUNDS);
races!(a_delete_racing_a_turns_start_erases_the_thread, Run, Delete, ROUNDS);
races!(retention_racing_a_turns_start_never_erases_it, Run, Retention, ROUNDS);
races!(a_takeover_racing_a_turns_start, Run, Takeover, ROUNDS);
races!(a_resume_racing_a_decision_decides_once, Resume, Decide, ROUNDS);
races!(retention_racing_a_resume_never_erases_a_decided_turn, Resume, Retention, ROUNDS);
races!(a_takeover_racing_a_resume, Resume, Takeover, ROUNDS);
races!(a_cancel_racing_a_decision_is_kept_or_refused, Decide, Cancel, ROUNDS);
races!(a_delete_racing_a_decision_erases_the_thread, Decide, Delete, ROUNDS);
races!(retention_racing_a_decision_never_erases_a_decided_turn, Decide, Retention, ROUNDS);
races!(a_takeover_racing_a_decision, Decide, Takeover, ROUNDS);
races!(a_cancel_racing_a_delete, Cancel, Delete, ROUNDS);
races!(a_cancel_racing_retention, Cancel, Retention, ROUNDS);
races!(a_cancel_racing_a_takeover_is_kept, Cancel, Takeover, ROUNDS);
races!(a_delete_racing_retention_erases_once, Delete, Retention, ROUNDS);
races!(a_delete_racing_a_takeover_erases_the_thread, Delete, Takeover, ROUNDS);
races!(retention_racing_a_takeover, Retention, Takeover, ROUNDS);
