//! An upstream run outlives the instance relaying it (§4.6, §9.3): the instance running an
//! `agui` turn is killed (SIGKILL) in the middle of the upstream's stream, and another instance
//! on the same PostgreSQL database takes the turn over. An upstream that gives its events ids
//! (here another gateway) is reconnected with `Last-Event-ID` and relayed from exactly after
//! the last event the log holds; one that gives none is run again on the same conversation,
//! what the cut left open closed first; with `on_cut = "fail"` the turn fails instead. Every
//! joined client stream has no gap and no duplicate, and passes the official client.

use serde_json::{json, Value};

use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;
use crate::upstream::{upstream_of, Upstream};

/// Two gateway instances on one fresh PostgreSQL database, with short leases, whose agent
/// `upstream` is an `agui` agent at `url` with `extra` settings.
async fn two_instances(url: &str, extra: &str) -> TwoInstances {
    let agents =
        format!("[[agents]]\nname = \"upstream\"\nkind = \"agui\"\nurl = \"{url}\"\ntimeout_secs = 30\n{extra}\n");
    TwoInstances::start("upstream", &agents).await
}

/// Reads A's stream until `enough` events arrived, kills A, then follows the run on B from the
/// last event A delivered. Returns the joined stream.
async fn kill_a_and_follow_on_b(mut pair: TwoInstances, input: &Value, enough: usize) -> Vec<SseEvent> {
    let mut stream = pair.open_on_a(input).await;
    let far_enough = move |e: &SseEvent| {
        let seq = e.id.as_deref().and_then(|id| id.rsplit('.').next()?.parse::<usize>().ok()).unwrap_or(0);
        e.kind() == "TEXT_MESSAGE_CONTENT" && seq >= enough
    };
    stream.until("the upstream's text, relayed by A", far_enough).await;
    let head = stream.events.clone();
    pair.kill_a();
    pair.follow_on_b(input, head).await
}

async fn judged_by_the_official_client(events: &[SseEvent], input: &Value) {
    let (url, _server) = serve_recorded_stream(sse_body(events)).await;
    let (ok, report) = agui_check(&url, input).await;
    assert!(ok, "the joined stream: {report}");
}

const TOLD: &str = "A story told slowly, four characters at a time, so that the gateway relaying it can be \
                    killed in the middle of a sentence and another can pick it up.";

/// A gateway fronting another gateway: B reconnects to the upstream with `Last-Event-ID` and
/// relays from exactly after the last event the log holds; the message the cut left open goes on.
// One store: the upstream gateway here is a stand-in agent; the takeover's database is PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_run_with_event_ids_continues_exactly_where_the_log_stopped() {
    let upstream_db = TestDatabase::new(Backend::Sqlite).await;
    let mut upstream_config = test_config(&upstream_db.url);
    let teller = format!(
        "name = \"teller\"\nkind = \"script\"\nchunk_chars = 4\nchunk_delay_ms = 40\nsteps = [ {{ say = \"{TOLD}\" }} ]\n"
    );
    upstream_config.agents.push(toml::from_str(&teller).expect("agent"));
    let upstream = TestApp::start_with(upstream_config).await;
    let pair = two_instances(&upstream.run_url("teller"), "").await;
    let input = first_run("th-cut-ids", "run-1", "tell me a story");
    let joined = kill_a_and_follow_on_b(pair, &input, 8).await;
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let texts = texts_by_message(&joined);
    assert_eq!(texts.len(), 1, "the cut message went on: {texts:?}");
    assert_eq!(texts[0].1, TOLD, "every character once, in order");
    assert_eq!(joined.iter().filter(|e| e.kind() == "TEXT_MESSAGE_END").count(), 1);
    // The upstream was followed, not asked again: one turn there.
    assert_eq!(upstream.counts().await.turns, 1);
    judged_by_the_official_client(&joined, &input).await;
}

/// An upstream whose events have no ids: B closes what the cut left open and runs the upstream
/// again on the same conversation; no message shows its text twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_run_without_event_ids_is_run_again_on_the_same_conversation() {
    let server = upstream_of(Upstream::Node);
    let pair = two_instances(&format!("{}/agents/slow", server.url), "").await;
    let input = first_run("th-cut-plain", "run-1", "take your time");
    let joined = kill_a_and_follow_on_b(pair, &input, 4).await;
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let texts = texts_by_message(&joined);
    let whole = ["Upstream heard: take your time", "Done after 1 messages."];
    for (id, text) in &texts {
        assert!(whole.iter().any(|w| w.starts_with(text.as_str())), "{id} shows its text once: {text:?}");
    }
    assert_eq!(texts.last().map(|t| t.1.as_str()), Some("Done after 1 messages."), "{texts:?}");
    let requests = server.requests().await;
    assert_eq!(requests.len(), 2, "asked once on A, once again on B");
    let turn = joined[0].id.as_deref().and_then(|id| id.split('.').next()).expect("turn").to_string();
    assert_eq!(requests[0]["body"]["runId"], json!(format!("{turn}-1")));
    assert_eq!(requests[1]["body"]["runId"], json!(format!("{turn}-2")), "a new upstream run");
    assert_eq!(requests[1]["body"]["messages"], requests[0]["body"]["messages"], "on the same conversation");
    assert!(requests[1]["headers"]["last-event-id"].is_null(), "nothing to reconnect to");
    judged_by_the_official_client(&joined, &input).await;
}

