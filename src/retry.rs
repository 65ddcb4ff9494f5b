//! Waiting between attempts. Everything the gateway retries — a read or write of a turn while
//! the database is briefly away, an event-log commit, a model call answered 429 or 5xx, an
//! accept loop out of file descriptors — waits by one [`Backoff`]: a first delay, doubling up
//! to a most. A retried HTTP call also honours the wait its answer asks for in `Retry-After`
//! ([`retry_after`], RFC 9110 §10.2.3), given in seconds or as an HTTP-date.
//!
//! Only elapsed time is measured here (tokio sleeps); what time of day it is comes in as an
//! argument, so the wait an HTTP-date asks for is computed against the caller's clock.

use std::time::{Duration, SystemTime};

/// Delays that start at a first one and double up to a most; the schedule of one run of
/// attempts (a fresh `Backoff` starts again from the first delay).
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    most: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, most: Duration) -> Backoff {
        Backoff { next: first, most }
    }

    /// The delay [`Backoff::next_delay`] gives next, without taking it (to check a deadline).
    pub fn peek(&self) -> Duration {
        self.next.min(self.most)
    }

    /// The delay to wait now; the one after it is twice as long, up to the most.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.peek();
        self.next = delay.saturating_mul(2).min(self.most);
        delay
    }

    /// Sleeps the next delay.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }
}

/// The wait a `Retry-After` header value asks for at `now`: delay-seconds (`120`) or an
/// HTTP-date (`Wed, 21 Oct 2015 07:28:00 GMT`; a date already past asks for no wait). `None`
/// when it is neither, and the caller keeps to its own schedule.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_most() {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(100));
        assert_eq!(backoff.peek(), Duration::from_millis(20));
        let delays: Vec<u128> = (0..5).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [20, 40, 80, 100, 100]);
    }

    #[test]
    fn an_unbounded_backoff_saturates_instead_of_overflowing() {
        let mut backoff = Backoff::new(Duration::from_secs(u64::MAX / 2 + 1), Duration::MAX);
        backoff.next_delay();
        assert_eq!(backoff.next_delay(), Duration::MAX);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").expect("a date");
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO), "a past date");
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-5", now), None);
    }
}
