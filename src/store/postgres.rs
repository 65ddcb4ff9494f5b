//! The PostgreSQL store: production, any number of instances sharing one database.
//!
//! Appends are group-committed as one `INSERT … SELECT FROM UNNEST(…)` per batch; a batch with
//! no other in flight is written whole in one statement (`WRITE_AT_ONCE`: fence, inserts and
//! checkpoints, one round trip). Other instances hear of a batch only when one of them follows a
//! turn of it (`turns.followed_until_ms`, read by the fence under its row lock): then the log
//! writer notifies them after the commit, with the new events when they fit. The notice is a
//! transaction of its own, never part of the batch's: a notify takes a database-wide lock from
//! its commit to the end of it, which inside a batch would be held across the batch's fsync and
//! serialise every commit that carries one. A notice lost to a crash between the two is caught
//! up by the followers' check.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::backend::{fence_rows, Backend, Fence, WakeUp, Wakeups};
use super::error::StoreError;
use super::rows::events::{BatchOutcome, EventKind, PartitionUpkeep, StoredEvent, TurnWrites, WriteOp};
use super::segments::{segments_of, Segment};

/// Cancels and turn starts (every instance listens), and appends announced on their own.
const APPENDS_CHANNEL: &str = "agui_gateway_appends";
/// A batch's notice to the instances following its turns: `instance|[{"t":turn,"s":seq,
/// "e":[[seq,kind,at_ms,body]…]}…]`, the events left out (`"e"` absent) when they do not fit.
const EVENTS_CHANNEL: &str = "agui_gateway_events";
/// `pg_notify` payloads must stay under 8000 bytes: a notice of appends is split to fit, other
/// announcements too long announce "everything".
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
    /// Whether a batch's fence reads the follow marks (off where the bus delivers a turn's
    /// messages to its followers only).
    notices: AtomicBool,
    /// Turn ids per partition of the log, as the latest upkeep was given them: what a batch
    /// that found no partition for its turn makes them with.
    partition_turns: AtomicI64,
}

/// Turn ids per partition until told otherwise (`event_log.partition_turns`, given before the
/// migrations run).
const PARTITION_TURNS: i64 = 20_000;

/// The whole of a batch that only appends events and checkpoints, in one statement: the fence
/// (the turns locked and read, with whether another instance follows them), the admitted
/// segments inserted (each of one epoch: a stale one's are dropped whole) and each turn's last
/// checkpoint written; its rows are the fence's. Run on its own (autocommit),
/// it is one round trip.
const WRITE_AT_ONCE: &str = "WITH fence AS ( \
        SELECT id, epoch, status, followed_until_ms > $1 AS followed FROM turns \
        WHERE id = ANY($2::bigint[]) ORDER BY id FOR UPDATE), \
    admitted AS (SELECT id, epoch FROM fence WHERE status = 'running'), \
    inserted AS ( \
        INSERT INTO event_segments (turn, last_seq, first_seq, events, at_ms, body) \
        SELECT s.turn, s.last_seq, s.first_seq, s.events, s.at_ms, s.body \
        FROM UNNEST($3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[], $8::bigint[], $9::bytea[]) \
            AS s(turn, epoch, last_seq, first_seq, events, at_ms, body) \
        JOIN admitted a ON a.id = s.turn AND a.epoch = s.epoch RETURNING 1), \
    checkpointed AS ( \
        UPDATE turns t SET checkpoint = c.checkpoint \
        FROM UNNEST($10::bigint[], $11::bigint[], $12::text[]) AS c(turn, epoch, checkpoint) \
        JOIN admitted a ON a.id = c.turn AND a.epoch = c.epoch \
        WHERE t.id = c.turn RETURNING 1) \
    SELECT f.id, f.epoch, f.status, f.followed, \
        (SELECT COUNT(*) FROM inserted) AS inserted, (SELECT COUNT(*) FROM checkpointed) AS checkpointed \
    FROM fence f";