/// An upstream that keeps its own session answers nothing when run again on a conversation it
/// has already seen: the turn taken over after the cut does not end `succeeded` with the answer
/// cut; it fails, saying so, and the log says what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_run_that_answers_nothing_when_run_again_fails_the_turn() {
    let server = upstream_of(Upstream::Node);
    let pair = two_instances(&format!("{}/agents/once", server.url), "").await;
    let logs = pair.logs.clone();
    let input = first_run("th-cut-silent", "run-1", "tell me everything");
    let joined = kill_a_and_follow_on_b(pair, &input, 4).await;
    let end = &joined.last().expect("end").data;
    assert_eq!((end["type"].as_str(), end["code"].as_str()), (Some("RUN_ERROR"), Some("failed")), "{end}");
    assert!(end["message"].as_str().is_some_and(|m| m.contains("gave no answer")), "{end}");
    let texts = texts_by_message(&joined);
    assert!(texts.iter().all(|(_, text)| !text.contains("w39")), "the answer was cut: {texts:?}");
    assert_eq!(server.requests().await.len(), 2, "asked on A, asked again on B");
    let logged = logs.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
    assert!(logged.contains("answered nothing"), "the log says what happened");
    judged_by_the_official_client(&joined, &input).await;
}

/// `on_cut = "fail"`: the turn taken over after the cut ends `failed`, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_upstream_run_fails_the_turn_when_the_agent_says_so() {
    let server = upstream_of(Upstream::Node);
    let pair = two_instances(&format!("{}/agents/slow", server.url), "on_cut = \"fail\"").await;
    let input = first_run("th-cut-fail", "run-1", "take your time");
    let joined = kill_a_and_follow_on_b(pair, &input, 4).await;
    let end = &joined.last().expect("end").data;
    assert_eq!((end["type"].as_str(), end["code"].as_str()), (Some("RUN_ERROR"), Some("failed")), "{end}");
    assert!(end["message"].as_str().is_some_and(|m| m.contains("on_cut")), "{end}");
    assert_eq!(server.requests().await.len(), 1, "the upstream was not asked again");
    judged_by_the_official_client(&joined, &input).await;
}

/// The instance relaying an upstream's sub-agent is killed in the middle of the sub-agent's
/// message (an upstream without event ids): B closes what the cut left open — the message with
/// the sub-agent's own `subagentRunId`, then the sub-agent — and runs the upstream again, whose
/// sub-agent gets an id of its own: no id of the turn names two sub-agents, and the official
/// client takes the joined stream (it refuses a sub-agent started again after it finished).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_relayed_subagent_is_closed_as_its_own_and_the_run_again_names_a_new_one() {
    let server = upstream_of(Upstream::Node);
    let pair = two_instances(&format!("{}/agents/slow-subagent", server.url), "").await;
    let input = first_run("th-cut-subagent", "run-1", "ask the researcher");
    let joined = kill_a_and_follow_on_b(pair, &input, 6).await;
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let started: Vec<&str> = joined
        .iter()
        .filter(|e| e.kind() == "SUBAGENT_STARTED")
        .filter_map(|e| e.data["subagentRunId"].as_str())
        .collect();
    assert_eq!(started.len(), 2, "the cut sub-agent and the one run again: {started:?}");
    assert_ne!(started[0], started[1], "a sub-agent id is never reused within the turn");
    let cut = joined
        .iter()
        .find(|e| e.kind() == "SUBAGENT_ERROR")
        .unwrap_or_else(|| panic!("the cut sub-agent is ended: {:?}", kinds(&joined)));
    assert_eq!(cut.data["subagentRunId"], json!(started[0]));
    // Each message ends under the sub-agent it began under, the cut one included.
    for start in joined.iter().filter(|e| e.kind() == "TEXT_MESSAGE_START") {
        let id = &start.data["messageId"];
        let end = joined
            .iter()
            .find(|e| e.kind() == "TEXT_MESSAGE_END" && e.data["messageId"] == *id)
            .unwrap_or_else(|| panic!("message {id} ends"));
        assert_eq!(end.data["subagentRunId"], start.data["subagentRunId"], "message {id}");
    }
    judged_by_the_official_client(&joined, &input).await;
}
