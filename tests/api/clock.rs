//! The gateway's one clock, over HTTP: a gateway started on a `TestClock` decides by the time
//! of day only what that clock shows. Each test moves the clock instead of waiting for time to
//! pass: an interrupt's expiry and a stream's time cap happen when the clock reaches them, and
//! not before (a token's expiry is in `auth/lifetime.rs`, an upstream's interrupt TTL in
//! `agents::agui`'s own tests).

use std::time::Duration;

use agui_gateway::clock::TestClock;
use agui_gateway::store::InterruptStatus;

use crate::helpers::*;
use crate::on_both_stores;

/// A gateway on `db` reading the time from a clock showing the machine's time now, moved only
/// by hand. Its lease outlasts every jump of the clock, so a jump never reads as a lost lease.
async fn app_on_test_clock(
    db: &TestDatabase,
    configure: impl FnOnce(&mut agui_gateway::config::Config),
) -> (TestApp, std::sync::Arc<TestClock>) {
    let mut config = test_config(&db.url);
    config.turns.lease_ms = 7 * 86_400_000;
    configure(&mut config);
    let clock = TestClock::starting_now();
    (TestApp::start_with_clock(config, clock.clone()).await, clock)
}

async fn an_interrupt_expires_when_the_gateways_clock_passes_its_deadline(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let (app, clock) = app_on_test_clock(&db, |_| {}).await;
    let events = app.run_to_end("approver", &first_run("th-clock-int", "run-1", "send it")).await;
    let end = &events.last().expect("events").data;
    assert_eq!(end["outcome"]["type"], "interrupt", "{:?}", kinds(&events));
    let thread = app.store.find_thread("default", "th-clock-int").await.expect("read").expect("the thread");
    let turn = app.store.thread_turns(thread.pk).await.expect("turns").pop().expect("the turn");
    let interrupt = app.store.turn_interrupts(turn.pk).await.expect("interrupts").remove(0);
    let status = || async { app.store.turn_interrupts(turn.pk).await.expect("interrupts")[0].status };

    // The sweeper runs every 200 ms of real time: a second of it decides nothing while the
    // clock stands a millisecond before the deadline.
    clock.set(interrupt.expires_at_ms - 1);
    holds_throughout(Duration::from_secs(1), "the interrupt stays open", || async {
        status().await == InterruptStatus::Open
    })
    .await;

    clock.set(interrupt.expires_at_ms);
    wait_until(PATIENCE, "the interrupt to expire", || async { status().await == InterruptStatus::Expired }).await;
}
on_both_stores!(an_interrupt_expires_when_the_gateways_clock_passes_its_deadline);

async fn a_stream_ends_at_its_time_cap_when_the_gateways_clock_reaches_it(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // An hour of the gateway's time: were the cap a timer of real time, the test would hang.
    let (app, clock) = app_on_test_clock(&db, |config| config.limits.stream_max_secs = 3_600).await;
    let stream = open_until_waiting(&app, "waiter", &first_run("th-clock-cap", "run-1", "wait")).await;
    let reader = tokio::spawn(stream.rest());

    clock.advance(Duration::from_secs(3_599));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reader.is_finished(), "the stream ended before its cap");

    clock.advance(Duration::from_secs(1));
    let events = tokio::time::timeout(PATIENCE, reader)
        .await
        .expect("the stream ended once the clock reached its cap")
        .expect("reader");
    // Ended cleanly (the client resumes with Last-Event-ID): no RUN_ERROR, no RUN_FINISHED.
    assert!(events.iter().all(|e| !matches!(e.kind(), "RUN_ERROR" | "RUN_FINISHED")), "{:?}", kinds(&events));
}
on_both_stores!(a_stream_ends_at_its_time_cap_when_the_gateways_clock_reaches_it);
