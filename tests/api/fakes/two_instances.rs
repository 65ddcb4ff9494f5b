//! [`TwoInstances`]: the set-up of every kill-and-take-over scenario (SPEC §4.6). Two gateway
//! processes, A and B, on one fresh PostgreSQL database with short leases; a run is opened on
//! A, A is killed (SIGKILL), the run is followed on B from the last event A delivered, and the
//! joined stream must have no gap and no duplicate.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::gateway_process::{self, Instance, Spawn};
use crate::helpers::{kinds, read_events, wait_until, Backend, EventStream, SseEvent, TestDatabase};

/// The leases of a takeover scenario: short, so B takes a turn over within seconds.
const SHORT_LEASES: &str = "[turns]\nlease_ms = 2000\nheartbeat_ms = 400\nsweep_ms = 300\n\n";

/// How long B has to finish a turn it took over.
const TAKEOVER_PATIENCE: Duration = Duration::from_secs(40);

/// Two gateway processes on one database, serving the agent `agent`.
pub struct TwoInstances {
    pub a: Instance,
    pub b: Instance,
    /// Every line either instance logged, in order.
    pub logs: Arc<Mutex<Vec<String>>>,
    _db: TestDatabase,
    agent: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl TwoInstances {
    /// Starts A and B with `agents` (the config's `[[agents]]` tables) after the short leases;
    /// runs go to `agent`.
    // One store: two instances share one database, which is PostgreSQL's part.
    pub async fn start(agent: &str, agents: &str) -> TwoInstances {
        let db = TestDatabase::new(Backend::Postgres).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config: PathBuf = dir.path().join("gateway.toml");
        std::fs::write(&config, format!("{SHORT_LEASES}{agents}")).expect("config");
        // Migrated first, so the two do not race to create the schema.
        gateway_process::migrate(&db.url);
        let logs = Arc::new(Mutex::new(Vec::new()));
        let a = Spawn::new(&config, &db.url).start(logs.clone());
        let b = Spawn::new(&config, &db.url).start(logs.clone());
        TwoInstances {
            a,
            b,
            logs,
            _db: db,
            agent: agent.to_string(),
            client: crate::tls_support::http_client().build().expect("client"),
            _dir: dir,
        }
    }

    /// The agent's run URL on `instance`.
    pub fn run_url(&self, instance: &Instance) -> String {
        format!("http://{}/v1/agui/agents/{}", instance.address, self.agent)
    }

    /// Posts `input` to `instance`, resuming after `last_event_id` when given.
    pub async fn post(&self, instance: &Instance, input: &Value, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request =
            self.client.post(self.run_url(instance)).header("content-type", "application/json").body(input.to_string());
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send().await.expect("request sent")
    }

    /// Opens the run on A.
    pub async fn open_on_a(&self, input: &Value) -> EventStream {
        EventStream::new(self.post(&self.a, input, None).await)
    }

    /// Kills A with SIGKILL and waits until it is gone.
    pub fn kill_a(&mut self) {
        self.a.child.kill().expect("SIGKILL");
        let _ = self.a.child.wait();
    }

    /// The whole scenario: opens the run on A and reads it meanwhile; once `ready` holds (A is
    /// where the test wants it cut, within 20 s), kills A and follows the run on B
    /// ([`TwoInstances::follow_on_b`]).
    pub async fn kill_a_once<F, Fut>(&mut self, input: &Value, what: &str, ready: F) -> Vec<SseEvent>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let reader = tokio::spawn(self.open_on_a(input).await.rest());
        wait_until(Duration::from_secs(20), what, ready).await;
        self.kill_a();
        let head = reader.await.expect("reader");
        self.follow_on_b(input, head).await
    }

    /// Follows the run on B from the last event of `head` (what A delivered; when A died before
    /// sending anything, B replays the run whole), and returns the joined stream, checked to have
    /// no gap and no duplicate.
    pub async fn follow_on_b(&self, input: &Value, head: Vec<SseEvent>) -> Vec<SseEvent> {
        let last_id = head.last().and_then(|e| e.id.clone());
        let tail = tokio::time::timeout(
            TAKEOVER_PATIENCE,
            read_events(self.post(&self.b, input, last_id.as_deref()).await, None),
        )
        .await
        .expect("B finished the turn");
        let mut joined = head;
        joined.extend(tail);
        assert_no_gap(&joined);
        joined
    }
}

/// The events' sequence numbers (the last part of each id) are 1, 2, 3, …: no gap, no duplicate.
pub fn assert_no_gap(events: &[SseEvent]) {
    let seqs: Vec<i64> = events.iter().filter_map(|e| e.id.as_deref()?.rsplit('.').next()?.parse().ok()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no gap, no duplicate: {:?}", kinds(events));
}
