//! A deploy is invisible (SPEC §4.6): an answer cut by a crash is given again whole and the
//! thread holds it once, never the fragment — in the messages route, in what the next model
//! call is given, and in the view of a client that followed the takeover live.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fakes::model::{openai_toml, slow_text, slowly, ScriptedModel};
use crate::fakes::two_instances::TwoInstances;
use crate::helpers::*;

/// The messages the official client held at the end of an [`agui_check`] (its `messages` line):
/// each one's role and words.
pub(crate) fn client_messages(report: &str) -> Vec<Value> {
    let line = report.lines().find_map(|line| line.trim_start().strip_prefix("messages ")).expect("a messages line");
    serde_json::from_str(line).expect("the messages as JSON")
}

/// The assistant messages' words in `messages` (a conversation or the client's view).
fn answers(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .filter(|c| !c.is_empty())
        .collect()
}

/// A slow answer cut by SIGKILL on A is given again whole by B: the thread, the next model call
/// and the live client's view each hold it once; the log keeps the fragment.
#[tokio::test]
async fn a_crash_mid_answer_leaves_the_whole_answer_once_never_the_fragment() {
    const WORDS: usize = 40;
    let model = ScriptedModel::start(|_, _| slowly(WORDS, Duration::from_millis(50))).await;
    let agents = format!("[[agents]]\n{}", openai_toml("chat", &model.url, ""));
    let mut two = TwoInstances::start("chat", &agents).await;
    let input = first_run("th-frag", "run-1", "tell me a story");
    let mut on_a = two.open_on_a(&input).await;
    on_a.until("five words on A", |e| e.data["delta"] == "w5 ").await;
    two.kill_a();
    let head = on_a.rest().await;
    let joined = two.follow_on_b(&input, head).await;
    let kinds = kinds(&joined);
    assert_eq!(joined.last().expect("end").data["outcome"]["type"], "success", "{kinds:?}");
    assert_eq!(model.calls(), 2, "the model was asked again on B");
    // The live view: the cut message closed, then the conversation without it, then the answer.
    let snapshot = joined.iter().position(|e| e.kind() == "MESSAGES_SNAPSHOT").expect("a snapshot after the cut");
    let starts: Vec<usize> =
        joined.iter().enumerate().filter(|(_, e)| e.kind() == "TEXT_MESSAGE_START").map(|(i, _)| i).collect();
    assert_eq!(starts.len(), 2, "the fragment and the whole answer: {kinds:?}");
    assert!(starts[0] < snapshot && snapshot < starts[1], "{kinds:?}");
    assert_eq!(answers(joined[snapshot].data["messages"].as_array().expect("messages")), Vec::<String>::new());
    // The thread holds the whole answer once.
    let url = format!("http://{}/v1/threads/th-frag/messages", two.b.address);
    let messages: Value = reqwest::get(url).await.expect("get").json().await.expect("JSON");
    let whole = slow_text(WORDS);
    assert_eq!(answers(messages["messages"].as_array().expect("messages")), vec![whole.clone()]);
    // The official client, following the run from its start on B, ends holding it once.
    let (ok, report) = agui_check(&two.run_url(&two.b), &input).await;
    assert!(ok, "{report}");
    assert_eq!(answers(&client_messages(&report)), vec![whole.clone()], "{report}");
    // The next model call is given the whole answer once.
    let mut next = messages["messages"].as_array().expect("messages").clone();
    next.push(json!({"id": "run-2-user", "role": "user", "content": "and then?"}));
    let input = json!({"threadId": "th-frag", "runId": "run-2", "protocolVersion": "1.0", "state": {},
                       "messages": next, "tools": [], "context": []});
    let second = read_events(two.post(&two.b, &input, None).await, None).await;
    assert_eq!(second.last().expect("end").data["outcome"]["type"], "success");
    let asked = model.requests().pop().expect("the third call");
    let said: Vec<&str> = asked["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(said, vec![whole.as_str()], "the model is given the answer once, whole");
}
