//! PostgreSQL's own counters over a measurement window: the benchmark database's committed
//! transactions (`pg_stat_database.xact_commit`) and the index and sequential scans of its
//! `events` table (`pg_stat_user_tables`), read before and after the window.
//!
//! Backends report their counters to the statistics system when they go idle, at most once a
//! second (PostgreSQL 15+), so a window's delta can be off by about a second's worth at either
//! end: the figures are for windows of several seconds, compared like with like.

use sqlx::Connection;

use crate::error::{Context, Result};

/// The counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct PgCounters {
    xact_commit: i64,
    events_idx_scan: i64,
    events_seq_scan: i64,
    /// Rows the index scans of `events` returned.
    events_idx_tup_fetch: i64,
}

/// What happened between two readings.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct PgDelta {
    pub commits: i64,
    pub events_idx_scans: i64,
    pub events_seq_scans: i64,
    pub events_rows_fetched: i64,
}

impl PgCounters {
    /// Reads the counters of the database `url` names.
    pub async fn read(url: &str) -> Result<PgCounters> {
        let mut conn = sqlx::PgConnection::connect(url).await.context("connecting to read pg_stat counters")?;
        // A fresh snapshot, not one cached by an earlier read in this session.
        let (xact_commit,): (i64,) =
            sqlx::query_as("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
                .fetch_one(&mut conn)
                .await
                .context("reading pg_stat_database")?;
        let events: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT COALESCE(idx_scan, 0), seq_scan, COALESCE(idx_tup_fetch, 0) \
             FROM pg_stat_user_tables WHERE relname = 'events'",
        )
        .fetch_optional(&mut conn)
        .await
        .context("reading pg_stat_user_tables")?;
        let _ = conn.close().await;
        let (events_idx_scan, events_seq_scan, events_idx_tup_fetch) = events.unwrap_or_default();
        Ok(PgCounters { xact_commit, events_idx_scan, events_seq_scan, events_idx_tup_fetch })
    }

    pub fn until(&self, later: &PgCounters) -> PgDelta {
        PgDelta {
            commits: later.xact_commit - self.xact_commit,
            events_idx_scans: later.events_idx_scan - self.events_idx_scan,
            events_seq_scans: later.events_seq_scan - self.events_seq_scan,
            events_rows_fetched: later.events_idx_tup_fetch - self.events_idx_tup_fetch,
        }
    }
}

impl PgDelta {
    /// One line for the run's log.
    pub fn describe(&self, secs: f64) -> String {
        let per_sec = |n: i64| n as f64 / secs.max(1e-9);
        let scans_per_commit = self.events_idx_scans as f64 / (self.commits.max(1)) as f64;
        format!(
            "PostgreSQL: {} commits ({:.0}/s), events index scans {} ({:.0}/s, {scans_per_commit:.2} per commit), seq scans {}, rows fetched {}",
            self.commits,
            per_sec(self.commits),
            self.events_idx_scans,
            per_sec(self.events_idx_scans),
            self.events_seq_scans,
            self.events_rows_fetched
        )
    }
}
