//! Wall-clock time as a dependency: what the engine and auth decide by the time of day (lease
//! ends, interrupt expiry, quota windows, token lifetimes, audit and event timestamps) reads a
//! [`Clock`] they were given, so a test can set the time by hand instead of waiting for it.
//!
//! Timers that only measure how long to wait (tokio sleeps, intervals, retry deadlines) keep
//! using `tokio::time::Instant`: they are about elapsed time, not about what time it is.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A source of the current wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

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
}

/// The machine's clock, shared.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock that stands still until a test moves it ([`TestClock::advance`], [`TestClock::set`]).
#[derive(Debug)]
pub struct TestClock {
    now_ms: AtomicI64,
}

impl TestClock {
    /// A clock showing `now_ms` (milliseconds since the Unix epoch).
    pub fn at(now_ms: i64) -> Arc<TestClock> {
        Arc::new(TestClock { now_ms: AtomicI64::new(now_ms) })
    }

    /// A clock showing the machine's time now, from then on moved only by hand.
    pub fn starting_now() -> Arc<TestClock> {
        TestClock::at(SystemClock.now_ms())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
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

    #[test]
    fn the_system_clock_reads_the_time_of_day() {
        let read = SystemClock.now_ms();
        // 2020-09-13 and 2100-01-01, in milliseconds since the epoch.
        assert!(read > 1_600_000_000_000 && read < 4_102_444_800_000, "{read}");
    }
}
