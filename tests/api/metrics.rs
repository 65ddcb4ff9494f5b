//! `GET /metrics` after real runs: an interrupt, a resume, a reconnect, a refusal, a refused
//! credential. (Quota refusals are counted in `quotas.rs`.)

use std::collections::HashMap;

use serde_json::json;

use crate::helpers::*;

/// `name{labels}` → value, parsed with a Prometheus text-format parser.
pub(crate) async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let text = app.client.get(app.url("/metrics")).send().await.expect("get").text().await.expect("text");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    let mut values = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<String> = sample.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        };
        values.insert(format!("{}{{{}}}", sample.metric, labels.join(",")), value);
    }
    values
}

// One store: the counters are the process's, not the store's.
#[tokio::test]
async fn metrics_count_runs_turns_events_interrupts_and_reconnects() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    // A turn that waits for an approval, then is resumed.
    let events = app.run_to_end("approver", &first_run("th-m", "run-1", "x")).await;
    let id = events.last().expect("end").data["outcome"]["interrupts"][0]["id"].as_str().expect("id").to_string();
    let resume = json!({"threadId": "th-m", "runId": "run-2", "messages": [],
        "resume": [{"interruptId": id, "status": "resolved", "payload": {"approved": true}}]});
    app.run_to_end("approver", &resume).await;
    // A reconnect into a finished turn.
    let demo = app.run_to_end("demo", &first_run("th-m2", "run-1", "y")).await;
    let last_id = demo[3].id.clone().expect("id");
    let rest = read_events(
        app.post_run_with("demo", &first_run("th-m2", "run-1", "y"), &[("last-event-id", &last_id)]).await,
        None,
    )
    .await;
    assert_eq!(rest.len(), demo.len() - 4);
    // A refusal.
    let refused = app
        .run_to_end(
            "demo",
            &json!({"threadId": "th-m2", "runId": "run-9", "messages": [
        {"id": "a", "role": "user", "content": "not said"}, {"id": "b", "role": "user", "content": "z"}]}),
        )
        .await;
    assert_eq!(refused[0].data["code"], "history_mismatch");
    // A refused credential (checked even in local development mode).
    let bad = app.client.get(app.url("/v1/agents")).bearer_auth("not-a-token").send().await.expect("get");
    assert_eq!(bad.status(), 401);

    let metrics = scrape(&app).await;
    let get =
        |name: &str| metrics.get(name).copied().unwrap_or_else(|| panic!("{name} missing from {:?}", metrics.keys()));
    assert_eq!(get("agui_runs_started_total{agent=approver}"), 2.0);
    assert_eq!(get("agui_runs_started_total{agent=demo}"), 2.0, "the refused run is not a started one");
    assert_eq!(get("agui_runs_refused_total{code=history_mismatch}"), 1.0);
    let auth_failures: f64 =
        metrics.iter().filter(|(name, _)| name.starts_with("agui_auth_failures_total{")).map(|(_, v)| v).sum();
    assert_eq!(auth_failures, 1.0, "one refused credential, by reason");
    assert_eq!(get("agui_reconnects_total{}"), 1.0);
    assert_eq!(get("agui_turns_finished_total{agent=approver,outcome=succeeded}"), 1.0);
    assert_eq!(get("agui_turns_finished_total{agent=demo,outcome=succeeded}"), 1.0);
    assert_eq!(get("agui_interrupts_opened_total{}"), 1.0);
    assert_eq!(get("agui_interrupts_decided_total{code=decided}"), 1.0);
    assert_eq!(get("agui_turns_running{}"), 0.0);
    assert_eq!(get("agui_streams_open{}"), 0.0);
    let streamed = events.len() + demo.len() + rest.len() + refused.len() - 1;
    assert!(get("agui_events_streamed_total{}") >= streamed as f64, "streamed {streamed}");
    let counts = app.counts().await;
    assert_eq!(
        get("agui_events_appended_total{}"),
        (counts.events - 1) as f64,
        "all but the decision event went through the writer"
    );
    assert!(get("agui_append_batch_events{}") >= 1.0);
    assert!(get("agui_stream_lag_seconds{}") >= 1.0);
    assert!(get("agui_db_connections{}") >= 1.0);
}
