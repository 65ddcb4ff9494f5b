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
    let clients: Vec<crate::http::Client> = targets.iter().map(Target::client).collect();
    let mut stored = 0;
    let sizes = &settings.sizes;
    let streams = sizes.tick_streams;
    let Script::Tick { ticks, .. } = script(settings) else {
        bail!("ticking: not a tick script");
    };
    let props = Arc::new(script(settings).peer_props());
    let mut figures: [Vec<f64>; 5] = Default::default();
    // PostgreSQL: CPU per 1,000 events (ms), commits/s, events index scans per commit.
    let mut pg_figures: [Vec<f64>; 3] = Default::default();
    let mut cpu = Vec::new();
    let mut per_instance: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut breakdowns = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let first_ticks = Arc::new(AtomicU64::new(0));
        // Where each stream stands, for the report when some never start.
        let stages: Arc<Vec<AtomicU8>> = Arc::new((0..streams).map(|_| AtomicU8::new(0)).collect());
        let stagger = Duration::from_secs(1) / streams.max(1) as u32;
        let mut tasks = Vec::new();
        for i in 0..streams {
            let n = targets.len();
            let (start_at, follow_at) = match follow {
                Follow::Direct => (i as usize % n, None),
                Follow::Reconnect { offset } => (i as usize % n, Some((i as usize + offset) % n)),
            };
            let client = clients[start_at].clone();
            let url = targets[start_at].run_url.clone();
            let follow_on = follow_at.map(|j| (clients[j].clone(), targets[j].run_url.clone()));
            let body = sse::run_body(&unique("tick"), "run-1", &props);
            let mut options = settings.read_options();
            options.ticks = true;
            let timeout = settings.timeout;
            let first_ticks = first_ticks.clone();
            let stages = stages.clone();
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(stagger * i as u32).await;
                // Counted once the first tick arrived, or once the stream failed (so the window
                // does not wait for it and the failure surfaces when the task is joined).
                let mut counted = false;
                let work = async {
                    stages[i as usize].store(STAGE_SENT, Ordering::Relaxed);
                    let mut response = sse::open(&client, &url, body.clone(), None).await?;
                    let mut received = Received::default();
                    if let Some((other, other_url)) = &follow_on {
                        // Its first event (RUN_STARTED, with an id), then the connection goes.
                        let first = sse::ReadOptions { stop_after: Some(1), ..options };
                        drop(sse::read(response, &mut received, first).await?);
                        let Some(id) = received.first_id.clone() else {
                            bail!("a ticking run's first event had no id to resume after");
                        };
                        response = sse::open(other, other_url, body, Some(&id)).await?;
                    }
                    stages[i as usize].store(STAGE_OPEN, Ordering::Relaxed);
                    // Read up to the first tick, count it, then read on to the end.
                    let start_options = sse::ReadOptions { stop_after_ticks: Some(1), ..options };
                    let mut stream = sse::read(response, &mut received, start_options).await?;
                    first_ticks.fetch_add(1, Ordering::Relaxed);
                    counted = true;
                    stages[i as usize].store(STAGE_TICKING, Ordering::Relaxed);
                    if received.terminal.is_none() {
                        stream.read(&mut received, options).await?;
                    }
                    Ok::<_, Error>(received)
                };
                let outcome = tokio::time::timeout(timeout, work)
                    .await
                    .map_err(|_| Error::msg(format!("a ticking stream took over {timeout:?}")))
                    .and_then(|r| r);
                if outcome.is_err() && !counted {
                    first_ticks.fetch_add(1, Ordering::Relaxed);
                }
                outcome
            }));
        }
        let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
        let window = match measure_window(targets, &pids, &first_ticks, streams, sizes.tick_secs, settings).await {
            Ok(window) => window,
            Err(error) => {
                let mut counts = [0usize; 4];
                for stage in stages.iter() {
                    counts[stage.load(Ordering::Relaxed) as usize] += 1;
                }
                bail!(
                    "{error} (streams not yet sent: {}, awaiting response headers: {}, open without a tick: {}, ticking: {})",
                    counts[0], counts[1], counts[2], counts[3]
                );
            }
        };
        let mut latencies = Vec::new();
        let mut all_ticks = 0;
        for task in tasks {
            let received = task.await.context("a ticking client task failed")??;
            received.expect_finished(&format!("ticking on {}", target.name))?;
            let got = received.ticks.len() as u64;
            if got != ticks {
                bail!("ticking on {}: a stream got {got} ticks of {ticks}", target.name);
            }
            all_ticks += got;
            stored += received.events;
            latencies.extend(
                received
                    .ticks
                    .iter()
                    .filter(|t| t.received_us >= window.from_us && t.received_us < window.to_us)
                    .map(|t| t.latency_us),
            );
        }
        if latencies.is_empty() {
            bail!("ticking on {}: no tick arrived inside the measurement window", target.name);
        }
        latencies.sort_unstable();
        let ms = |q: f64| percentile(&latencies, q).map_or(0.0, |us| us as f64 / 1000.0);
        let window_secs = (window.to_us - window.from_us) as f64 / 1e6;
        let rate = latencies.len() as f64 / window_secs;
        eprintln!(
            "  {} {repetition}/{}: {} ticks ({} in window, {rate:.0}/s): p50 {:.2} ms, p99 {:.2} ms, p999 {:.2} ms, max {:.2} ms; CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %",
            key,
            settings.repeats,
            all_ticks,
            latencies.len(),
            ms(0.5),
            ms(0.99),
            ms(0.999),
            ms(1.0),
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
        // CPU seconds of every postgres process over the window, per 1,000 events in it.
        let pg_cpu_per_thousand = window.cpu.postgres / 100.0 * window_secs / latencies.len() as f64 * 1e6;
        if let Some(pg) = &window.pg {
            eprintln!("    {}; PostgreSQL CPU {pg_cpu_per_thousand:.1} ms per 1,000 events", pg.describe(window_secs));
        }
        if !repetitions.keep(window.cpu.other) {
            continue;
        }
        if let Some(pg) = &window.pg {
            let scans_per_commit = pg.events_idx_scans as f64 / pg.commits.max(1) as f64;
            for (figure, value) in
                pg_figures.iter_mut().zip([pg_cpu_per_thousand, pg.commits as f64 / window_secs, scans_per_commit])
            {
                figure.push(value);
            }
        }
        for (all, one) in per_instance.iter_mut().zip(&window.each) {
            all.push(*one);
        }
        breakdowns.push(window.phases);
        for (figure, value) in figures.iter_mut().zip([ms(0.5), ms(0.99), ms(0.999), ms(1.0), rate]) {
            figure.push(value);
        }
        cpu.push(window.cpu);
    }
    let [p50, p99, p999, max, rate] = figures;
    for (suffix, name, values) in [
        ("p50", "latency p50", p50),
        ("p99", "latency p99", p99),
        ("p999", "latency p999", p999),
        ("max", "latency max", max),
    ] {
        report.add(format!("{key}/{suffix}"), format!("{label}: {name}"), Unit::Ms, values, None);
    }
    report.add(
        format!("{key}/rate"),
        format!("{label}: events delivered"),
        Unit::PerSec,
        rate,
        super::raw_reference(target, "b100/c1"),
    );
    add_cpu(report, key, label, &cpu);
    let [pg_cpu, pg_commits, pg_scans] = pg_figures;
    if !pg_cpu.is_empty() {
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
    add_instance_cpu(report, key, label, per_instance, targets);
    if targets.iter().any(|t| t.metrics_url.is_some()) {
        crate::metrics::add_breakdown(report, key, label, &breakdowns);
    }
    Ok(stored)
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
