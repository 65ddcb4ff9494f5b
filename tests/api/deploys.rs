//! A deploy is invisible (SPEC §4.6): an answer cut by a crash is given again whole and the
//! thread holds it once, never the fragment — in the messages route, in what the next model
//! call is given, and in the view of a client that followed the takeover live.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fakes::model::{openai_toml, slow_text, slowly, ScriptedModel};
use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;
use crate::on_both_stores;

/// The messages the official client held at the end of an [`agui_check`] (its `messages` line):
/// each one's role and words.
pub(crate) fn client_messages(report: &str) -> Vec<Value> {
    let line = report.lines().find_map(|line| line.trim_start().strip_prefix("messages ")).expect("a messages line");
    serde_json::from_str(line).expect("the messages as JSON")
}

/// The assistant messages' words in `messages` (a conversation or the client's view).
fn answers(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .filter(|c| !c.is_empty())
        .collect()
}

/// A slow answer cut by SIGKILL on A is given again whole by B: the thread, the next model call
/// and the live client's view each hold it once; the log keeps the fragment.
// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn a_crash_mid_answer_leaves_the_whole_answer_once_never_the_fragment() {
    const WORDS: usize = 40;
    let model = ScriptedModel::start(|_, _| slowly(WORDS, Duration::from_millis(50))).await;
    let agents = format!("[[agents]]\n{}", openai_toml("chat", &model.url, ""));
    let mut two = TwoInstances::start("chat", &agents).await;
    let input = first_run("th-frag", "run-1", "tell me a story");
    let mut on_a = two.open_on_a(&input).await;
    on_a.until("five words on A", |e| e.data["delta"] == "w5 ").await;
    two.kill_a();
    let head = on_a.rest().await;
    let joined = two.follow_on_b(&input, head).await;
    let kinds = kinds(&joined);
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{kinds:?}");
    assert_eq!(model.calls(), 2, "the model was asked again on B");
    // The live view: the cut message closed, then the conversation without it, then the answer.
    let snapshot = joined.iter().position(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot after the cut");
    let starts: Vec<usize> =
        joined.iter().enumerate().filter(|(_, e)| e.kind() == "TEXT_MESSAGE_START").map(|(i, _)| i).collect();
    assert_eq!(starts.len(), 2, "the fragment and the whole answer: {kinds:?}");
    assert!(starts[0] < snapshot && snapshot < starts[1], "{kinds:?}");
    assert_eq!(answers(joined[snapshot].data["messages"].as_array().expect("messages")), Vec::<String>::new());
    // The thread holds the whole answer once.
    let url = format!("http://{}/v1/threads/th-frag/messages", two.b.address);
    let messages: Value = reqwest::get(url).await.expect("get").json().await.expect("JSON");
    let whole = slow_text(WORDS);
    assert_eq!(answers(messages["messages"].as_array().expect("messages")), vec![whole.clone()]);
    // The official client, following the run from its start on B, ends holding it once.
    let (ok, report) = agui_check(&two.run_url(&two.b), &input).await;
    assert!(ok, "{report}");
    assert_eq!(answers(&client_messages(&report)), vec![whole.clone()], "{report}");
    // The next model call is given the whole answer once.
    let mut next = messages["messages"].as_array().expect("messages").clone();
    next.push(json!({"id": "run-2-user", "role": "user", "content": "and then?"}));
    let input = json!({"threadId": "th-frag", "runId": "run-2", "protocolVersion": "1.0", "state": {},
                       "messages": next, "tools": [], "context": []});
    let second = read_events(two.post(&two.b, &input, None).await, None).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success");
    let asked = model.requests().pop().expect("the third call");
    let said: Vec<&str> = asked["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(said, vec![whole.as_str()], "the model is given the answer once, whole");
}

/// A gateway with the agent `chat` on `model`, whose stop drains for `drain_secs`.
async fn draining_gateway(model: &ScriptedModel, db: &TestDatabase, drain_secs: u64) -> TestApp {
    let mut config = test_config(&db.url);
    config.turns.drain_secs = drain_secs;
    config.agents.push(model.agent("chat", ""));
    TestApp::start_with(config).await
}

/// Waits until `app`'s `readyz` answers 503 (a stopping instance says so at once).
async fn until_not_ready(app: &TestApp) {
    wait_until(PATIENCE, "readyz to answer 503", || async {
        let answer = app.client.get(app.url("/readyz")).send().await;
        answer.is_ok_and(|a| a.status() == 503)
    })
    .await;
}

/// SIGTERM drains: `readyz` answers 503 at once, and the answer streaming on the instance goes
/// on to its end there — whole, once, the model asked once — before the instance stops.
async fn a_stopping_instance_lets_its_answers_finish(backend: Backend) {
    const WORDS: usize = 30;
    let model = ScriptedModel::start(|_, _| slowly(WORDS, Duration::from_millis(50))).await;
    let db = TestDatabase::new(backend).await;
    let mut app = draining_gateway(&model, &db, 20).await;
    let input = first_run("th-drain", "run-1", "a story");
    let mut stream = EventStream::new(app.post_run("chat", &input).await);
    stream.until("three words", |e| e.data["delta"] == "w3 ").await;
    app.ask_to_stop();
    until_not_ready(&app).await;
    let events = stream.rest().await;
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert_eq!(text_of(&events), slow_text(WORDS));
    assert_eq!((model.calls(), model.cut()), (1, 0), "asked once, never cut");
    tokio::time::timeout(PATIENCE, app.stopped()).await.expect("the drained instance stops");
}
on_both_stores!(a_stopping_instance_lets_its_answers_finish);

/// A run that still reaches a draining instance is served: its turn is handed to another
/// instance at once and this instance's stream follows it there, until the drain ends (the
/// instance's own turns are done); the client then resumes on the other instance.
// One store: two instances share one database, which is PostgreSQL's part.
#[tokio::test]
async fn a_run_reaching_a_draining_instance_is_run_by_another() {
    const WORDS: usize = 40;
    let model = ScriptedModel::start(|_, _| slowly(WORDS, Duration::from_millis(50))).await;
    let db = TestDatabase::new(Backend::Postgres).await;
    let mut a = draining_gateway(&model, &db, 20).await;
    let b = draining_gateway(&model, &db, 20).await;
    // A runs an answer, so its drain lasts while the new run comes in.
    let mut running = EventStream::new(a.post_run("chat", &first_run("th-drain-a", "run-1", "a story")).await);
    running.until("three words", |e| e.data["delta"] == "w3 ").await;
    a.ask_to_stop();
    until_not_ready(&a).await;
    let late = first_run("th-drain-late", "run-1", "am I served?");
    let response = a.post_run("chat", &late).await;
    assert_eq!(response.status(), 200, "served, not refused");
    let mut events = read_events(response, None).await;
    let ended = |events: &[SseEvent]| events.last().is_some_and(|e| ["RUN_FINISHED", "RUN_ERROR"].contains(&e.kind()));
    if !ended(&events) {
        let last_id = events.last().and_then(|e| e.id.clone()).expect("an id");
        events.extend(read_events(b.post_run_with("chat", &late, &[("last-event-id", &last_id)]).await, None).await);
    }
    crate::fakes::two_instances::assert_no_gap(&events);
    assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
    assert_eq!(text_of(&events), slow_text(WORDS));
    let thread = b.store.find_thread("default", "th-drain-late").await.expect("query").expect("thread");
    let turn = b.store.thread_turns(thread.pk).await.expect("turns").pop().expect("turn");
    assert!(turn.epoch > 1, "handed over by A and run by B (epoch {})", turn.epoch);
    let first = running.rest().await;
    assert_eq!(first.last().expect("end").data["outcome"]["type"], "success", "A's own answer ended on A");
    tokio::time::timeout(PATIENCE, a.stopped()).await.expect("A stops");
}

/// A stream still open when the drain period ends is cut, not closed as if its run ended: the
/// official client reports it, and after the restart the turn is given again whole and the
/// thread holds its answer once.
async fn a_stream_still_open_at_the_drain_deadline_is_cut_and_the_restart_gives_the_answer_whole(backend: Backend) {
    const WORDS: usize = 60;
    let model = ScriptedModel::start(|_, _| slowly(WORDS, Duration::from_millis(50))).await;
    let db = TestDatabase::new(backend).await;
    let mut app = draining_gateway(&model, &db, 1).await;
    let input = first_run("th-drain-cut", "run-1", "a long story");
    let mut stream = EventStream::new(app.post_run("chat", &input).await);
    stream.until("three words", |e| e.data["delta"] == "w3 ").await;
    // The official client follows the same run meanwhile.
    let judge = tokio::spawn({
        let (url, input) = (app.run_url("chat"), input.clone());
        async move { agui_check(&url, &input).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.ask_to_stop();
    let mut response_ended_broken = false;
    loop {
        match stream.response_chunk().await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                response_ended_broken = true;
                break;
            }
        }
    }
    assert!(response_ended_broken, "the body ends broken, not with a clean end of stream");
    let (ok, report) = judge.await.expect("judge");
    assert!(!ok && report.contains("REJECTED"), "the official client reports the cut: {report}");
    let last_id = stream.events.last().and_then(|e| e.id.clone()).expect("an id");
    assert!(!["RUN_FINISHED", "RUN_ERROR"].contains(&stream.events.last().expect("event").kind()));
    tokio::time::timeout(PATIENCE, app.stopped()).await.expect("stops after the drain");
    // The restart (SQLite takes the turn over at start; PostgreSQL within a sweep).
    let again = draining_gateway(&model, &db, 1).await;
    let rest = read_events(again.post_run_with("chat", &input, &[("last-event-id", &last_id)]).await, None).await;
    assert_eq!(rest.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&rest));
    let messages: Value = again.get_json("/v1/threads/th-drain-cut/messages").await;
    assert_eq!(answers(messages["messages"].as_array().expect("messages")), vec![slow_text(WORDS)]);
    assert_eq!(model.calls(), 2, "asked again after the restart");
}
on_both_stores!(a_stream_still_open_at_the_drain_deadline_is_cut_and_the_restart_gives_the_answer_whole);
