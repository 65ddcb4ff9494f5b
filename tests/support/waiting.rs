//! Test support: waiting for what a test expects instead of sleeping a guessed time. A wait
//! polls its condition every [`POLL`] and fails the test, saying what it waited for, once its
//! deadline passes; [`holds_throughout`] is how a test asserts that something does not happen.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(25);

/// Polls `check` every [`POLL`] until it yields a value, failing the test with `what` when
/// `within` passes first.
pub async fn wait_for<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` every [`POLL`] until it holds, failing the test with `what` when `within`
/// passes first.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(within, what, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Checks that `holds` stays true for the whole `window` (every [`POLL`]): how a test asserts
/// that something does not happen. It never passes early; it fails as soon as `holds` breaks.
pub async fn holds_throughout<F, Fut>(window: Duration, what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + window;
    loop {
        assert!(holds().await, "{what} stopped holding within {window:?}");
        if tokio::time::Instant::now() >= end {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
