//! Scenario 3, *ticking*: S streams, each its own turn emitting R `gateway.tick` events per
//! second (the `tick` step). Each tick carries the microsecond it was made, before it was
//! appended, so its arrival time gives append→receive latency (p50/p99/p999), durable commit
//! included. Streams start spread over one second; the measurement window opens one second
//! after every stream has received its first tick and lasts `tick_secs`; the server's CPU is
//! read from `/proc/<pid>/stat` over the same window, and the gateway's phase histograms
//! (`GET /metrics`, see `crate::metrics`) before and after it: where the time goes.
//!
//! [`run_routed`] spreads the streams over several instances of one database (the scale-out
//! scenario): each run starts on one instance and, with [`Follow::Reconnect`], is followed on
//! another after its first event (`Last-Event-ID`), so its ticks reach the client through that
//! instance.
//!
//! On PostgreSQL the window also reads the database's commits and the `events` table's scans
//! (`crate::pgstats`) and gives PostgreSQL's CPU per 1,000 events: the CPU seconds of every
//! postgres process over the window ÷ the events received in it × 1,000 (the server is shared:
//! other databases' work on it counts too).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{add_cpu, add_instance_cpu, count, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::error::{Context, Error, Result};
use crate::pgstats::{PgCounters, PgDelta};
use crate::procfs::{CpuSnapshot, CpuUse};
use crate::report::{Report, Unit};
use crate::sse::{self, Received};
use crate::stats::percentile;
use crate::target::{Script, Target};

const STAGE_SENT: u8 = 1;
const STAGE_OPEN: u8 = 2;
const STAGE_TICKING: u8 = 3;

/// Seconds of ticks beyond the window: the spread start, the warm second, and slack (less in
/// smoke runs, whose few streams all start within the spread second).
const EXTRA_SECS: u64 = 6;
const EXTRA_SECS_SMOKE: u64 = 3;

pub fn script(settings: &Settings) -> Script {
    let sizes = &settings.sizes;
    let extra = if settings.strict { EXTRA_SECS_SMOKE } else { EXTRA_SECS };
    Script::Tick { ticks: sizes.tick_rate * (sizes.tick_secs + extra), every_ms: 1000 / sizes.tick_rate.max(1) }
}

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

struct Window {
    from_us: u64,
    to_us: u64,
    /// The servers' CPU as one (`server` is their sum).
    cpu: CpuUse,
    /// Each server's CPU, in the order of the targets (% of one core).
    each: Vec<f64>,
    phases: Vec<crate::metrics::Phase>,
    /// PostgreSQL's counters over the window (a PostgreSQL gateway).
    pg: Option<PgDelta>,
}

/// How a stream is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// On the instance the run was started on, on the same connection.
    Direct,
    /// The run is started on instance `i % n`, its first event read and the connection
    /// dropped; then it is requested again with `Last-Event-ID` on instance `(i + offset) % n`
    /// (offset 0: the same instance, for comparison).
    Reconnect { offset: usize },
}

/// Runs the scenario; returns the events the target should have stored.
pub async fn run(target: &Target, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let stored = warm_up(&client, target, settings).await?;
    let key = format!("{}/ticking", target.name);
    let label = format!(
        "ticking {} streams × {}/s, {}",
        count(settings.sizes.tick_streams),
        settings.sizes.tick_rate,
        target.name
    );
    let routed = run_routed(std::slice::from_ref(target), Follow::Direct, &key, &label, settings, report).await?;
    Ok(stored + routed)
}

/// The scenario over `targets` (the warm-up is the caller's); figures go under `key`.
/// Returns the events streamed.
pub async fn run_routed(
    targets: &[Target],
    follow: Follow,
    key: &str,
    label: &str,
    settings: &Settings,
    report: &mut Report,
) -> Result<u64> {
    let Some(target) = targets.first() else { bail!("ticking: no target") };
    let Script::Tick { ticks, .. } = script(settings) else {
        bail!("ticking: not a tick script");
    };
    // One client per target for the whole scenario: its connections serve every repetition.
    let clients: Vec<crate::http::Client> = targets.iter().map(Target::client).collect();
    let mut stored = 0;
    let mut figures = Figures::new(targets.len());
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let started = start_streams(targets, &clients, follow, settings);
        let window = wait_and_measure(targets, &started, settings).await?;
        let arrived = collect(started.tasks, &window, ticks, &target.name).await?;
        stored += arrived.events;
        let measured = Measured::of(arrived, window);
        measured.print(key, targets, repetition, settings);
        if repetitions.keep(measured.window.cpu.other) {
            figures.push(measured);
        }
    }
    figures.add_to(report, key, label, targets);
    Ok(stored)
}

