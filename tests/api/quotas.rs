//! Per-tenant limits (§8): concurrent turns, turns started per minute and the token budget.
//! A refusal is a lone `RUN_ERROR` (`concurrency_limit` / `quota_exceeded`) whose
//! `rawEvent.gateway` holds `{scope, limit, used, resetsAt}`, and it starts nothing; a spent
//! budget ends a running turn cleanly between model calls.

use serde_json::{json, Value};

use crate::fakes::model::ScriptedModel;
use crate::fakes::tools::start_tool;
use crate::helpers::*;
use crate::openai::openai_agent;

/// The test configuration with a tenant `limited` under `quotas` (a TOML inline table).
async fn limited(db: &TestDatabase, quotas: &str) -> TestApp {
    let mut config = test_config(&db.url);
    config.tenants.push(toml::from_str(&format!("name = \"limited\"\nquotas = {quotas}")).expect("tenant"));
    let (model, tool) = (
        ScriptedModel::planned(vec![("get_weather", json!({"city": "Oslo"}))], "Cold.").await,
        start_tool("cold").await,
    );
    config.agents.push(openai_agent(&model.url, &tool.0, "never"));
    // The test servers live as long as the process: the gateway calls them during the test.
    std::mem::forget((model, tool));
    TestApp::start_with(config).await
}

async fn run_as_limited(app: &TestApp, agent: &str, thread: &str) -> Vec<SseEvent> {
    let url = format!("{}?tenant=limited", app.run_url(agent));
    let response = app
        .client
        .post(url)
        .header("content-type", "application/json")
        .body(first_run(thread, "run-1", "go").to_string())
        .send()
        .await
        .expect("run");
    assert_eq!(response.status(), 200);
    read_events(response, None).await
}

fn refusal(events: &[SseEvent]) -> (&Value, &Value) {
    assert_eq!(events.len(), 1, "a lone RUN_ERROR: {:?}", kinds(events));
    (&events[0].data["code"], &events[0].data["rawEvent"]["gateway"])
}

async fn concurrent_turns_past_the_limit_are_refused_with_the_figures(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = limited(&db, "{ max_concurrent_turns = 1 }").await;
    let url = format!("{}?tenant=limited", app.run_url("waiter"));
    let first = app
        .client
        .post(url)
        .header("content-type", "application/json")
        .body(first_run("th-q1", "run-1", "wait").to_string())
        .send()
        .await
        .expect("run");
    // Up to the wait (RUN_STARTED, STATE_SNAPSHOT and the "waiting" message): every event the
    // first turn writes before it waits is committed before the rows are counted, or a slow
    // machine would count the refused run's "nothing" against events still on their way.
    let head = read_events(first, Some(5)).await;
    assert_eq!(head[0].kind(), "RUN_STARTED");
    assert_eq!(head[4].kind(), "TEXT_MESSAGE_END");
    let before = app.counts().await;
    let refused = run_as_limited(&app, "demo", "th-q2").await;
    let (code, figures) = refusal(&refused);
    assert_eq!(code, "concurrency_limit");
    assert_eq!(figures, &json!({ "scope": "concurrent_turns", "limit": 1, "used": 1, "resetsAt": null }));
    assert_eq!(app.counts().await, before, "a refused run starts nothing");
    // Another tenant is not limited by it.
    assert_eq!(
        app.run_to_end("demo", &first_run("th-q3", "run-1", "hi")).await.last().expect("end").kind(),
        "RUN_FINISHED"
    );
}
crate::on_both_stores!(concurrent_turns_past_the_limit_are_refused_with_the_figures);

/// Waits, when needed, until the clock is in the first three quarters of a minute: a
/// per-minute quota counts fixed minutes, so what a test starts then stays in one.
async fn early_in_a_minute() {
    let second_of_minute = || (agui_gateway::clock::Clock::now_ms(&agui_gateway::clock::SystemClock) / 1000) % 60;
    if second_of_minute() > 45 {
        wait_until(std::time::Duration::from_secs(20), "the next minute", || {
            let early = second_of_minute() <= 45;
            async move { early }
        })
        .await;
    }
}

async fn turns_per_minute_past_the_limit_are_refused_until_the_next_minute(backend: Backend) {
    // Fixed minutes: start early in one so the three runs share it.
    early_in_a_minute().await;
    let db = TestDatabase::new(backend).await;
    let app = limited(&db, "{ turns_per_minute = 2 }").await;
    for thread in ["th-m1", "th-m2"] {
        assert_eq!(run_as_limited(&app, "demo", thread).await.last().expect("end").kind(), "RUN_FINISHED");
    }
    let before = app.counts().await;
    let refused = run_as_limited(&app, "demo", "th-m3").await;
    let (code, figures) = refusal(&refused);
    assert_eq!(code, "quota_exceeded");
    assert_eq!(
        (&figures["scope"], &figures["limit"], &figures["used"]),
        (&json!("turns_per_minute"), &json!(2), &json!(2))
    );
    let resets = figures["resetsAt"].as_str().expect("resetsAt");
    assert!(resets.ends_with(":00.000Z"), "the next minute: {resets}");
    assert_eq!(app.counts().await, before);
}
crate::on_both_stores!(turns_per_minute_past_the_limit_are_refused_until_the_next_minute);

