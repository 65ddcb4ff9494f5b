//! The log in segments: the events one turn appends in one batch are one stored row, written
//! once and never changed, and `Last-Event-ID` resumes exactly after any event, inside a segment
//! or at its edge, on any instance.

use crate::helpers::*;
use crate::on_both_stores;

/// One stored segment: (first_seq, last_seq, events, body, the row's identity on disk: the
/// transaction that wrote it and its place on PostgreSQL, its rowid on SQLite).
type SegmentRow = (i64, i64, i32, Vec<u8>, String);

async fn segment_rows(database_url: &str) -> Vec<SegmentRow> {
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        sqlx::query_as(
            "SELECT first_seq, last_seq, events, body, CAST(rowid AS TEXT) FROM event_segments ORDER BY turn, last_seq",
        )
        .fetch_all(&mut connection)
        .await
        .expect("segments")
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        sqlx::query_as(
            "SELECT first_seq, last_seq, events, body, xmin::text || ctid::text FROM event_segments \
             ORDER BY turn, last_seq",
        )
        .fetch_all(&mut connection)
        .await
        .expect("segments")
    }
}

/// The segments of one turn's log tile it: 1, 2, … without a gap or an overlap, each row's
/// count matching what it holds.
fn assert_tiled(rows: &[SegmentRow]) {
    let mut next = 1;
    for (first, last, events, body, _) in rows {
        let seqs: Vec<i64> = agui_gateway::store::segments::decode(body.clone().into())
            .expect("a readable segment")
            .iter()
            .map(|event| event.seq)
            .collect();
        assert_eq!(*first, next, "segments tile the log: {rows:?}");
        assert_eq!(seqs, (*first..=*last).collect::<Vec<i64>>());
        assert_eq!(*events as usize, seqs.len());
        next = last + 1;
    }
}

/// A turn's segments written early are, at its end, the same rows, byte for byte, never
/// updated (on PostgreSQL an update would give the row a new transaction id and place).
async fn a_segment_is_written_once_and_never_rewritten(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let input = first_run("th-segments", "run-1", "written once");
    let head = read_events(app.post_run("slow", &input).await, Some(8)).await;
    assert_eq!(head.len(), 8);
    let early = segment_rows(&db.url).await;
    assert!(!early.is_empty(), "the first events are stored");
    let whole = app.run_to_end("slow", &input).await;
    assert_eq!(kinds(&whole).last(), Some(&"RUN_FINISHED"));
    let late = segment_rows(&db.url).await;
    for row in &early {
        assert!(late.contains(row), "segment {}..{} was changed or removed", row.0, row.1);
    }
    assert!(late.len() > early.len(), "the turn went on in new segments");
    assert_tiled(&late);
    let stored: i32 = late.iter().map(|row| row.2).sum();
    assert_eq!(stored as usize, whole.len(), "every event streamed is stored once");
}
on_both_stores!(a_segment_is_written_once_and_never_rewritten);