/// A repetition's streams as they run: each stream's task, and how far they have got.
struct Started {
    tasks: Vec<tokio::task::JoinHandle<Result<Received>>>,
    /// Streams that have their first tick (or failed).
    first_ticks: Arc<AtomicU64>,
    /// Where each stream stands, for the report when some never start.
    stages: Arc<Vec<AtomicU8>>,
}

/// Starts `tick_streams` streams spread over one second, over `targets` (and their `clients`)
/// in turn.
fn start_streams(targets: &[Target], clients: &[crate::http::Client], follow: Follow, settings: &Settings) -> Started {
    let streams = settings.sizes.tick_streams;
    let props = Arc::new(script(settings).peer_props());
    let first_ticks = Arc::new(AtomicU64::new(0));
    let stages: Arc<Vec<AtomicU8>> = Arc::new((0..streams).map(|_| AtomicU8::new(0)).collect());
    let stagger = Duration::from_secs(1) / streams.max(1) as u32;
    let n = targets.len();
    let tasks = (0..streams)
        .map(|i| {
            let (start_at, follow_at) = match follow {
                Follow::Direct => (i as usize % n, None),
                Follow::Reconnect { offset } => (i as usize % n, Some((i as usize + offset) % n)),
            };
            let stream = Stream {
                index: i as usize,
                start_on: (clients[start_at].clone(), targets[start_at].run_url.clone()),
                follow_on: follow_at.map(|j| (clients[j].clone(), targets[j].run_url.clone())),
                body: sse::run_body(&unique("tick"), "run-1", &props),
                options: sse::ReadOptions { ticks: true, ..settings.read_options() },
                first_ticks: first_ticks.clone(),
                stages: stages.clone(),
            };
            let timeout = settings.timeout;
            tokio::spawn(stream.read(stagger * i as u32, timeout))
        })
        .collect();
    Started { tasks, first_ticks, stages }
}

/// One ticking stream: where it starts and (with [`Follow::Reconnect`]) where it is followed.
struct Stream {
    index: usize,
    start_on: (crate::http::Client, String),
    follow_on: Option<(crate::http::Client, String)>,
    body: String,
    options: sse::ReadOptions,
    first_ticks: Arc<AtomicU64>,
    stages: Arc<Vec<AtomicU8>>,
}

