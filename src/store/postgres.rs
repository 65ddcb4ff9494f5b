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

use super::backend::{fence_rows, Backend, WakeUp, Wakeups};
use super::{StoreError, StoredEvent, TurnStatus};

const APPENDS_CHANNEL: &str = "agui_gateway_appends";
/// `pg_notify` payloads must stay under 8000 bytes; larger batches announce "everything".
const MAX_NOTIFY_PAYLOAD: usize = 7000;
/// How a notification spells the wake-ups that are not appends: `turn:-1` asks for a cancel,
/// `thread:-2` says a turn started on the thread (a sequence number is never negative). Only
/// the encoding here knows them; instances of earlier versions spell them the same.
const CANCEL_SEQ: i64 = -1;
const NEW_TURN_SEQ: i64 = -2;

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
                        if let Some(wakeups) = parse_announcement(notification.payload(), &instance) {
                            if sender.send(wakeups).await.is_err() {
                                return;
                            }
                        }
                    }
                    // The connection dropped and notifications may have been missed: every
                    // waiting stream re-reads the log; the next call reconnects.
                    Ok(None) => {
                        tracing::warn!("lost the database notification connection; reconnecting");
                        if sender.send(vec![WakeUp::Lost]).await.is_err() {
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

    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(APPENDS_CHANNEL)
            .bind(announcement(&self.instance, wakeups))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// `instance|turn:seq,turn:seq…`, or `instance|` ("re-check everything": a lost wake-up, or
/// a list too long to send whole).
fn announcement(instance: &str, wakeups: &[WakeUp]) -> String {
    let mut payload = format!("{instance}|");
    for (i, wakeup) in wakeups.iter().enumerate() {
        let (key, seq) = match *wakeup {
            WakeUp::Committed { turn, seq } => (turn, seq),
            WakeUp::Cancel { turn } => (turn, CANCEL_SEQ),
            WakeUp::NewTurn { thread } => (thread, NEW_TURN_SEQ),
            WakeUp::Lost => {
                payload.truncate(instance.len() + 1);
                break;
            }
        };
        if payload.len() > MAX_NOTIFY_PAYLOAD {
            payload.truncate(instance.len() + 1);
            break;
        }
        if i > 0 {
            payload.push(',');
        }
        payload.push_str(&format!("{key}:{seq}"));
    }
    payload
}

/// Parses an announcement; `None` for our own or a malformed one. One that names nothing asks
/// for a full re-check ([`WakeUp::Lost`]).
fn parse_announcement(payload: &str, own_instance: &str) -> Option<Vec<WakeUp>> {
    let (instance, pairs) = payload.split_once('|')?;
    if instance == own_instance {
        return None;
    }
    let wakeups: Vec<WakeUp> = pairs
        .split(',')
        .filter_map(|pair| {
            let (key, seq) = pair.split_once(':')?;
            let (key, seq): (i64, i64) = (key.parse().ok()?, seq.parse().ok()?);
            match seq {
                CANCEL_SEQ => Some(WakeUp::Cancel { turn: key }),
                NEW_TURN_SEQ => Some(WakeUp::NewTurn { thread: key }),
                seq if seq >= 0 => Some(WakeUp::Committed { turn: key, seq }),
                _ => None,
            }
        })
        .collect();
    Some(if wakeups.is_empty() { vec![WakeUp::Lost] } else { wakeups })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_and_skip_our_own() {
        let wakeups = [
            WakeUp::Committed { turn: 1, seq: 2 },
            WakeUp::Cancel { turn: 3 },
            WakeUp::NewTurn { thread: 4 },
            WakeUp::Committed { turn: 3, seq: 40 },
        ];
        let payload = announcement("a", &wakeups);
        // The spelling instances of earlier versions read and write.
        assert_eq!(payload, "a|1:2,3:-1,4:-2,3:40");
        assert_eq!(parse_announcement(&payload, "a"), None);
        assert_eq!(parse_announcement(&payload, "b"), Some(wakeups.to_vec()));
        assert_eq!(parse_announcement("garbage", "b"), None);
        assert_eq!(parse_announcement(&announcement("a", &[WakeUp::Lost]), "b"), Some(vec![WakeUp::Lost]));
    }

    #[test]
    fn an_oversized_announcement_asks_for_a_full_recheck() {
        let many: Vec<WakeUp> = (0..5000).map(|i| WakeUp::Committed { turn: i, seq: i }).collect();
        let payload = announcement("a", &many);
        assert!(payload.len() < 8000);
        assert_eq!(parse_announcement(&payload, "b"), Some(vec![WakeUp::Lost]));
    }
}
