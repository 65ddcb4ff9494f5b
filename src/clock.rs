//! Wall-clock time as a dependency: what the engine and auth decide by the time of day (lease
//! ends, interrupt expiry, quota windows, token lifetimes, audit and event timestamps) reads a
//! [`Clock`] they were given, so a test can set the time by hand instead of waiting for it.
//!
//! A wait for a time of day (a stream's cap, a token's expiry while a stream is open) is a
//! [`Clock::sleep_until_ms`], so a test that moves the clock past it ends the wait at once.
//! Timers that only measure how long to wait (keepalives, retry backoff, polls) keep using
//! `tokio::time::Instant`: they are about elapsed time, not about what time it is.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio::sync::watch;

/// A source of the current wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Resolves once this clock shows `at_ms` or later.
    fn sleep_until_ms(&self, at_ms: i64) -> BoxFuture<'static, ()>;

    /// Whole seconds since the Unix epoch (token `iat` / `exp`); 0 before the epoch.
    fn now_secs(&self) -> u64 {
        u64::try_from(self.now_ms().div_euclid(1000)).unwrap_or(0)
    }
}

/// The machine's clock, which serving instances use.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    }

    fn sleep_until_ms(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        async move {
            // Checked again after each sleep: the machine's clock may be set back meanwhile.
            loop {
                let left = at_ms.saturating_sub(SystemClock.now_ms());
                if left <= 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(u64::try_from(left).unwrap_or(0))).await;
            }
        }
        .boxed()
    }
}

/// The machine's clock, shared.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock that stands still until a test moves it ([`TestClock::advance`], [`TestClock::set`]).
#[derive(Debug)]
pub struct TestClock {
    /// The time shown; its watchers are the pending [`Clock::sleep_until_ms`] waits.
    now_ms: watch::Sender<i64>,
}

impl TestClock {
    /// A clock showing `now_ms` (milliseconds since the Unix epoch).
    pub fn at(now_ms: i64) -> Arc<TestClock> {
        Arc::new(TestClock { now_ms: watch::Sender::new(now_ms) })
    }

    /// A clock showing the machine's time now, from then on moved only by hand.
    pub fn starting_now() -> Arc<TestClock> {
        TestClock::at(SystemClock.now_ms())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.send_modify(|now| *now = now.saturating_add(by));
    }

    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.now_ms.send_replace(now_ms);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        *self.now_ms.borrow()
    }

    fn sleep_until_ms(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        let mut shown = self.now_ms.subscribe();
        async move {
            // The sender lives as long as the clock; a clock dropped never reaches the time.
            if shown.wait_for(|now| *now >= at_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_clock_moves_only_when_told() {
        let clock = TestClock::at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(Duration::from_millis(2_500));
        assert_eq!(clock.now_ms(), 3_500);
        assert_eq!(clock.now_secs(), 3);
        clock.set(-5);
        assert_eq!(clock.now_secs(), 0, "before the epoch reads as 0 seconds");
    }

    #[tokio::test]
    async fn a_wait_on_a_test_clock_ends_when_the_clock_is_moved_past_it() {
        let clock = TestClock::at(1_000);
        let mut wait = clock.sleep_until_ms(5_000);
        assert!(futures_util::poll!(&mut wait).is_pending());
        clock.advance(Duration::from_millis(3_999));
        assert!(futures_util::poll!(&mut wait).is_pending(), "a millisecond early");
        clock.advance(Duration::from_millis(1));
        tokio::time::timeout(Duration::from_secs(5), wait).await.expect("the wait ends at its time");
        clock.sleep_until_ms(0).await;
    }

    #[test]
    fn the_system_clock_reads_the_time_of_day() {
        let read = SystemClock.now_ms();
        // 2020-09-13 and 2100-01-01, in milliseconds since the epoch.
        assert!(read > 1_600_000_000_000 && read < 4_102_444_800_000, "{read}");
    }
}