impl Stream {
    /// After `delay`, opens the run and reads it to its end within `timeout`.
    async fn read(self, delay: Duration, timeout: Duration) -> Result<Received> {
        tokio::time::sleep(delay).await;
        // Counted once the first tick arrived, or once the stream failed (so the window does
        // not wait for it and the failure surfaces when the task is joined).
        let mut counted = false;
        let outcome = tokio::time::timeout(timeout, self.read_to_end(&mut counted))
            .await
            .map_err(|_| Error::msg(format!("a ticking stream took over {timeout:?}")))
            .and_then(|r| r);
        if outcome.is_err() && !counted {
            self.first_ticks.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    async fn read_to_end(&self, counted: &mut bool) -> Result<Received> {
        let (options, stage) = (self.options, &self.stages[self.index]);
        stage.store(STAGE_SENT, Ordering::Relaxed);
        let (client, url) = &self.start_on;
        let mut response = sse::open(client, url, self.body.clone(), None).await?;
        let mut received = Received::default();
        if let Some((other, other_url)) = &self.follow_on {
            // Its first event (RUN_STARTED, with an id), then the connection goes.
            let first = sse::ReadOptions { stop_after: Some(1), ..options };
            drop(sse::read(response, &mut received, first).await?);
            let Some(id) = received.first_id.clone() else {
                bail!("a ticking run's first event had no id to resume after");
            };
            response = sse::open(other, other_url, self.body.clone(), Some(&id)).await?;
        }
        stage.store(STAGE_OPEN, Ordering::Relaxed);
        // Read up to the first tick, count it, then read on to the end.
        let start_options = sse::ReadOptions { stop_after_ticks: Some(1), ..options };
        let mut stream = sse::read(response, &mut received, start_options).await?;
        self.first_ticks.fetch_add(1, Ordering::Relaxed);
        *counted = true;
        stage.store(STAGE_TICKING, Ordering::Relaxed);
        if received.terminal.is_none() {
            stream.read(&mut received, options).await?;
        }
        Ok(received)
    }
}

/// The measurement window of a repetition; when it cannot open, says where the streams stand.
async fn wait_and_measure(targets: &[Target], started: &Started, settings: &Settings) -> Result<Window> {
    let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
    let (streams, secs) = (settings.sizes.tick_streams, settings.sizes.tick_secs);
    match measure_window(targets, &pids, &started.first_ticks, streams, secs, settings).await {
        Ok(window) => Ok(window),
        Err(error) => {
            let mut counts = [0usize; 4];
            for stage in started.stages.iter() {
                counts[stage.load(Ordering::Relaxed) as usize] += 1;
            }
            bail!(
                "{error} (streams not yet sent: {}, awaiting response headers: {}, open without a tick: {}, ticking: {})",
                counts[0], counts[1], counts[2], counts[3]
            );
        }
    }
}

/// What a repetition's streams received: the latencies of the ticks inside the window, sorted.
struct Arrived {
    latencies: Vec<u64>,
    ticks: u64,
    events: u64,
}

/// Joins every stream, checks each finished with all its `ticks`, and keeps the latencies of
/// the ticks that arrived inside the window.
async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<Received>>>,
    window: &Window,
    ticks: u64,
    name: &str,
) -> Result<Arrived> {
    let mut arrived = Arrived { latencies: Vec::new(), ticks: 0, events: 0 };
    for task in tasks {
        let received = task.await.context("a ticking client task failed")??;
        received.expect_finished(&format!("ticking on {name}"))?;
        let got = received.ticks.len() as u64;
        if got != ticks {
            bail!("ticking on {name}: a stream got {got} ticks of {ticks}");
        }
        arrived.ticks += got;
        arrived.events += received.events;
        arrived.latencies.extend(
            received
                .ticks
                .iter()
                .filter(|t| t.received_us >= window.from_us && t.received_us < window.to_us)
                .map(|t| t.latency_us),
        );
    }
    if arrived.latencies.is_empty() {
        bail!("ticking on {name}: no tick arrived inside the measurement window");
    }
    arrived.latencies.sort_unstable();
    Ok(arrived)
}

/// One repetition's figures.
struct Measured {
    arrived: Arrived,
    window: Window,
    window_secs: f64,
    /// Ticks per second inside the window.
    rate: f64,
    /// CPU seconds of every postgres process over the window, per 1,000 events in it (ms).
    pg_cpu_per_thousand: f64,
}

impl Measured {
    fn of(arrived: Arrived, window: Window) -> Measured {
        let window_secs = (window.to_us - window.from_us) as f64 / 1e6;
        let in_window = arrived.latencies.len() as f64;
        let rate = in_window / window_secs;
        let pg_cpu_per_thousand = window.cpu.postgres / 100.0 * window_secs / in_window * 1e6;
        Measured { arrived, window, window_secs, rate, pg_cpu_per_thousand }
    }

    /// A latency quantile, in ms.
    fn ms(&self, q: f64) -> f64 {
        percentile(&self.arrived.latencies, q).map_or(0.0, |us| us as f64 / 1000.0)
    }

    fn print(&self, key: &str, targets: &[Target], repetition: usize, settings: &Settings) {
        let (window, rate) = (&self.window, self.rate);
        eprintln!(
            "  {} {repetition}/{}: {} ticks ({} in window, {rate:.0}/s): p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms, max {:.2} ms; CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %",
            key,
            settings.repeats,
            self.arrived.ticks,
            self.arrived.latencies.len(),
            self.ms(0.5),
            self.ms(0.99),
            self.ms(0.999),
            self.ms(1.0),
            window.cpu.server,
            window.cpu.postgres,
            window.cpu.tool,
            window.cpu.other
        );
        if targets.len() > 1 {
            let each: Vec<String> = window.each.iter().map(|c| format!("{c:.0} %")).collect();
            eprintln!("    CPU per instance: {}", each.join(", "));
        }
        if targets.iter().any(|t| t.metrics_url.is_some()) {
            eprintln!("    where the time goes: {}", crate::metrics::describe(&window.phases));
        }
        if let Some(pg) = &window.pg {
            eprintln!(
                "    {}; PostgreSQL CPU {:.1} ms per 1,000 events",
                pg.describe(self.window_secs),
                self.pg_cpu_per_thousand
            );
        }
    }
}

/// The kept repetitions' figures, one sample each.
struct Figures {
    /// Latency p50, p99, p999, max (ms), and the rate.
    latency_and_rate: [Vec<f64>; 5],
    /// PostgreSQL: CPU per 1,000 events (ms), commits/s, events index scans per commit.
    pg: [Vec<f64>; 3],
    cpu: Vec<CpuUse>,
    per_instance: Vec<Vec<f64>>,
    breakdowns: Vec<Vec<crate::metrics::Phase>>,
}

impl Figures {
    fn new(instances: usize) -> Figures {
        Figures {
            latency_and_rate: Default::default(),
            pg: Default::default(),
            cpu: Vec::new(),
            per_instance: vec![Vec::new(); instances],
            breakdowns: Vec::new(),
        }
    }

