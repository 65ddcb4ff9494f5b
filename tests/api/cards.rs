//! Cards (§3): an agent that declares a card schema and answers JSON matching it sends
//! `CUSTOM gateway.card {"turn", "card"}` — the turn's before the run ends, a delegated
//! step's when the step finishes; any other answer sends none.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_json_answer_matching_the_card_schema_is_sent_as_a_card() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    let plan = r#"{"title": "Launch plan", "steps": 3}"#;
    let events = app.run_to_end("carder", &first_run("th-card", "run-1", plan)).await;
    let turn = events[0].id.as_deref().and_then(|id| id.split('.').next()).expect("id").to_string();
    let n = events.len();
    assert_eq!(kinds(&events)[n - 2..], ["CUSTOM", "RUN_FINISHED"], "the card comes before the run ends");
    assert_eq!(events[n - 2].data["name"], "gateway.card");
    assert_eq!(events[n - 2].data["value"], json!({ "turn": turn, "card": { "title": "Launch plan", "steps": 3 } }));
    let (ok, report) = agui_check(&app.run_url("carder"), &first_run("th-card", "run-1", plan)).await;
    assert!(ok, "{report}");

    // Not JSON, or JSON the schema refuses: no card.
    for answer in ["just words", r#"{"title": "No steps"}"#] {
        let events = app.run_to_end("carder", &first_run(&unique("th-nocard"), "run-1", answer)).await;
        assert!(!events.iter().any(|e| e.data["name"] == "gateway.card"), "{answer}: {:?}", kinds(&events));
    }

    // A delegated step's card comes as its step finishes, named by the child turn.
    let events = app.run_to_end("cardboss", &first_run("th-card-step", "run-1", plan)).await;
    let card = events.iter().position(|e| e.data["name"] == "gateway.card").expect("a card");
    let child = events[card].data["value"]["turn"].clone();
    assert_eq!(events[card + 1].kind(), "STEP_FINISHED");
    assert_eq!(events[card + 1].data["stepName"], child);
}
