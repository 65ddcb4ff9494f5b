//! Exactly-once tool effects (docs/agents.md): every tool call carries an idempotency key
//! derived from its turn and call, the same when another instance re-issues a call whose
//! result was never recorded, so a tool can make its effect once.

use std::collections::BTreeSet;

use serde_json::json;

use crate::fakes::model::ScriptedModel;
use crate::fakes::tools::start_keyed_tool;
use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;

/// The instance running an LLM turn is killed (SIGKILL) inside a slow tool call; another
/// instance takes the turn over (PostgreSQL) and re-issues the call under the same key: the
/// tool saw one key, at most twice, and acted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_cut_by_a_crash_is_reissued_under_its_key_and_acts_once() {
    let model = ScriptedModel::planned(vec![("charge_card", json!({"amount": 42}))], "Charged.").await;
    // The first call never answers, so A is killed in the middle of it.
    let (tool_url, keys) = start_keyed_tool("charged 42 EUR", Some(1)).await;
    let tool = format!("[[agents.tools]]\nname = \"charge_card\"\nurl = \"{tool_url}\"\ntimeout_secs = 60\n");
    let mut two = TwoInstances::start("assistant", &model.agents_table(&tool)).await;
    let input = first_run("th-once", "run-1", "charge my card");
    let joined = two
        .kill_a_once(&input, "the tool to receive A's call", || {
            let seen = keys.lock().unwrap_or_else(|p| p.into_inner()).len();
            async move { seen >= 1 }
        })
        .await;
    drop(two);

    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&joined));
    let result = joined.iter().find(|e| e.kind() == "TOOL_CALL_RESULT").expect("the call's result");
    assert_eq!(result.data["content"], "charged 42 EUR");
    let keys = keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!((1..=2).contains(&keys.len()), "at most twice: {keys:?}");
    let key = &keys[0];
    assert!(key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()), "a hex key: {key:?}");
    assert!(keys.iter().all(|k| k == key), "one key for every attempt: {keys:?}");
    // An idempotent tool acts once per new key.
    assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 1, "the tool acted once");
}

/// Two calls of one turn carry different keys, and a call's key does not change when the
/// model is asked again: each call is its own effect.
#[tokio::test]
async fn each_tool_call_carries_its_own_idempotency_key() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let model = ScriptedModel::planned(
            vec![("charge_card", json!({"amount": 1})), ("charge_card", json!({"amount": 2}))],
            "Charged twice.",
        )
        .await;
        let (tool_url, keys) = start_keyed_tool("charged", None).await;
        let db = TestDatabase::new(backend).await;
        let mut config = test_config(&db.url);
        let mut agent = crate::openai::openai_agent(&model.url, &tool_url, "never");
        if let agui_gateway::config::AgentKindConfig::Openai(openai) = &mut agent.kind {
            openai.tools[0].name = "charge_card".into();
            openai.tools[0].parameters = json!({"type": "object"});
        }
        config.agents.push(agent);
        let app = TestApp::start_with(config).await;
        let events = app.run_to_end("assistant", &first_run("th-keys", "run-1", "charge twice")).await;
        assert_eq!(events.last().expect("end").data["outcome"]["type"], "success", "{:?}", kinds(&events));
        let keys = keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys.iter().all(|k| k.len() == 64), "{keys:?}");
        assert_ne!(keys[0], keys[1], "two calls, two keys");
    }
}
