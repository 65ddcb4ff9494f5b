//! The scenarios of issue 3, one module each, and what they share: sizes, repetition and time
//! bounds, the warm-up run, and reading a run to its end.
//!
//! Every scenario is bounded: a fixed number of runs of a fixed size, each under
//! [`Settings::timeout`], against loopback only.

pub mod binary;
pub mod burst;
pub mod chat;
pub mod fan_in;
pub mod handshake;
pub mod history;
pub mod idle;
pub mod model;
pub mod raw;
pub mod replay;
pub mod scale_out;
pub mod soak;
pub mod ticking;
pub mod upstream;
pub mod waiting;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::bail;
use crate::database::Database;
use crate::error::{Context, Error, Result};
use crate::procfs::CpuUse;
use crate::report::{Report, Unit};
use crate::sse::{self, ReadOptions, Received};
use crate::target::{Target, WARMUP};

/// How big each scenario is.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Characters in each content delta (≈ 300-byte stored events at 200).
    pub bytes: usize,
    pub burst_events: u64,
    pub fan_in_turns: u64,
    pub fan_in_events: u64,
    pub tick_streams: u64,
    pub tick_rate: u64,
    pub tick_secs: u64,
    pub idle_streams: u64,
    pub replay_events: u64,
    pub raw_secs: f64,
    pub copilotkit_burst_events: u64,
    /// New connections per repetition of the handshake scenario.
    pub handshakes: u64,
    /// Concurrent chats of the chat scenario, tokens in each answer, tokens per second each.
    pub chats: u64,
    pub chat_tokens: u64,
    pub token_rate: u64,
    /// Waiting turns (a stream each) over plain HTTP, and the larger count over HTTP/2.
    pub waiting_turns: u64,
    pub waiting_turns_max: u64,
    /// The window the lease writes are counted over.
    pub waiting_window_secs: u64,
    /// The upstream scenario: events in its as-fast-as-sent run, and deltas in its paced run
    /// at `upstream_rate` per second.
    pub upstream_events: u64,
    pub upstream_paced_events: u64,
    pub upstream_rate: u64,
    /// The history scenario: events written before the gateway starts, over this many threads,
    /// and the fresh runs whose start is timed.
    pub history_events: u64,
    pub history_threads: u64,
    pub history_starts: u64,
    /// The soak scenario: how long, new chats per second, tokens per answer (at `token_rate`),
    /// how often streams are moved and an instance is killed, how often RSS is sampled.
    pub soak_secs: u64,
    pub soak_chats_per_sec: f64,
    pub soak_tokens: u64,
    pub soak_reconnect_secs: u64,
    pub soak_kill_secs: u64,
    pub soak_sample_secs: u64,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub sizes: Sizes,
    pub repeats: usize,
    /// Upper bound of one repetition.
    pub timeout: Duration,
    /// Smoke mode: parse and check every event, check what was stored.
    pub strict: bool,
    /// A repetition during which other work on the machine used more than this % of one core
    /// is measured again…
    pub noisy_above: f64,
    /// …at most this many times per scenario.
    pub retries: usize,
}

impl Settings {
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions { strict: self.strict, ..ReadOptions::default() }
    }
}

/// Counts a scenario's repetitions, measuring one again when other work on the (shared)
/// machine disturbed it, within the retry budget.
pub struct Repetitions {
    done: usize,
    wanted: usize,
    retries_left: usize,
    noisy_above: f64,
}

impl Repetitions {
    pub fn new(settings: &Settings) -> Repetitions {
        Repetitions {
            done: 0,
            wanted: settings.repeats,
            retries_left: settings.retries,
            noisy_above: settings.noisy_above,
        }
    }

    /// The number of the next repetition, while more are wanted.
    pub fn next(&self) -> Option<usize> {
        (self.done < self.wanted).then_some(self.done + 1)
    }

