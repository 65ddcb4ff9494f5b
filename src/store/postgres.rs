//! The PostgreSQL store: production, any number of instances sharing one database.
//!
//! Appends are group-committed as one `INSERT … SELECT FROM UNNEST(…)` per batch, and other
//! instances are woken by one `pg_notify` per batch, sent after the commit on its own (a notify
//! inside each append's transaction would serialise all commits).

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::backend::{fence_rows, Backend, Wakeups};
use super::{StoreError, StoredEvent, TurnStatus};

const APPENDS_CHANNEL: &str = "agui_gateway_appends";
/// `pg_notify` payloads must stay under 8000 bytes; larger batches announce "everything".
const MAX_NOTIFY_PAYLOAD: usize = 7000;

pub struct PgStore {
    pool: PgPool,
    /// Tags this instance's notifications so it can skip its own.
    instance: String,
}

impl PgStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)?.application_name("agui-gateway");
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        Ok(PgStore { pool, instance: uuid::Uuid::new_v4().simple().to_string()[..12].to_string() })
    }
}

#[async_trait]
impl Backend for PgStore {
    type Db = Postgres;

    /// Several instances may serve from one PostgreSQL database.
    const SHARED: bool = true;
    const SKIP_LOCKED: &'static str = "FOR UPDATE SKIP LOCKED";
    const BEGIN_WRITE: &'static str = "BEGIN";
    const LOCK_ROW: &'static str = "FOR UPDATE";
    /// Each batch in flight holds a pooled connection; the writer's setting bounds it.
    const MAX_PIPELINE_DEPTH: usize = 8;
    const LOCK_SHARED: &'static str = "FOR SHARE";

    fn read_pool(&self) -> &PgPool {
        &self.pool
    }

    fn write_pool(&self) -> &PgPool {
        &self.pool
    }

    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/postgres").run(&self.pool).await?;
        Ok(())
    }

    async fn lock_turns(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        turns: &[i64],
    ) -> Result<HashMap<i64, (i64, TurnStatus)>, StoreError> {
        let rows: Vec<(i64, i64, String)> =
            sqlx::query_as("SELECT id, epoch, status FROM turns WHERE id = ANY($1) ORDER BY id FOR UPDATE")
                .bind(turns)
                .fetch_all(&mut **tx)
                .await?;
        Ok(fence_rows(rows))
    }

    /// One `INSERT … SELECT FROM UNNEST(…)` for the whole batch.
    async fn insert_events(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        events: &[(i64, &StoredEvent)],
    ) -> Result<(), StoreError> {
        let mut turns = Vec::with_capacity(events.len());
        let mut seqs = Vec::with_capacity(events.len());
        let mut kinds = Vec::with_capacity(events.len());
        let mut bodies = Vec::with_capacity(events.len());
        let mut times = Vec::with_capacity(events.len());
        for (turn, event) in events {
            turns.push(*turn);
            seqs.push(event.seq);
            kinds.push(event.kind as i16);
            bodies.push(event.body_text()?);
            times.push(event.at_ms);
        }
        sqlx::query(
            "INSERT INTO events (turn, seq, kind, body, at_ms) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::smallint[], $4::text[], $5::bigint[])",
        )
        .bind(&turns)
        .bind(&seqs)
        .bind(&kinds)
        .bind(&bodies)
        .bind(&times)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn listen(&self) -> Result<Option<Wakeups>, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(APPENDS_CHANNEL).await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(1024);
        let instance = self.instance.clone();
        tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        if let Some(pairs) = parse_announcement(notification.payload(), &instance) {
                            if sender.send(pairs).await.is_err() {
                                return;
                            }
                        }
                    }
                    // The connection dropped and notifications may have been missed: every
                    // waiting stream re-reads the log (an empty list); the next call reconnects.
                    Ok(None) => {
                        tracing::warn!("lost the database notification connection; reconnecting");
                        if sender.send(Vec::new()).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "database notifications failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        });
        Ok(Some(receiver))
    }

    async fn announce(&self, appended: &[(i64, i64)]) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(APPENDS_CHANNEL)
            .bind(announcement(&self.instance, appended))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// `instance|turn:seq,turn:seq…`, or `instance|` ("re-check everything") when too long.
fn announcement(instance: &str, appended: &[(i64, i64)]) -> String {
    let mut payload = format!("{instance}|");
    for (i, (turn, seq)) in appended.iter().enumerate() {
        if payload.len() > MAX_NOTIFY_PAYLOAD {
            payload.truncate(instance.len() + 1);
            break;
        }
        if i > 0 {
            payload.push(',');
        }
        payload.push_str(&format!("{turn}:{seq}"));
    }
    payload
}

/// Parses an announcement; `None` for our own or a malformed one.
fn parse_announcement(payload: &str, own_instance: &str) -> Option<Vec<(i64, i64)>> {
    let (instance, pairs) = payload.split_once('|')?;
    if instance == own_instance {
        return None;
    }
    Some(
        pairs
            .split(',')
            .filter_map(|pair| {
                let (turn, seq) = pair.split_once(':')?;
                Some((turn.parse().ok()?, seq.parse().ok()?))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_and_skip_our_own() {
        let payload = announcement("a", &[(1, 2), (3, 40)]);
        assert_eq!(parse_announcement(&payload, "a"), None);
        assert_eq!(parse_announcement(&payload, "b"), Some(vec![(1, 2), (3, 40)]));
        assert_eq!(parse_announcement("garbage", "b"), None);
    }

    #[test]
    fn an_oversized_announcement_asks_for_a_full_recheck() {
        let many: Vec<(i64, i64)> = (0..5000).map(|i| (i, i)).collect();
        let payload = announcement("a", &many);
        assert!(payload.len() < 8000);
        assert_eq!(parse_announcement(&payload, "b"), Some(vec![]));
    }
}
