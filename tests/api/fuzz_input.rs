//! A bounded fuzz of the run route's body and of the resume, against the real server on both
//! stores: generated bodies (run inputs and resumes aimed at a real open interrupt, with
//! entries named twice, unknown ids, wrong statuses and payloads, then bytes flipped, cut or
//! spliced) are posted one after another. Every one must be answered within seconds (no
//! hang, no spin), never with a 5xx or a `RUN_ERROR internal`, and a refusal must carry the
//! JSON error body. The generator has a fixed seed, so a failure is the same on every run, and
//! the whole fuzz is held to a few seconds a store.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::*;
use crate::on_both_stores;

/// How long one request may take before it counts as a hang.
const ANSWER_WITHIN: Duration = Duration::from_secs(8);
/// How long the fuzz runs on each store, and at most how many bodies it posts.
const BUDGET: Duration = Duration::from_secs(5);
const ROUNDS: usize = 400;

/// xorshift64: small, fast, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

/// The waiting turn the resumes aim at: its thread and its open interrupt.
struct Target {
    thread: String,
    interrupt: String,
}

async fn open_target(app: &TestApp) -> Target {
    let thread = unique("th-fuzz");
    let events = app.run_to_end("approver", &first_run(&thread, "run-1", "please do it")).await;
    let end = events.last().expect("events");
    let interrupt = end.data["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt").to_string();
    Target { thread, interrupt }
}

async fn still_open(app: &TestApp, target: &Target) -> bool {
    let Some(thread) = app.store.find_thread("default", &target.thread).await.expect("query") else { return false };
    let Some(turn) = app.store.thread_turns(thread.pk).await.expect("turns").pop() else { return false };
    let interrupts = app.store.turn_interrupts(turn.pk).await.expect("interrupts");
    interrupts.iter().any(|i| i.id == target.interrupt && i.status.as_str() == "open")
}

/// One resume entry: mostly well typed and aimed at the open interrupt (so the engine's checks
/// and decisions are what is fuzzed), sometimes not.
fn entry(rng: &mut Rng, target: &Target) -> Value {
    let id = match rng.below(20) {
        0..=13 => json!(target.interrupt),
        14..=16 => json!("int_made_up"),
        17 => json!(""),
        18 => json!("x".repeat(300)),
        _ => rng.pick(&[json!(7), Value::Null]),
    };
    let status = match rng.below(20) {
        0..=11 => json!("resolved"),
        12..=18 => json!("cancelled"),
        _ => rng.pick(&[json!("maybe"), json!(1)]),
    };
    let payload = rng.pick(&[
        json!({"approved": true}),
        json!({"approved": false, "comment": "no"}),
        json!({"approved": "yes"}),
        json!({"approved": true, "editedArgs": {"to": "x@example.com"}}),
        json!({"approved": true, "unknown": 1}),
        json!([[[[[[]]]]]]),
        json!("\u{0}"),
        Value::Null,
    ]);
    let mut entry = json!({"interruptId": id, "status": status});
    if rng.below(4) > 0 {
        entry["payload"] = payload;
    }
    entry
}

/// One generated body: a resume of the target (sometimes naming an entry twice), a new
/// message on its thread or on a new one, or a body of the wrong shape.
fn body(rng: &mut Rng, target: &Target, round: usize) -> Vec<u8> {
    let thread = match rng.below(10) {
        0..=6 => json!(target.thread),
        7 | 8 => json!(unique("th-fuzz-new")),
        _ => json!("bad id!"),
    };
    let run = json!(format!("fuzz-{round}"));
    let mut input = json!({"threadId": thread, "runId": run, "protocolVersion": "1.0", "messages": []});
    match rng.below(8) {
        0..=4 => {
            let mut entries: Vec<Value> = (0..rng.below(3) + 1).map(|_| entry(rng, target)).collect();
            if rng.below(2) == 0 {
                let again = entries[rng.below(entries.len())].clone();
                entries.insert(rng.below(entries.len() + 1), again);
            }
            input["resume"] = json!(entries);
        }
        5 => input["messages"] = json!([{"id": "u1", "role": "user", "content": "please do it"}]),
        6 => input["resume"] = rng.pick(&[json!([]), json!({}), json!("resume"), json!([null]), json!([[]])]),
        _ => {
            input["messages"] = rng.pick(&[json!(null), json!([{"role": "user"}]), json!([{"id": 1, "role": "tool"}])])
        }
    }
    if rng.below(4) == 0 {
        input["protocolVersion"] = rng.pick(&[json!("0.9"), json!("x"), json!(null), json!(2)]);
    }
    let mut bytes = input.to_string().into_bytes();
    if rng.below(5) == 0 {
        let splices: [&[u8]; 6] = [b"null", b"[]", b"{}", b"1e999", b"\"\\ud800\"", b"[[[[[[[[]]]]]]]]"];
        for _ in 0..rng.below(3) + 1 {
            let at = rng.below(bytes.len() + 1);
            match rng.below(3) {
                0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
                1 => bytes.truncate(at),
                _ => {
                    let splice = splices[rng.below(splices.len())];
                    bytes.splice(at..at, splice.iter().copied());
                }
            }
        }
    }
    bytes
}

/// Posts `body` and reads the whole answer: its status, and the stream's last event or the
/// error body's code. Panics on a hang.
async fn answer(app: &TestApp, body: Vec<u8>) -> (u16, String) {
    let shown = String::from_utf8_lossy(&body).chars().take(300).collect::<String>();
    let request = app
        .client
        .post(app.run_url("approver"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body)
        .send();
    let read = async {
        let response = request.await.expect("sent");
        let status = response.status().as_u16();
        if status == 200 {
            let events = read_events(response, None).await;
            let last = events.last().map(|e| (e.kind().to_string(), e.data["code"].as_str().unwrap_or("").to_string()));
            let (kind, code) = last.unwrap_or_default();
            (status, format!("{kind} {code}"))
        } else {
            let error: Value = response.json().await.unwrap_or(Value::Null);
            (status, error["error"]["code"].as_str().unwrap_or("no JSON error body").to_string())
        }
    };
    tokio::time::timeout(ANSWER_WITHIN, read)
        .await
        .unwrap_or_else(|_| panic!("no answer within {ANSWER_WITHIN:?}: {shown}"))
}

async fn generated_bodies_and_resumes_get_an_answer_never_a_hang_or_a_fault(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start(&db.url).await;
    let mut target = open_target(&app).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let started = Instant::now();
    let mut rounds = 0;
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    while rounds < ROUNDS && started.elapsed() < BUDGET {
        let body = body(&mut rng, &target, rounds);
        let shown = String::from_utf8_lossy(&body).chars().take(300).collect::<String>();
        let (status, what) = answer(&app, body).await;
        *seen.entry(format!("{status} {what}")).or_default() += 1;
        assert!(status < 500, "{status} {what}: {shown}");
        assert!(!what.contains("internal"), "{status} {what}: {shown}");
        if status == 200 {
            assert!(what.starts_with("RUN_FINISHED") || what.starts_with("RUN_ERROR"), "{what}: {shown}");
        } else {
            assert_ne!(what, "no JSON error body", "{status}: {shown}");
        }
        // A resume that decided the interrupt moves on to a new waiting turn.
        if !still_open(&app, &target).await {
            target = open_target(&app).await;
        }
        rounds += 1;
    }
    println!("{rounds} bodies in {:?}: {seen:?}", started.elapsed());
    assert!(rounds >= 20, "only {rounds} bodies in {BUDGET:?}");
}
on_both_stores!(generated_bodies_and_resumes_get_an_answer_never_a_hang_or_a_fault);