impl PgStore {
    pub async fn connect(url: &str, max_connections: u32) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)?.application_name("agui-gateway");
        let pool =
            PgPoolOptions::new().max_connections(max_connections.max(2)).acquire_timeout(Duration::from_secs(10));
        // The crate's own tests count the round trips of a request (`round_trips.rs`).
        #[cfg(test)]
        let pool = super::round_trips::counting(pool);
        let pool = pool.connect_with(options).await?;
        let instance = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        Ok(PgStore { pool, instance, notices: AtomicBool::new(true), partition_turns: AtomicI64::new(PARTITION_TURNS) })
    }

    /// The time a follow mark must reach to count: `now_ms`, or never when marks are not read.
    fn followed_after(&self, now_ms: i64) -> i64 {
        if self.notices.load(Ordering::Acquire) {
            now_ms
        } else {
            i64::MAX
        }
    }

    /// `error`, after making the log's partitions when it says a turn had none (the upkeep
    /// fell behind): the writer tries the batch again, as it does after any transient error.
    async fn making_missing_partitions(&self, error: StoreError) -> StoreError {
        if error.is_missing_partition() {
            let span = self.partition_turns.load(Ordering::Relaxed);
            match partitions::keep(&self.pool, span, None).await {
                Ok(upkeep) => {
                    tracing::warn!(made = ?upkeep.created, "a batch found no log partition for its turn; made them")
                }
                Err(failed) => {
                    tracing::warn!(error = %failed, "a batch found no log partition for its turn, and making them failed")
                }
            }
        }
        error
    }

    /// The notice's prefix: who sends it (so it skips its own).
    fn notice_prefix(&self) -> String {
        format!("{}|", self.instance)
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
    /// A transaction-scoped advisory lock per tenant (the two-key form, its first key the
    /// gateway's own, so it never meets a single-key lock such as the migrations'): row locks
    /// cannot stop two transactions from each counting the turns before either inserts its own.
    const LOCK_TENANT: &'static str = "SELECT pg_advisory_xact_lock(1634170217, hashtext($1))";

    fn read_pool(&self) -> &PgPool {
        &self.pool
    }

    fn write_pool(&self) -> &PgPool {
        &self.pool
    }

    /// The migrations, then the log's partitions for the turns to come: a migrated database
    /// is ready to log.
    async fn run_migrations(&self) -> Result<(), StoreError> {
        sqlx::migrate!("./migrations/postgres").run(&self.pool).await?;
        partitions::keep(&self.pool, self.partition_turns.load(Ordering::Relaxed), None).await?;
        Ok(())
    }

    async fn lock_turns(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        turns: &[i64],
        now_ms: i64,
    ) -> Result<Fence, StoreError> {
        let rows: Vec<(i64, i64, String, bool, bool)> = sqlx::query_as(
            "SELECT id, epoch, status, followed_until_ms > $2, cancel_requested FROM turns \
             WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        )
        .bind(turns)
        .bind(self.followed_after(now_ms))
        .fetch_all(&mut **tx)
        .await?;
        let cancelling = rows.iter().filter(|row| row.4).map(|row| row.0).collect();
        let mut fence =
            fence_rows(rows.into_iter().map(|(id, epoch, status, followed, _)| (id, epoch, status, followed)));
        fence.cancelling = cancelling;
        Ok(fence)
    }

    async fn write_at_once(&self, batch: &[TurnWrites], now_ms: i64) -> Result<Option<BatchOutcome>, StoreError> {
        let Some(plan) = AtOnce::plan(batch)? else { return Ok(None) };
        let segments = SegmentColumns::of(&plan.segments);
        let turns = super::rows::events::batch_turns(batch);
        let rows: Result<Vec<(i64, i64, String, bool, i64, i64)>, _> = sqlx::query_as(WRITE_AT_ONCE)
            .bind(self.followed_after(now_ms))
            .bind(&turns)
            .bind(&segments.turns)
            .bind(&segments.epochs)
            .bind(&segments.last_seqs)
            .bind(&segments.first_seqs)
            .bind(&segments.counts)
            .bind(&segments.times)
            .bind(&segments.bodies)
            .bind(&plan.checkpoint_turns)
            .bind(&plan.checkpoint_epochs)
            .bind(&plan.checkpoints)
            .fetch_all(&self.pool)
            .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(error) => return Err(self.making_missing_partitions(error.into()).await),
        };
        let fence = fence_rows(rows.iter().map(|r| (r.0, r.1, r.2.clone(), r.3)));
        let mut outcome = super::rows::events::fence_batch(batch, &fence.current);
        outcome.followed = fence.followed.into_iter().collect();
        Ok(Some(outcome))
    }

    async fn follow_turns(&self, turns: &[i64], until_ms: i64) -> Result<(), StoreError> {
        if turns.is_empty() {
            return Ok(());
        }
        // The same row lock as a batch's fence: a batch either sees the mark or committed
        // before it (and the follower reads the table after marking). The rows are locked in
        // id order, as the fences lock theirs, so marking many turns at once cannot deadlock
        // with a batch.
        sqlx::query(
            "UPDATE turns SET followed_until_ms = $2 WHERE id IN \
             (SELECT id FROM turns WHERE id = ANY($1) AND followed_until_ms < $2 ORDER BY id FOR UPDATE)",
        )
        .bind(turns)
        .bind(until_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    fn set_follower_notices(&self, on: bool) {
        self.notices.store(on, Ordering::Release);
    }

    async fn last_seqs_at_once(&self, turns: &[i64]) -> Result<Option<HashMap<i64, i64>>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT t.id, GREATEST(COALESCE((SELECT MAX(last_seq) FROM event_segments WHERE turn = t.id), 0), \
                 COALESCE((SELECT MAX(seq) FROM events WHERE turn = t.id), 0)) \
             FROM UNNEST($1::bigint[]) AS t(id)",
        )
        .bind(turns)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(rows.into_iter().collect()))
    }

    /// One `INSERT … SELECT FROM UNNEST(…)` for the whole batch.
    async fn insert_segments(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        segments: &[Segment],
    ) -> Result<(), StoreError> {
        let columns = SegmentColumns::of(segments);
        let inserted = sqlx::query(
            "INSERT INTO event_segments (turn, last_seq, first_seq, events, at_ms, body) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bytea[])",
        )
        .bind(&columns.turns)
        .bind(&columns.last_seqs)
        .bind(&columns.first_seqs)
        .bind(&columns.counts)
        .bind(&columns.times)
        .bind(&columns.bodies)
        .execute(&mut **tx)
        .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(error) => Err(self.making_missing_partitions(error.into()).await),
        }
    }

    fn set_partition_turns(&self, turns: i64) {
        self.partition_turns.store(turns.max(1), Ordering::Relaxed);
    }

    async fn keep_partitions(&self, turns_per_partition: i64, now_ms: i64) -> Result<PartitionUpkeep, StoreError> {
        self.set_partition_turns(turns_per_partition);
        partitions::keep(&self.pool, turns_per_partition, Some(now_ms)).await
    }

    async fn listen(&self) -> Result<Option<Wakeups>, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all([APPENDS_CHANNEL, EVENTS_CHANNEL]).await?;
        let (sender, receiver) = tokio::sync::mpsc::channel(1024);
        let instance = self.instance.clone();
        tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        let heard = if notification.channel() == EVENTS_CHANNEL {
                            parse_notice(notification.payload(), &instance)
                        } else {
                            parse_announcement(notification.payload(), &instance)
                        };
                        if let Some(wakeups) = heard {
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

    /// Appends go out as a notice (with their events when they fit), on the channel only
    /// this version reads; cancels, turn starts and "look again" as the announcement every
    /// version reads.
    async fn announce(&self, wakeups: &[WakeUp]) -> Result<(), StoreError> {
        let (appends, others): (Vec<&WakeUp>, Vec<&WakeUp>) =
            wakeups.iter().partition(|w| matches!(w, WakeUp::Committed { .. } | WakeUp::Events { .. }));
        if !appends.is_empty() {
            let pieces = notice_pieces_of(&appends)?;
            // One round trip however many notices; a transaction's notices arrive in order.
            sqlx::query("SELECT pg_notify($1, notice) FROM UNNEST($2::text[]) AS notice")
                .bind(EVENTS_CHANNEL)
                .bind(notices(&self.notice_prefix(), &pieces))
                .execute(&self.pool)
                .await?;
        }
        if !others.is_empty() {
            let others: Vec<WakeUp> = others.into_iter().cloned().collect();
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(APPENDS_CHANNEL)
                .bind(announcement(&self.instance, &others))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

/// `instance|turn:seq,turn:seq…`, or `instance|` ("re-check everything": a lost wake-up, or
/// a list too long to send whole).
fn announcement(instance: &str, wakeups: &[WakeUp]) -> String {
    let mut payload = format!("{instance}|");
    for (i, wakeup) in wakeups.iter().enumerate() {
        let (key, seq) = match wakeup {
            WakeUp::Committed { turn, seq } => (*turn, *seq),
            WakeUp::Events { turn, events } => (*turn, events.last().map_or(0, |e| e.seq)),
            WakeUp::Cancel { turn } => (*turn, CANCEL_SEQ),
            WakeUp::NewTurn { thread } => (*thread, NEW_TURN_SEQ),
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

/// One turn's part of a notice: with its events (`whole`) and without (`short`).
struct NoticePiece {
    whole: String,
    short: String,
}

/// The pieces of a notice for these events (in log order), one per turn.
fn notice_pieces<'a>(events: impl Iterator<Item = (i64, &'a StoredEvent)>) -> Result<Vec<NoticePiece>, StoreError> {
    let mut by_turn: Vec<(i64, Vec<&'a StoredEvent>)> = Vec::new();
    for (turn, event) in events {
        match by_turn.iter_mut().find(|(t, _)| *t == turn) {
            Some((_, list)) => list.push(event),
            None => by_turn.push((turn, vec![event])),
        }
    }
    by_turn
        .into_iter()
        .filter_map(|(turn, list)| Some((turn, list.last()?.seq, list)))
        .map(|(turn, last, list)| {
            let mut whole = format!("{{\"t\":{turn},\"s\":{last},\"e\":[");
            for (index, event) in list.iter().enumerate() {
                if index > 0 {
                    whole.push(',');
                }
                whole.push_str(&format!("[{},{},{},", event.seq, event.kind as i16, event.at_ms));
                whole.push_str(event.body_text()?);
                whole.push(']');
            }
            whole.push_str("]}");
            Ok(NoticePiece { whole, short: format!("{{\"t\":{turn},\"s\":{last}}}") })
        })
        .collect()
}

/// The pieces of a notice for these wake-ups: a turn's events, or only its newest seq.
fn notice_pieces_of(wakeups: &[&WakeUp]) -> Result<Vec<NoticePiece>, StoreError> {
    let mut pieces = Vec::with_capacity(wakeups.len());
    for wakeup in wakeups {
        match wakeup {
            WakeUp::Events { turn, events } => {
                pieces.extend(notice_pieces(events.iter().map(|event| (*turn, event)))?);
            }
            WakeUp::Committed { turn, seq } => {
                let short = format!("{{\"t\":{turn},\"s\":{seq}}}");
                pieces.push(NoticePiece { whole: short.clone(), short });
            }
            _ => {}
        }
    }
    Ok(pieces)
}

/// The notices for these pieces, each under the payload limit: every turn's piece with its
/// events when that piece fits a notice on its own, else its newest seq only, packed in order
/// into as few notices as hold them. Notices are never all-or-nothing: one turn's large events
/// cost its followers one read of that turn, not a read of every turn the batch touched.
fn notices(prefix: &str, pieces: &[NoticePiece]) -> Vec<String> {
    // `prefix`, the brackets, and a comma between pieces.
    let room = MAX_NOTIFY_PAYLOAD.saturating_sub(prefix.len() + 2);
    let mut out = Vec::new();
    let mut body = String::new();
    for piece in pieces {
        let part = if piece.whole.len() <= room { &piece.whole } else { &piece.short };
        if !body.is_empty() && body.len() + 1 + part.len() > room {
            out.push(format!("{prefix}[{body}]"));
            body.clear();
        }
        if !body.is_empty() {
            body.push(',');
        }
        body.push_str(part);
    }
    if !body.is_empty() || out.is_empty() {
        out.push(format!("{prefix}[{body}]"));
    }
    out
}

/// A notice's turn, as sent.
#[derive(serde::Deserialize)]
struct HeardPiece<'a> {
    t: i64,
    s: i64,
    #[serde(default, borrow)]
    e: Vec<(i64, i16, i64, &'a serde_json::value::RawValue)>,
}

/// Parses a notice; `None` for our own or a malformed one. One that names nothing asks for a
/// full re-check ([`WakeUp::Lost`]).
fn parse_notice(payload: &str, own_instance: &str) -> Option<Vec<WakeUp>> {
    let (instance, pieces) = payload.split_once('|')?;
    if instance == own_instance {
        return None;
    }
    let pieces: Vec<HeardPiece> = serde_json::from_str(pieces).ok()?;
    let mut wakeups = Vec::with_capacity(pieces.len());
    for piece in pieces {
        let events: Option<Vec<StoredEvent>> = piece
            .e
            .iter()
            .map(|(seq, kind, at_ms, body)| {
                Some(StoredEvent {
                    seq: *seq,
                    kind: EventKind::from_i16(*kind).ok()?,
                    body: bytes::Bytes::copy_from_slice(body.get().as_bytes()),
                    at_ms: *at_ms,
                })
            })
            .collect();
        match events {
            Some(events) if events.last().is_some_and(|e| e.seq == piece.s) => {
                wakeups.push(WakeUp::Events { turn: piece.t, events })
            }
            _ => wakeups.push(WakeUp::Committed { turn: piece.t, seq: piece.s }),
        }
    }
    Some(if wakeups.is_empty() { vec![WakeUp::Lost] } else { wakeups })
}

/// Segments as the columns `UNNEST` takes.
#[derive(Default)]
struct SegmentColumns<'a> {
    turns: Vec<i64>,
    epochs: Vec<i64>,
    last_seqs: Vec<i64>,
    first_seqs: Vec<i64>,
    counts: Vec<i32>,
    times: Vec<i64>,
    bodies: Vec<&'a [u8]>,
}

impl<'a> SegmentColumns<'a> {
    fn of(segments: &'a [Segment]) -> SegmentColumns<'a> {
        let mut columns = SegmentColumns::default();
        for segment in segments {
            columns.turns.push(segment.turn);
            columns.epochs.push(segment.epoch);
            columns.last_seqs.push(segment.last_seq);
            columns.first_seqs.push(segment.first_seq);
            columns.counts.push(segment.events);
            columns.times.push(segment.at_ms);
            columns.bodies.push(&segment.body);
        }
        columns
    }
}

/// A batch as [`WRITE_AT_ONCE`] takes it, when it is one that statement can write (only
/// events and checkpoints, one epoch per turn): its segments (each turn's events up to its
/// terminal event) and each turn's last checkpoint.
struct AtOnce<'a> {
    segments: Vec<Segment>,
    checkpoint_turns: Vec<i64>,
    checkpoint_epochs: Vec<i64>,
    checkpoints: Vec<&'a str>,
}

impl<'a> AtOnce<'a> {
    fn plan(batch: &'a [TurnWrites]) -> Result<Option<AtOnce<'a>>, StoreError> {
        let mut epochs: HashMap<i64, i64> = HashMap::new();
        for writes in batch {
            let simple = writes.ops.iter().all(|op| matches!(op, WriteOp::Event { .. } | WriteOp::Checkpoint { .. }));
            let one_epoch = *epochs.entry(writes.turn).or_insert(writes.epoch) == writes.epoch;
            if !simple || !one_epoch {
                return Ok(None);
            }
        }
        let mut events: Vec<(i64, i64, &'a StoredEvent)> = Vec::new();
        let mut sealed: HashSet<i64> = HashSet::new();
        // Each turn's last checkpoint only (the earlier ones would be overwritten unseen).
        let mut checkpoints: Vec<(i64, i64, &'a str)> = Vec::new();
        for writes in batch {
            if writes.ops.is_empty() {
                continue;
            }
            // After the turn's terminal event: left out here, refused by the fence's verdict.
            if sealed.contains(&writes.turn) {
                continue;
            }
            for op in &writes.ops {
                match op {
                    WriteOp::Event { event, .. } => {
                        if event.kind.is_terminal() {
                            sealed.insert(writes.turn);
                        }
                        events.push((writes.turn, writes.epoch, event));
                    }
                    WriteOp::Checkpoint { checkpoint, .. } => {
                        checkpoints.retain(|(turn, _, _)| *turn != writes.turn);
                        checkpoints.push((writes.turn, writes.epoch, checkpoint));
                    }
                    _ => {}
                }
            }
        }
        Ok(Some(AtOnce {
            segments: segments_of(events)?,
            checkpoint_turns: checkpoints.iter().map(|c| c.0).collect(),
            checkpoint_epochs: checkpoints.iter().map(|c| c.1).collect(),
            checkpoints: checkpoints.iter().map(|c| c.2).collect(),
        }))
    }
}

mod partitions;
#[cfg(test)]
mod tests;