    fn push(&mut self, measured: Measured) {
        let values = [measured.ms(0.5), measured.ms(0.99), measured.ms(0.999), measured.ms(1.0), measured.rate];
        let window = measured.window;
        if let Some(pg) = &window.pg {
            let scans_per_commit = pg.events_idx_scans as f64 / pg.commits.max(1) as f64;
            let commits = pg.commits as f64 / measured.window_secs;
            for (figure, value) in self.pg.iter_mut().zip([measured.pg_cpu_per_thousand, commits, scans_per_commit]) {
                figure.push(value);
            }
        }
        for (all, one) in self.per_instance.iter_mut().zip(&window.each) {
            all.push(*one);
        }
        self.breakdowns.push(window.phases);
        for (figure, value) in self.latency_and_rate.iter_mut().zip(values) {
            figure.push(value);
        }
        self.cpu.push(window.cpu);
    }

    fn add_to(self, report: &mut Report, key: &str, label: &str, targets: &[Target]) {
        let [p50, p99, p999, max, rate] = self.latency_and_rate;
        for (suffix, name, values) in [
            ("p50", "latency p50", p50),
            ("p99", "latency p99", p99),
            ("p999", "latency p999", p999),
            ("max", "latency max", max),
        ] {
            report.add(format!("{key}/{suffix}"), format!("{label}: {name}"), Unit::Ms, values, None);
        }
        let reference = targets.first().and_then(|target| super::raw_reference(target, "b100/c1"));
        report.add(format!("{key}/rate"), format!("{label}: events delivered"), Unit::PerSec, rate, reference);
        add_cpu(report, key, label, &self.cpu);
        add_pg(report, key, label, self.pg);
        add_instance_cpu(report, key, label, self.per_instance, targets);
        if targets.iter().any(|t| t.metrics_url.is_some()) {
            crate::metrics::add_breakdown(report, key, label, &self.breakdowns);
        }
    }
}

/// PostgreSQL's figures (none when the target is not on PostgreSQL).
fn add_pg(report: &mut Report, key: &str, label: &str, pg: [Vec<f64>; 3]) {
    let [pg_cpu, pg_commits, pg_scans] = pg;
    if pg_cpu.is_empty() {
        return;
    }
    report.add(
        format!("{key}/pg/cpu-per-1000"),
        format!("{label}: PostgreSQL CPU per 1,000 events (all postgres processes)"),
        Unit::Ms,
        pg_cpu,
        None,
    );
    report.add(
        format!("{key}/pg/commits"),
        format!("{label}: PostgreSQL commits (pg_stat_database.xact_commit)"),
        Unit::PerSec,
        pg_commits,
        None,
    );
    report.add(
        format!("{key}/pg/events-scans-per-commit"),
        format!("{label}: index scans of events per commit (pg_stat_user_tables)"),
        Unit::Times,
        pg_scans,
        None,
    );
}

/// Waits until every stream has its first tick, then one more second, then measures CPU over
/// `secs` seconds.
async fn measure_window(
    targets: &[Target],
    pids: &[u32],
    first_ticks: &AtomicU64,
    streams: u64,
    secs: u64,
    settings: &Settings,
) -> Result<Window> {
    let deadline = tokio::time::Instant::now() + settings.timeout;
    while first_ticks.load(Ordering::Relaxed) < streams {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "ticking: only {} of {streams} streams started within {:?}",
                first_ticks.load(Ordering::Relaxed),
                settings.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let histograms_before = crate::metrics::scrape_all(targets).await;
    let database = targets.first().and_then(|t| t.database_url.clone());
    let pg_before = match &database {
        Some(url) => Some(PgCounters::read(url).await?),
        None => None,
    };
    let before = CpuSnapshot::take_all(pids)?;
    let from_us = wall_us();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = CpuSnapshot::take_all(pids)?;
    let to_us = wall_us();
    let pg = match (&database, pg_before) {
        (Some(url), Some(before)) => Some(before.until(&PgCounters::read(url).await?)),
        _ => None,
    };
    let histograms_after = crate::metrics::scrape_all(targets).await;
    let phases = crate::metrics::breakdown(&histograms_before, &histograms_after);
    Ok(Window { from_us, to_us, cpu: before.until(&after), each: before.each_until(&after), phases, pg })
}