async fn a_spent_token_budget_ends_the_running_turn_and_refuses_the_next(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // Each model answer reports 12 + 5 tokens; the budget is 10.
    let app = limited(&db, "{ tokens_per_period = 10, token_period_secs = 3600 }").await;
    let events = run_as_limited(&app, "assistant", "th-t1").await;
    let end = &events.last().expect("end").data;
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", kinds(&events));
    assert_eq!(end["code"], "quota_exceeded");
    assert_eq!(end["rawEvent"]["gateway"]["scope"], "tokens");
    assert_eq!((&end["rawEvent"]["gateway"]["limit"], &end["rawEvent"]["gateway"]["used"]), (&json!(10), &json!(17)));
    // It ended between model calls: the first answer's tool call ran and is closed.
    assert!(kinds(&events).contains(&"TOOL_CALL_RESULT"));
    let (ok, report) = {
        let input = first_run("th-t1", "run-1", "go");
        let url = format!("{}?tenant=limited", app.run_url("assistant"));
        agui_check(&url, &input).await
    };
    assert!(ok, "the ended run passes the official client: {report}");

    let before = app.counts().await;
    let refused = run_as_limited(&app, "assistant", "th-t2").await;
    let (code, figures) = refusal(&refused);
    assert_eq!(code, "quota_exceeded");
    assert_eq!((&figures["scope"], &figures["used"]), (&json!("tokens"), &json!(17)));
    assert!(figures["resetsAt"].as_str().is_some_and(|r| r.ends_with(":00:00.000Z")), "{figures}");
    assert_eq!(app.counts().await, before);

    // The refusals are counted by scope.
    let metrics = app.client.get(app.url("/metrics")).send().await.expect("metrics").text().await.expect("text");
    assert!(metrics.contains(r#"agui_quota_refusals_total{code="tokens"} 1"#), "{metrics}");
}
crate::on_both_stores!(a_spent_token_budget_ends_the_running_turn_and_refuses_the_next);

/// Fires `count` first runs of `agent` at once on threads of their own, as tenant `limited`;
/// returns the first event each stream sent (`RUN_STARTED` for a started turn, the lone
/// `RUN_ERROR` of a refusal).
async fn burst(app: &TestApp, agent: &str, prefix: &str, count: usize) -> Vec<SseEvent> {
    let url = format!("{}?tenant=limited", app.run_url(agent));
    let runs = (0..count).map(|i| {
        let request = app
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(first_run(&format!("{prefix}-{i}"), "run-1", "wait").to_string());
        async move {
            let response = request.send().await.expect("run");
            assert_eq!(response.status(), 200);
            read_events(response, Some(1)).await.pop().expect("a first event")
        }
    });
    futures_util::future::join_all(runs).await
}

/// How many of a burst's runs started a turn; every other one must be a refusal with `code`.
fn started_or_refused(first: &[SseEvent], code: &str) -> usize {
    let started = first.iter().filter(|e| e.kind() == "RUN_STARTED").count();
    for event in first.iter().filter(|e| e.kind() != "RUN_STARTED") {
        assert_eq!((event.kind(), &event.data["code"]), ("RUN_ERROR", &json!(code)), "{:?}", event.data);
    }
    started
}

async fn a_burst_of_runs_at_once_never_starts_more_turns_than_the_concurrency_limit(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = limited(&db, "{ max_concurrent_turns = 2 }").await;
    // Twenty runs at once, each on a thread of its own (as twenty people would send them): each
    // start is counted with the others' committed, so exactly two turns run.
    let first = burst(&app, "waiter", "th-burst", 20).await;
    assert_eq!(started_or_refused(&first, "concurrency_limit"), 2);
    let counts = app.counts().await;
    assert_eq!((counts.threads, counts.turns), (2, 2), "a refused run writes nothing");
}
crate::on_both_stores!(a_burst_of_runs_at_once_never_starts_more_turns_than_the_concurrency_limit);

async fn a_burst_of_runs_at_once_never_starts_more_turns_than_the_minute_allows(backend: Backend) {
    // Fixed minutes: the burst must not straddle two.
    early_in_a_minute().await;
    let db = TestDatabase::new(backend).await;
    let app = limited(&db, "{ turns_per_minute = 3 }").await;
    let first = burst(&app, "demo", "th-minute", 20).await;
    assert_eq!(started_or_refused(&first, "quota_exceeded"), 3);
    assert_eq!(app.counts().await.turns, 3);
}
crate::on_both_stores!(a_burst_of_runs_at_once_never_starts_more_turns_than_the_minute_allows);
