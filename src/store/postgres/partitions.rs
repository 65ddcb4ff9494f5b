//! The log's partitions on PostgreSQL (`migrations/postgres/0023_log_partitions.sql`):
//! `event_segments` is partitioned by turn, `event_log.partition_turns` turn ids per partition.
//!
//! Turn ids only grow, so the segments of new turns go to the pages of the newest partition,
//! never into free space a vacuum recorded in old pages all over a large table (where each
//! small insert would dirty, and log a full image of, a different cold page). The partitions
//! are made ahead: whenever the newest one's range is less than half a partition ahead of the
//! turns' sequence, the next ones are made, each by `CREATE TABLE` and `ATTACH PARTITION`,
//! which does not block the log's reads and writes (only `SHARE UPDATE EXCLUSIVE` on the
//! parent). A batch that finds no partition for its turn (the upkeep fell behind) makes them
//! itself and is tried again (`StoreError::is_missing_partition`).
//!
//! A partition whose range no turn is left in (retention or erasure took them all), and that
//! new turns were numbered past a while ago, is dropped whole: its space comes back at once,
//! with no row-by-row vacuum. Dropping takes the parent's `ACCESS EXCLUSIVE` lock, so it waits
//! for it at most [`DROP_LOCK_WAIT`] and otherwise leaves the partition for the next pass.
//!
//! Every instance runs the upkeep; a transaction-scoped advisory lock makes them take turns.

use sqlx::PgPool;

use crate::store::error::StoreError;
use crate::store::rows::events::PartitionUpkeep;

/// The advisory lock (two-key form: the gateway's first key beside the tenants' own) that
/// makes instances keep the partitions one at a time.
const UPKEEP_LOCK: &str = "SELECT pg_advisory_xact_lock(1634170218, 1)";
/// How long after new turns were first numbered past a partition it may be dropped: far
/// longer than any transaction that took a turn id of its range takes to insert the turn.
const DROP_AFTER_MS: i64 = 10 * 60 * 1000;
/// How long making a partition waits for a lock (a manual `VACUUM` of the parent, say):
/// the partitions are made well ahead, so a pass that gives up loses nothing.
const MAKE_LOCK_WAIT: &str = "SET LOCAL lock_timeout = '5s'";
/// How long a drop waits for the parent's lock (every log statement waits behind it meanwhile).
const DROP_LOCK_WAIT: &str = "SET LOCAL lock_timeout = '50ms'";
/// The setting each partition gets: a row is kept in its page up to a page's size (see
/// `0022_event_segments.sql`).
const PARTITION_OPTIONS: &str = "WITH (toast_tuple_target = 8160)";

/// Makes the partitions the coming turns need (`span` turn ids each) and, given the time of
/// day (`now_ms`, the engine's clock), drops those whose turns are all gone. Without it (after
/// the migrations, or for a batch that found no partition) it only makes them.
pub(super) async fn keep(pool: &PgPool, span: i64, now_ms: Option<i64>) -> Result<PartitionUpkeep, StoreError> {
    let span = span.max(1);
    let mut upkeep = PartitionUpkeep::default();
    let mut tx = pool.begin().await?;
    sqlx::query(UPKEEP_LOCK).execute(&mut *tx).await?;
    sqlx::query(MAKE_LOCK_WAIT).execute(&mut *tx).await?;
    // The sequence's newest value: no turn made from now on has a smaller id.
    let (newest_turn,): (i64,) = sqlx::query_as("SELECT last_value FROM turns_id_seq").fetch_one(&mut *tx).await?;
    let (mut upper,): (i64,) =
        sqlx::query_as("SELECT COALESCE(MAX(upper), 1) FROM log_partitions").fetch_one(&mut *tx).await?;
    let ahead = newest_turn.saturating_add(span / 2);
    while upper <= ahead {
        let lower = upper;
        upper = lower.saturating_add(span);
        let name = format!("event_segments_{lower}");
        // Made alone, then attached: attaching an empty table checks nothing and takes no lock
        // that the log's statements wait for.
        sqlx::query(&format!("CREATE TABLE {name} (LIKE event_segments INCLUDING STORAGE) {PARTITION_OPTIONS}"))
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "ALTER TABLE event_segments ATTACH PARTITION {name} FOR VALUES FROM ({lower}) TO ({upper})"
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT INTO log_partitions (name, lower, upper) VALUES ($1, $2, $3)")
            .bind(&name)
            .bind(lower)
            .bind(upper)
            .execute(&mut *tx)
            .await?;
        upkeep.created.push(name);
    }
    let Some(now_ms) = now_ms else {
        tx.commit().await?;
        return Ok(upkeep);
    };
    sqlx::query("UPDATE log_partitions SET passed_at_ms = $1 WHERE passed_at_ms IS NULL AND upper <= $2")
        .bind(now_ms)
        .bind(newest_turn)
        .execute(&mut *tx)
        .await?;
    let emptied: Vec<(String,)> = sqlx::query_as(
        "SELECT p.name FROM log_partitions p WHERE p.passed_at_ms <= $1 \
         AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id >= p.lower AND t.id < p.upper) ORDER BY p.lower",
    )
    .bind(now_ms.saturating_sub(DROP_AFTER_MS))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    for (name,) in emptied {
        match drop_partition(pool, &name).await {
            Ok(true) => upkeep.dropped.push(name),
            Ok(false) => {}
            Err(error) => tracing::warn!(partition = %name, %error, "could not drop an emptied log partition"),
        }
    }
    Ok(upkeep)
}

/// Drops an emptied partition, unless its lock is not to be had at once (then `false`: the
/// next pass tries again) or a turn of its range appeared meanwhile.
async fn drop_partition(pool: &PgPool, name: &str) -> Result<bool, StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query(UPKEEP_LOCK).execute(&mut *tx).await?;
    sqlx::query(DROP_LOCK_WAIT).execute(&mut *tx).await?;
    let still_empty: Option<(String,)> = sqlx::query_as(
        "SELECT p.name FROM log_partitions p WHERE p.name = $1 \
         AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id >= p.lower AND t.id < p.upper)",
    )
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    if still_empty.is_none() {
        return Ok(false);
    }
    // The name comes from `log_partitions`, which only this module writes (`event_segments_`
    // and digits, or the migration's `event_segments_first`).
    match sqlx::query(&format!("DROP TABLE {name}")).execute(&mut *tx).await {
        Ok(_) => {}
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => return Ok(false),
        Err(error) => return Err(error.into()),
    }
    sqlx::query("DELETE FROM log_partitions WHERE name = $1").bind(name).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(true)
}
