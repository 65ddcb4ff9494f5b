//! Revocation (SPEC §2.2): a revoked key ends its open stream within seconds, and the turn runs
//! on.

use super::*;

async fn a_revoked_key_ends_its_open_stream_within_seconds_and_the_turn_runs_on(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let (key, key_id) = new_key(&app, "acme", &["waiter"], KeyKind::Tenant).await;
    let response = post(&app, "waiter", "acme", &first_run("th-w", "r-1", "wait"), Some(&bearer(&key)), &[]).await;
    assert_eq!(response.status(), 200);
    // Read until the turn has said its word and waits, then revoke the key as `keys revoke` does.
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let reader = tokio::spawn(stream.rest());
    let events_before = app.counts().await.events;
    let revoked_at = Instant::now();
    assert!(keys::revoke(app.store.as_ref(), app.auth.clock().as_ref(), "acme", &key_id, "cli").await.expect("revoke"));
    let events = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the stream ended within 5 s of the revocation")
        .expect("reader");
    let took = revoked_at.elapsed();
    let last = events.last().expect("events");
    assert_eq!(last.kind(), "RUN_ERROR", "{events:?}");
    assert_eq!(last.data["code"], "revoked");
    assert_eq!(events.iter().filter(|e| e.kind() == "RUN_ERROR").count(), 1);
    eprintln!("a revoked key's stream ended {took:?} after the revocation");
    // The turn is untouched: still running, nothing appended to its log for the revocation.
    let thread = app.store.find_thread("acme", "th-w").await.expect("read").expect("thread");
    let turns = app.store.thread_turns(thread.pk).await.expect("turns");
    assert_eq!(turns[0].status.as_str(), "running");
    assert_eq!(app.counts().await.events, events_before);
    let refused = post(&app, "waiter", "acme", &first_run("th-w", "r-1", "wait"), Some(&bearer(&key)), &[]).await;
    assert_eq!(status_and_code(refused).await, (401, "unauthenticated".to_string()));
    let revocation = audit(&app, "acme").await.into_iter().find(|r| r.entry.action == "key.revoke").expect("audited");
    assert_eq!(detail(&revocation)["key"], key_id.as_str());
}
on_both_stores!(a_revoked_key_ends_its_open_stream_within_seconds_and_the_turn_runs_on);
