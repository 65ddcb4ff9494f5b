//! Nothing internal shown (the `RUN_ERROR` codes of docs/api.md): a turn the database fails mid-way
//! ends with a `RUN_ERROR` whose code and message are written for the client; the database's
//! own words are in the gateway's log, with the turn's id, and never in the stream.

use agui_gateway::config::Config;

use crate::helpers::*;
use crate::on_both_stores;

/// `reader` says a word, waits while the test breaks the database, then reads the board (to
/// pin a note), which the broken database refuses.
const READER: &str = r#"
[[agents]]
name = "reader"
kind = "script"
steps = [ { say = "reading" }, { wait_ms = 1500 }, { note = "after the break" } ]
"#;

/// The test configuration with [`READER`] added.
fn config_with_reader(database_url: &str) -> Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!("{TEST_CONFIG}\n{READER}")).expect("write config");
    let mut config = Config::load(Some(&path), std::iter::empty()).expect("the test config loads");
    config.database.url = database_url.to_string();
    config
}

/// Words of the database's that must never reach a client.
const DATABASE_WORDS: [&str; 8] =
    ["notes", "relation", "table", "database", "sqlx", "sqlite", "postgres", "error returned"];

async fn a_database_failure_mid_turn_reaches_the_client_as_words_of_the_gateway_and_its_cause_the_log(
    backend: Backend,
) {
    let logs = crate::test_log::captured();
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(config_with_reader(&db.url)).await;
    let input = first_run("th-broken", "run-1", "read the board");
    let stream = open_until_waiting(&app, "reader", &input).await;
    // While the turn waits, the board's table goes away (as a migration gone wrong would).
    execute_sql(&db.url, "ALTER TABLE notes RENAME TO notes_gone").await;
    let events = stream.rest().await;

    let last = events.last().expect("events");
    assert_eq!(last.kind(), "RUN_ERROR", "{:?}", kinds(&events));
    assert_eq!(last.data["code"], "failed");
    let message = last.data["message"].as_str().expect("a message");
    assert_eq!(message, "the board could not be read");
    // Nothing of the event says the database's words (the board's own `notes` key in the
    // run's STATE_SNAPSHOT is the protocol's, not the database's).
    let shown = last.data.to_string().to_lowercase();
    for word in DATABASE_WORDS {
        assert!(!shown.contains(word), "the RUN_ERROR shows the database's word '{word}': {shown}");
    }

    // The cause is in the log, named with the turn.
    let turn = last.id.as_deref().and_then(|id| id.split('.').next()).expect("the turn's id").to_string();
    wait_until(PATIENCE, "the cause in the log", || async {
        let logged = String::from_utf8_lossy(&logs.lock().expect("the log")).to_string();
        logged.lines().any(|line| line.contains(&turn) && line.contains("notes") && line.contains("internal error"))
    })
    .await;

    // And the official client takes the stream as a well-formed failed run.
    let (url, server) = serve_recorded_stream(sse_body(&events)).await;
    let (passed, report) = agui_check(&url, &input).await;
    server.abort();
    assert!(passed, "the official client refused the stream:\n{report}");
}
on_both_stores!(a_database_failure_mid_turn_reaches_the_client_as_words_of_the_gateway_and_its_cause_the_log);
