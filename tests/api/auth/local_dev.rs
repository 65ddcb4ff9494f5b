//! Local development mode: without any verifier only loopback callers are served, and
//! `auth.local_dev = "auto"` switches off with each of its three conditions.

use super::*;

/// Without any verifier the gateway is in local development mode: loopback only, as `local`.
// One store: what is checked is who is let in; keys are stored on both stores in `auth::`.
#[tokio::test]
async fn without_authentication_only_loopback_callers_are_served_and_a_key_still_counts() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    assert!(app.auth.local_dev());
    let response = app.post_run("demo", &first_run("th-local", "r-1", "hi")).await;
    assert_eq!(response.status(), 200);
    read_events(response, None).await;
    // A credential, when sent, is checked even here.
    let refused =
        post(&app, "demo", "default", &first_run("th-x", "r-1", "hi"), Some("Bearer agk_nonsense"), &[]).await;
    assert_eq!(status_and_code(refused).await, (401, "unauthenticated".to_string()));
}

/// `auth.local_dev = "auto"`: each of its three conditions switches local mode off.
// One store: decided from the configuration.
#[tokio::test]
async fn local_dev_auto_is_off_while_a_token_verifier_is_configured() {
    let (app, _db) = secured(Backend::Sqlite).await;
    assert!(!app.auth.local_dev());
    let before = app.counts().await;
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await, before);
}

async fn local_dev_auto_is_off_once_the_store_holds_an_api_key(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.auth.revocation_check_ms = 100;
    let app = TestApp::start_with(config.clone()).await;
    assert!(app.auth.local_dev(), "no verifier, no key, loopback: local mode");
    // A key created beside the running gateway (as `keys create` does) ends local mode.
    new_key(&app, "default", &["demo"], KeyKind::Tenant).await;
    wait_until(Duration::from_secs(5), "local mode to end after a key was created", || {
        let local = app.auth.local_dev();
        async move { !local }
    })
    .await;
    let before = app.counts().await;
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await, before);
    app.shut_down().await;
    // And a start on a store that holds a key never turns it on.
    let restarted = TestApp::start_with(config).await;
    assert!(!restarted.auth.local_dev());
    let anonymous = restarted.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(restarted.counts().await, before);
}
on_both_stores!(local_dev_auto_is_off_once_the_store_holds_an_api_key);

// One store: decided from the configuration.
#[tokio::test]
async fn local_dev_auto_is_off_when_listening_beyond_loopback() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.listen = "0.0.0.0:8080".into();
    let app = TestApp::start_with(config).await;
    assert!(!app.auth.local_dev());
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await.audit, 0);
}
