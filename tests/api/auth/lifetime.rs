//! A token's lifetime on the gateway's one clock (SPEC §2.1): a token an app key exchanged is
//! accepted, and its open stream read, until the gateway's clock passes its `exp` (with the
//! leeway), and not a moment longer. The clock is a `TestClock` moved by hand.

use agui_gateway::clock::{Clock, TestClock};

use super::*;

/// The `exp` claim of a token (read without verifying: the gateway verified it when issuing).
fn expiry_of(token: &str) -> u64 {
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64")).expect("JSON");
    claims["exp"].as_u64().expect("exp")
}

async fn an_exchanged_token_expires_when_the_gateways_clock_passes_its_exp(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = auth_config(&db.url, &rsa_provider());
    // The lease outlasts every jump of the clock, so no jump reads as a lost lease.
    config.turns.lease_ms = 7 * 86_400_000;
    let leeway_ms = config.auth.leeway_secs as i64 * 1000;
    let clock = TestClock::starting_now();
    let app = TestApp::start_with_clock(config, clock.clone()).await;
    let (app_key, _) = new_key(&app, "acme", &["waiter"], KeyKind::App).await;
    let issued: Value =
        exchange_subject(&app, &app_key, &idp_token(&idp_claims("acme", "erin"))).await.json().await.expect("JSON");
    let token = issued["access_token"].as_str().expect("a token").to_string();
    let ends_ms = expiry_of(&token) as i64 * 1000 + leeway_ms;
    assert!(ends_ms > clock.now_ms(), "issued by the gateway's clock, alive now");

    let response = post(&app, "waiter", "acme", &first_run("th-exp", "r-1", "wait"), Some(&bearer(&token)), &[]).await;
    assert_eq!(response.status(), 200);
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let reader = tokio::spawn(stream.rest());

    // A millisecond before its end the token still starts a run and its stream stays open.
    clock.set(ends_ms - 1);
    let still = post(&app, "demo", "acme", &first_run("th-exp-2", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_ne!(still.status(), 401, "refused before its exp by the gateway's clock");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reader.is_finished(), "the stream ended before the token's exp");

    // Past it: the open stream ends with `RUN_ERROR revoked`, and the token is refused.
    clock.set(ends_ms + 1_000);
    let events =
        tokio::time::timeout(PATIENCE, reader).await.expect("the stream ended at the token's exp").expect("reader");
    let last = events.last().expect("events");
    assert_eq!((last.kind(), last.data["code"].as_str()), ("RUN_ERROR", Some("revoked")), "{:?}", kinds(&events));
    assert!(last.data["message"].as_str().unwrap_or("").contains("expired"), "{}", last.data);
    let after = post(&app, "waiter", "acme", &first_run("th-exp-3", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    let (status, _, message) = status_code_and_message(after).await;
    assert_eq!(status, 401);
    assert!(message.contains("expired"), "{message}");
}
on_both_stores!(an_exchanged_token_expires_when_the_gateways_clock_passes_its_exp);