/// A burst is stored a batch to a row, and a reconnect whose `Last-Event-ID` names an event in
/// the middle of a segment, its last event, or the event just before one, gets exactly the
/// events after it — on another instance too, where the store is shared.
async fn last_event_id_resumes_exactly_inside_a_segment_on_any_instance(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let writer = TestApp::start(&db.url).await;
    let input = first_run("th-inside", "run-1", "a burst");
    let whole = writer.run_to_end("burst", &input).await;
    assert_eq!(kinds(&whole).last(), Some(&"RUN_FINISHED"));
    let rows = segment_rows(&db.url).await;
    assert_tiled(&rows);
    assert!(rows.len() < whole.len() / 4, "{} events in {} rows: not stored a batch to a row", whole.len(), rows.len());
    let (first, last, _, _, _) = rows.iter().find(|row| row.2 >= 3).expect("a segment of three events or more");
    // The one reading may be another instance (PostgreSQL) or the same file reopened (SQLite).
    let reader = match backend {
        Backend::Postgres => TestApp::start(&db.url).await,
        Backend::Sqlite => {
            writer.shut_down().await;
            TestApp::start(&db.url).await
        }
    };
    let id_of = |seq: i64| -> String {
        let event = whole.iter().find(|e| e.id.as_deref().is_some_and(|id| id.ends_with(&format!(".{seq}"))));
        event.and_then(|e| e.id.clone()).expect("the event's id")
    };
    for after in [first + 1, *last, first - 1].into_iter().filter(|seq| *seq >= 1) {
        let response = reader.post_run_with("burst", &input, &[("last-event-id", &id_of(after))]).await;
        assert_eq!(response.status(), 200);
        let rest = read_events(response, None).await;
        let expected = &whole[after as usize..];
        assert_eq!(rest.len(), expected.len(), "after seq {after}");
        assert!(rest == expected, "after seq {after}: the stream is not exactly the log's rest");
    }
}
on_both_stores!(last_event_id_resumes_exactly_inside_a_segment_on_any_instance);

/// Moves the segments ending at or before `up_to` into `events`, a row per event, as a gateway
/// from before segments logged them (run with no gateway on the database).
async fn as_old_rows(database_url: &str, up_to: i64) {
    let read = "SELECT turn, body FROM event_segments WHERE last_seq <= $1";
    let insert = "INSERT INTO events (turn, seq, kind, body, at_ms) VALUES ($1, $2, $3, $4, $5)";
    let delete = "DELETE FROM event_segments WHERE last_seq <= $1";
    macro_rules! move_on {
        ($connection:expr) => {{
            let rows: Vec<(i64, Vec<u8>)> =
                sqlx::query_as(read).bind(up_to).fetch_all(&mut $connection).await.expect("read");
            for (turn, body) in rows {
                for event in agui_gateway::store::segments::decode(body.into()).expect("segment") {
                    sqlx::query(insert)
                        .bind(turn)
                        .bind(event.seq)
                        .bind(event.kind as i16)
                        .bind(std::str::from_utf8(&event.body).expect("UTF-8"))
                        .bind(event.at_ms)
                        .execute(&mut $connection)
                        .await
                        .expect("insert");
                }
            }
            sqlx::query(delete).bind(up_to).execute(&mut $connection).await.expect("delete");
        }};
    }
    if database_url.starts_with("sqlite:") {
        let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(database_url).await.expect("sqlite");
        move_on!(connection);
    } else {
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(database_url).await.expect("postgres");
        move_on!(connection);
    }
}

/// A log written before segments (a row per event in `events`) is read as it was: a replay of
/// the whole run, and a reconnect after any of its events, whether the whole log is old rows or
/// its head is (a turn that ran across the upgrade) and its rest segments.
async fn a_log_from_before_segments_is_still_read(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let input = first_run("th-old", "run-1", "old rows");
    let whole = {
        let app = TestApp::start(&db.url).await;
        let whole = app.run_to_end("slow", &input).await;
        app.shut_down().await;
        whole
    };
    let total = whole.len() as i64;
    for old_up_to in [total / 2, total] {
        as_old_rows(&db.url, old_up_to).await;
        let app = TestApp::start(&db.url).await;
        assert!(app.run_to_end("slow", &input).await == whole, "the replay of a log old up to {old_up_to}");
        for after in [1, old_up_to - 1, old_up_to, old_up_to + 1].into_iter().filter(|seq| (1..total).contains(seq)) {
            let id = whole[after as usize - 1].id.clone().expect("id");
            let rest = read_events(app.post_run_with("slow", &input, &[("last-event-id", &id)]).await, None).await;
            assert!(rest == whole[after as usize..], "after seq {after} of a log old up to {old_up_to}");
        }
        assert_eq!(app.counts().await.events, total, "the stored events are counted from both tables");
        app.shut_down().await;
    }
}
on_both_stores!(a_log_from_before_segments_is_still_read);