    /// Whether to keep the repetition just measured, given the CPU other work used meanwhile
    /// (% of one core). A disturbed one is dropped (and measured again) while retries last.
    pub fn keep(&mut self, other_cpu: f64) -> bool {
        if other_cpu > self.noisy_above && self.retries_left > 0 {
            self.retries_left -= 1;
            eprintln!("    (other work used {other_cpu:.0} % of a core meanwhile: measured again)");
            return false;
        }
        self.done += 1;
        true
    }
}

/// A thread id no earlier run used.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// Posts a run and reads it to its terminal event, within `timeout`.
pub async fn run_to_end(
    client: &crate::http::Client,
    url: &str,
    body: String,
    last_event_id: Option<&str>,
    options: ReadOptions,
    timeout: Duration,
) -> Result<Received> {
    let work = async {
        let response = sse::open(client, url, body, last_event_id).await?;
        let mut received = Received::default();
        sse::read(response, &mut received, options).await?;
        Ok::<_, Error>(received)
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| Error::msg(format!("a run at {url} took longer than {timeout:?}")))?
}

/// One small burst, so connections, caches and JITs are warm before anything is measured.
/// Returns the events received.
pub async fn warm_up(client: &crate::http::Client, target: &Target, settings: &Settings) -> Result<u64> {
    let body = sse::run_body(&unique("warmup"), "run-1", &WARMUP.peer_props());
    let received = run_to_end(client, &target.warmup_url, body, None, settings.read_options(), settings.timeout)
        .await
        .with_context(|| format!("warm-up run on {}", target.name))?;
    received.expect_finished(&format!("warm-up run on {}", target.name))?;
    Ok(received.events)
}

/// In smoke, fails unless the events table holds exactly the `stored` events the scenario
/// streamed (`what` names the scenario and the gateway in the error).
pub async fn check_stored(settings: &Settings, database: &Database, stored: u64, what: &str) -> Result<()> {
    if !settings.strict {
        return Ok(());
    }
    let in_table = database.event_count().await?;
    if in_table != stored as i64 {
        bail!("{what}: the events table holds {in_table} events, {stored} were streamed");
    }
    Ok(())
}

/// A part of the CPU split: key suffix, label, and how to read it.
type CpuPart = (&'static str, &'static str, fn(&CpuUse) -> f64);

/// Adds the CPU split of a scenario's runs (server, PostgreSQL, this tool, other work).
/// Each instance's CPU per repetition, when a scenario ran on several (scale-out).
pub fn add_instance_cpu(report: &mut Report, key: &str, label: &str, per_instance: Vec<Vec<f64>>, targets: &[Target]) {
    if targets.len() < 2 {
        return;
    }
    for (n, (samples, target)) in per_instance.into_iter().zip(targets).enumerate() {
        report.add(
            format!("{key}/cpu/instance{n}"),
            format!("{label}: instance {n} CPU ({})", target.name),
            Unit::Core,
            samples,
            None,
        );
    }
}

pub fn add_cpu(report: &mut Report, key: &str, label: &str, uses: &[CpuUse]) {
    let parts: [CpuPart; 4] = [
        ("server", "server CPU", |u| u.server),
        ("postgres", "PostgreSQL CPU", |u| u.postgres),
        ("tool", "load tool CPU", |u| u.tool),
        ("other", "other CPU on the machine", |u| u.other),
    ];
    for (part, name, value) in parts {
        report.add(
            format!("{key}/cpu/{part}"),
            format!("{label}: {name}"),
            Unit::Core,
            uses.iter().map(value).collect(),
            None,
        );
    }
}

/// The raw-limit figure a gateway throughput is compared with, by target name.
pub fn raw_reference(target: &Target, figure: &str) -> Option<String> {
    let store = target.name.strip_prefix("gateway/")?.split('/').next()?;
    Some(format!("{store}/raw/{figure}"))
}

/// Formats a count with thousands separators for labels.
pub fn count(n: u64) -> String {
    crate::report::group_thousands(n)
}
