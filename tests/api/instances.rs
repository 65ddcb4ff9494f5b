//! Two instances on one PostgreSQL database (§4.5): a stream on one sees the events of a turn
//! running on the other as they are appended.

use std::time::Duration;

use crate::helpers::*;

#[tokio::test]
async fn a_stream_on_one_instance_follows_a_turn_running_on_another_live() {
    let (a, b, _db) = two_apps().await;
    let input = first_run("th-live", "run-1", "watch from elsewhere");
    let on_a = a.post_run("slow", &input).await;
    let head = read_events(on_a, Some(2)).await;
    assert_eq!(head.len(), 2);
    // Follow the same run on B while A is still writing it.
    let started = std::time::Instant::now();
    let on_b = read_events(b.post_run("slow", &input).await, None).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(kinds(&on_b).last(), Some(&"RUN_FINISHED"));
    let whole = a.run_to_end("slow", &input).await;
    assert_eq!(on_b, whole, "B streamed exactly the log A wrote");
    let thread = b.store.find_thread("default", "th-live").await.expect("query").expect("thread");
    assert_eq!(b.store.thread_turns(thread.pk).await.expect("turns").len(), 1);
}

#[tokio::test]
async fn a_cancel_sent_to_another_instance_reaches_the_turn() {
    let (a, b, _db) = two_apps().await;
    let stream = open_until_waiting(&a, "waiter", &first_run("th-x-cancel", "run-1", "x")).await;
    let reader = tokio::spawn(stream.rest());
    let cancel = b.client.post(b.url("/v1/threads/th-x-cancel/cancel")).send().await.expect("cancel");
    assert_eq!(cancel.status(), 202);
    let events = tokio::time::timeout(Duration::from_secs(10), reader).await.expect("ends").expect("reader");
    assert_eq!(events.last().expect("events").data["outcome"]["type"], "cancelled");
}
