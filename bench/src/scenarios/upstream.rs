//! Scenario *upstream*: what the gateway's `agui` agent costs when it relays an upstream AG-UI
//! server, measured against reading that server directly.
//!
//! The upstream is `bench/upstream/server.mjs`, a Node server on the official `@ag-ui/encoder`
//! (the packages of `tests/upstream/node`, pinned by its lockfile). Each run is one text message:
//! RUN_STARTED, TEXT_MESSAGE_START, N−4 deltas, TEXT_MESSAGE_END, RUN_FINISHED; each delta's text
//! is ` t<micros> n<k>` padded to `--bytes` characters, the wall-clock microsecond the upstream
//! encoded it and its index. The same runs are read directly from the upstream and through a
//! gateway whose `agui` agents front it (the agent's URL says which run: the gateway does not
//! pass the client's `forwardedProps` upstream).
//!
//! Two measurements per repetition, each direct and then through the gateway:
//! - **rate**: `--upstream-events` events sent as fast as the socket takes them; events
//!   received per second from the request to `RUN_FINISHED` (as burst). Through the gateway
//!   every event is also checked, re-identified and durably committed before it is sent.
//! - **paced**: `--upstream-paced-events` deltas at `--upstream-rate` per second; per delta,
//!   arrival − upstream stamp (same machine clock), p50/p99/p999/max. The latency the gateway
//!   adds is the through percentile minus the direct one of the same repetition (the events of
//!   two runs cannot be paired; a constant offset between the two processes' clocks cancels).
//!   Paced, because a burst's latency is its queue. The gateway's phase histograms are read
//!   around the paced through run (see `crate::metrics`): where the added time goes.
//!
//! CPU is split as elsewhere (server, PostgreSQL, tool, other), the server being the upstream
//! when it is read directly and the gateway through it, with the upstream's own row beside.
//! Every run is checked whole, timed or not: each delta's index arrives once and in order, so a
//! lost, repeated or reordered event fails the scenario; in smoke the events table must also
//! hold exactly what the gateway streamed.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::{add_cpu, count, run_to_end, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Context, Error, Result};
use crate::gateway::{log_tail, terminate, Gateway, GatewaySettings};
use crate::http::{Client, Transport};
use crate::metrics::{self, Phase};
use crate::procfs::{CpuSnapshot, CpuUse};
use crate::report::{Report, Unit};
use crate::sse::{self, ReadOptions, Received};
use crate::startup::read_server_base;
use crate::stats::percentile;
use crate::target::Target;

/// Events in the warm-up runs, direct and through (V8's JIT, the gateway's upstream connection).
const WARMUP_EVENTS: u64 = 2_000;
const WARMUP_BYTES: usize = 64;

/// The gateway's agents: each fronts one shape of upstream run.
const FAST_AGENT: &str = "bench";
const PACED_AGENT: &str = "paced";
const WARMUP_AGENT: &str = "relay-warmup";

/// `bench/upstream/server.mjs` of the workspace this tool was built in.
fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("upstream/server.mjs")
}

/// Where the server's packages are installed (`npm ci --prefix tests/upstream/node`).
fn modules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/upstream/node")
}

/// Fails with the install command when the encoder the server needs is not installed.
pub fn check_installed() -> Result<()> {
    let dir = modules_dir();
    if !dir.join("node_modules/@ag-ui/encoder/package.json").exists() {
        bail!(
            "the upstream scenario's packages are not installed in {} (run `npm ci --prefix tests/upstream/node`; \
             scripts/test does)",
            dir.display()
        );
    }
    Ok(())
}

/// The upstream server as a child process, ready once it printed where it listens.
struct UpstreamServer {
    child: Child,
    pid: u32,
    base: String,
    log: tempfile::NamedTempFile,
}

impl UpstreamServer {
    async fn start() -> Result<UpstreamServer> {
        check_installed()?;
        let log = tempfile::NamedTempFile::new().context("creating the upstream server's log")?;
        let stderr = log.reopen().context("opening the upstream server's log")?;
        let mut child = Command::new("node")
            .arg(server_script())
            // Its stdin is a pipe it watches: the server ends with this tool, however it ends.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .context("starting the upstream server (node)")?;
        let pid = child.id().context("the upstream server exited at once")?;
        let stdout = child.stdout.take().context("the upstream server's stdout")?;
        match read_server_base(stdout, Duration::from_secs(30)).await {
            Ok(base) => Ok(UpstreamServer { child, pid, base, log }),
            Err(line) => {
                let _ = child.kill().await;
                bail!(
                    "the upstream server did not say where it listens (got {line:?})\n--- upstream log ---\n{}",
                    log_tail(log.path())
                );
            }
        }
    }

    /// The run URL for `events` events (deltas of `bytes` characters) at `rate` per second
    /// (0: as fast as it can).
    fn url(&self, events: u64, rate: u64, bytes: usize) -> String {
        format!("{}/agents/stream?events={events}&rate={rate}&bytes={bytes}", self.base)
    }

    async fn stop(mut self) {
        terminate(&mut self.child, self.pid).await;
    }
}

/// The gateway's agents, each an `agui` agent fronting one shape of run.
fn agents(upstream: &UpstreamServer, settings: &Settings) -> String {
    let sizes = &settings.sizes;
    let timeout = settings.timeout.as_secs().max(1);
    [
        (FAST_AGENT, upstream.url(sizes.upstream_events, 0, sizes.bytes)),
        (PACED_AGENT, upstream.url(sizes.upstream_paced_events + 4, sizes.upstream_rate, sizes.bytes)),
        (WARMUP_AGENT, upstream.url(WARMUP_EVENTS, 0, WARMUP_BYTES)),
    ]
    .iter()
    .map(|(name, url)| {
        format!(
            "[[agents]]\nname = \"{name}\"\nkind = \"agui\"\ntitle = \"{name}\"\nurl = \"{url}\"\ntimeout_secs = {timeout}\n\n"
        )
    })
    .collect()
}

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let upstream = UpstreamServer::start().await?;
    let outcome = async {
        let database = Database::create(store, &gateways.postgres).await?;
        let gateway = Gateway::start_on(gateways, database, Transport::Plain, &agents(&upstream, settings)).await?;
        let outcome = measure(&gateway, &upstream, settings, quiet, report).await;
        let log = gateway.log_tail();
        gateway.stop().await?;
        outcome.map_err(|e| Error::msg(format!("{e}\n--- gateway log ---\n{log}")))
    }
    .await;
    let log = log_tail(upstream.log.path());
    upstream.stop().await;
    outcome.map_err(|e| if log.is_empty() { e } else { Error::msg(format!("{e}\n--- upstream log ---\n{log}")) })
}

/// One run as read, and the CPU it cost.
struct Measured {
    received: Received,
    elapsed: f64,
    /// `server` is the process read from: the upstream directly, the gateway through it.
    cpu: CpuUse,
    /// The upstream's CPU when read through the gateway (% of one core).
    upstream_cpu: f64,
}

/// Where a run is read from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Through,
}

/// Reads one run at `url` to its end and checks every delta arrived once and in order.
async fn one_run(
    client: &Client,
    url: &str,
    via: Via,
    pids: (u32, u32),
    deltas: u64,
    what: &str,
    settings: &Settings,
) -> Result<Measured> {
    let (upstream_pid, gateway_pid) = pids;
    let body = sse::run_body(&unique("upstream"), "run-1", &serde_json::Value::Null);
    let options = ReadOptions { tokens: true, ..settings.read_options() };
    let before = CpuSnapshot::take_all(&[upstream_pid, gateway_pid])?;
    let started = Instant::now();
    let received = run_to_end(client, url, body, None, options, settings.timeout).await?;
    let after = CpuSnapshot::take_all(&[upstream_pid, gateway_pid])?;
    check_deltas(what, &received, deltas)?;
    let elapsed = received.last_at.map_or(0.0, |last| last.duration_since(started).as_secs_f64());
    let all = before.until(&after);
    let each = before.each_until(&after);
    let (upstream, gateway) = (each.first().copied().unwrap_or(0.0), each.get(1).copied().unwrap_or(0.0));
    // `other` already leaves out both processes.
    let (server, upstream_cpu) = match via {
        Via::Direct => (upstream, 0.0),
        Via::Through => (gateway, upstream),
    };
    Ok(Measured { received, elapsed, cpu: CpuUse { server, ..all }, upstream_cpu })
}

/// Fails unless the run finished and delta k arrived k-th, each exactly once.
fn check_deltas(what: &str, received: &Received, deltas: u64) -> Result<()> {
    received.expect_finished(what)?;
    if received.content_events != deltas {
        bail!("{what}: {} TEXT_MESSAGE_CONTENT events arrived, the upstream sent {deltas}", received.content_events);
    }
    if received.tokens.len() as u64 != deltas {
        bail!("{what}: {} of {deltas} deltas carried the upstream's stamp", received.tokens.len());
    }
    if let Some((k, token)) = received.tokens.iter().enumerate().find(|(k, t)| t.seq != Some(*k as u64)) {
        bail!(
            "{what}: the {}th delta to arrive is the upstream's n{:?} (lost, repeated or reordered)",
            k + 1,
            token.seq
        );
    }
    Ok(())
}

/// Arrival − stamp of every delta, sorted (µs).
fn latencies(received: &Received) -> Vec<u64> {
    let mut all: Vec<u64> = received.tokens.iter().map(|t| t.received_us.saturating_sub(t.sent_us)).collect();
    all.sort_unstable();
    all
}

async fn measure(
    gateway: &Gateway,
    upstream: &UpstreamServer,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let target: Target = gateway.target();
    let name = target.name.clone();
    let sizes = &settings.sizes;
    let paths = Paths::new(gateway, upstream, settings)?;
    let mut stored = warm_up_both(&paths, &target, settings).await?;
    let mut figures = Figures::default();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        quiet.wait().await?;
        let runs = measure_once(&paths, &target, settings).await?;
        stored += runs.fast_through.received.events + runs.paced_through.received.events;
        let compared = Compared::of(&runs);
        compared.print(&runs, &name, repetition, settings);
        let other = [&runs.fast_direct, &runs.fast_through, &runs.paced_direct, &runs.paced_through]
            .iter()
            .map(|m| m.cpu.other)
            .fold(0.0, f64::max);
        if !repetitions.keep(other) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        }
        figures.push(runs, compared);
    }
    super::check_stored(settings, &gateway.database, stored, &format!("upstream on {name}")).await?;
    let key = format!("{name}/upstream");
    figures.add_fast(
        report,
        &key,
        &format!("upstream 1 × {} events as fast as sent", count(sizes.upstream_events)),
        &name,
    );
    let paced = format!("upstream {} deltas at {}/s", count(sizes.upstream_paced_events), sizes.upstream_rate);
    figures.add_paced(report, &key, &paced, &name);
    Ok(())
}

/// Where the runs are read: the upstream directly and the gateway in front of it, a client for
/// each, and the runs' URLs.
struct Paths {
    direct: Client,
    through: Client,
    /// The upstream's pid and the gateway's.
    pids: (u32, u32),
    fast_deltas: u64,
    paced_deltas: u64,
    fast_direct: String,
    fast_through: String,
    paced_direct: String,
    paced_through: String,
    warmup_direct: String,
    warmup_through: String,
}

impl Paths {
    fn new(gateway: &Gateway, upstream: &UpstreamServer, settings: &Settings) -> Result<Paths> {
        let sizes = &settings.sizes;
        let fast_deltas = sizes.upstream_events.saturating_sub(4);
        let paced_deltas = sizes.upstream_paced_events;
        if fast_deltas == 0 || paced_deltas == 0 {
            bail!("upstream: --upstream-events must be above 4 and --upstream-paced-events above 0");
        }
        Ok(Paths {
            direct: Client::plain(),
            through: gateway.target().client(),
            pids: (upstream.pid, gateway.pid),
            fast_deltas,
            paced_deltas,
            fast_direct: upstream.url(sizes.upstream_events, 0, sizes.bytes),
            fast_through: gateway.url(&format!("/v1/agui/agents/{FAST_AGENT}")),
            paced_direct: upstream.url(paced_deltas + 4, sizes.upstream_rate, sizes.bytes),
            paced_through: gateway.url(&format!("/v1/agui/agents/{PACED_AGENT}")),
            warmup_direct: upstream.url(WARMUP_EVENTS, 0, WARMUP_BYTES),
            warmup_through: gateway.url(&format!("/v1/agui/agents/{WARMUP_AGENT}")),
        })
    }
}

/// The gateway's own warm-up (its script agent), then the relay's, both ways. Returns the
/// events the gateway stored.
async fn warm_up_both(paths: &Paths, target: &Target, settings: &Settings) -> Result<u64> {
    let stored = warm_up(&paths.through, target, settings).await?;
    let (pids, deltas) = (paths.pids, WARMUP_EVENTS - 4);
    let direct = "upstream warm-up, direct";
    one_run(&paths.direct, &paths.warmup_direct, Via::Direct, pids, deltas, direct, settings).await?;
    let warmed =
        one_run(&paths.through, &paths.warmup_through, Via::Through, pids, deltas, "upstream warm-up", settings)
            .await
            .with_context(|| format!("upstream warm-up through {}", target.name))?;
    Ok(stored + warmed.received.events)
}

/// One repetition's four runs, and where the paced run's time went through the gateway.
struct Runs {
    fast_direct: Measured,
    fast_through: Measured,
    paced_direct: Measured,
    paced_through: Measured,
    phases: Vec<Phase>,
}

/// The fast run directly and through the gateway, then the paced run the same two ways, the
/// gateway's phase histograms read around the paced run through it.
async fn measure_once(paths: &Paths, target: &Target, settings: &Settings) -> Result<Runs> {
    let (direct, through, pids) = (&paths.direct, &paths.through, paths.pids);
    let (fast, paced) = (paths.fast_deltas, paths.paced_deltas);
    let what = |path: &str| format!("upstream {path} on {}", target.name);
    let fast_direct = one_run(direct, &paths.fast_direct, Via::Direct, pids, fast, &what("direct"), settings).await?;
    let fast_through =
        one_run(through, &paths.fast_through, Via::Through, pids, fast, &what("through"), settings).await?;
    let paced_direct =
        one_run(direct, &paths.paced_direct, Via::Direct, pids, paced, &what("paced, direct"), settings).await?;
    let histograms_before = metrics::scrape_all(std::slice::from_ref(target)).await;
    let paced_through =
        one_run(through, &paths.paced_through, Via::Through, pids, paced, &what("paced, through"), settings).await?;
    let histograms_after = metrics::scrape_all(std::slice::from_ref(target)).await;
    let phases = metrics::breakdown(&histograms_before, &histograms_after);
    Ok(Runs { fast_direct, fast_through, paced_direct, paced_through, phases })
}

/// A repetition's runs compared: rates of the fast runs, latency quantiles of the paced ones.
struct Compared {
    direct_rate: f64,
    through_rate: f64,
    /// p50, p99, p999, max (ms).
    direct_ms: [f64; 4],
    through_ms: [f64; 4],
    /// Through − direct, p50 and p99 (ms).
    added: [f64; 2],
}

impl Compared {
    fn of(runs: &Runs) -> Compared {
        let rate = |m: &Measured| m.received.events as f64 / m.elapsed.max(1e-9);
        let (direct_lat, through_lat) =
            (latencies(&runs.paced_direct.received), latencies(&runs.paced_through.received));
        let ms = |sorted: &[u64], q: f64| percentile(sorted, q).map_or(0.0, |us| us as f64 / 1000.0);
        let quantiles = [0.5, 0.99, 0.999, 1.0];
        let direct_ms = quantiles.map(|q| ms(&direct_lat, q));
        let through_ms = quantiles.map(|q| ms(&through_lat, q));
        let added = [through_ms[0] - direct_ms[0], through_ms[1] - direct_ms[1]];
        Compared {
            direct_rate: rate(&runs.fast_direct),
            through_rate: rate(&runs.fast_through),
            direct_ms,
            through_ms,
            added,
        }
    }

    fn print(&self, runs: &Runs, name: &str, repetition: usize, settings: &Settings) {
        let (direct_rate, through_rate) = (self.direct_rate, self.through_rate);
        let (direct_ms, through_ms, added) = (self.direct_ms, self.through_ms, self.added);
        eprintln!(
            "  {name} upstream {repetition}/{}: {} events direct {direct_rate:.0}/s (CPU: {}), through {through_rate:.0}/s = {:.2} × (CPU: {})",
            settings.repeats,
            runs.fast_direct.received.events,
            cpu_line(&runs.fast_direct),
            through_rate / direct_rate.max(1e-9),
            cpu_line(&runs.fast_through)
        );
        eprintln!(
            "    paced {} × {}/s: direct p50 {:.2} / p99 {:.2} / max {:.2} ms, through p50 {:.2} / p99 {:.2} / max {:.2} ms: added p50 {:.2} / p99 {:.2} ms (CPU through: {})",
            settings.sizes.upstream_paced_events,
            settings.sizes.upstream_rate,
            direct_ms[0],
            direct_ms[1],
            direct_ms[3],
            through_ms[0],
            through_ms[1],
            through_ms[3],
            added[0],
            added[1],
            cpu_line(&runs.paced_through)
        );
        eprintln!("    where the time goes: {}", metrics::describe(&runs.phases));
    }
}

/// A run's CPU split for the progress lines (the upstream's own share when read through).
fn cpu_line(m: &Measured) -> String {
    let upstream = if m.upstream_cpu > 0.0 { format!(", upstream {:.0} %", m.upstream_cpu) } else { String::new() };
    format!(
        "server {:.0} %{upstream}, postgres {:.0} %, tool {:.0} %, other {:.0} %",
        m.cpu.server, m.cpu.postgres, m.cpu.tool, m.cpu.other
    )
}

/// The kept repetitions' figures, one sample each.
#[derive(Default)]
struct Figures {
    /// Events per second, direct and through.
    rates: [Vec<f64>; 2],
    /// CPU time per event: the upstream's read directly, the gateway's through it.
    per_event: [Vec<f64>; 2],
    fast_cpu: [Vec<CpuUse>; 2],
    fast_upstream_cpu: Vec<f64>,
    /// direct p50/p99/p999/max, through the same, added p50/p99.
    latency: [Vec<f64>; 10],
    paced_cpu: Vec<CpuUse>,
    paced_upstream_cpu: Vec<f64>,
    breakdowns: Vec<Vec<Phase>>,
}

impl Figures {
    fn push(&mut self, runs: Runs, compared: Compared) {
        let Compared { direct_rate, through_rate, direct_ms, through_ms, added } = compared;
        self.rates[0].push(direct_rate);
        self.rates[1].push(through_rate);
        // % of a core ÷ events per second = core-seconds per event; × 10⁴ gives µs.
        self.per_event[0].push(runs.fast_direct.cpu.server / direct_rate.max(1e-9) * 1e4);
        self.per_event[1].push(runs.fast_through.cpu.server / through_rate.max(1e-9) * 1e4);
        self.fast_cpu[0].push(runs.fast_direct.cpu);
        self.fast_cpu[1].push(runs.fast_through.cpu);
        self.fast_upstream_cpu.push(runs.fast_through.upstream_cpu);
        for (figure, value) in self.latency.iter_mut().zip(direct_ms.into_iter().chain(through_ms).chain(added)) {
            figure.push(value);
        }
        self.paced_cpu.push(runs.paced_through.cpu);
        self.paced_upstream_cpu.push(runs.paced_through.upstream_cpu);
        self.breakdowns.push(runs.phases);
    }

    /// The fast runs' figures: rates, CPU per event, the CPU split.
    fn add_fast(&mut self, report: &mut Report, key: &str, fast: &str, name: &str) {
        let direct_label = format!("{fast}, {name}: read directly");
        let through_label = format!("{fast}, {name}: through the gateway (agui agent)");
        let [direct_rates, through_rates] = std::mem::take(&mut self.rates);
        report.add(format!("{key}/direct/rate"), &direct_label, Unit::PerSec, direct_rates, None);
        report.add(
            format!("{key}/through/rate"),
            &through_label,
            Unit::PerSec,
            through_rates,
            Some(format!("{key}/direct/rate")),
        );
        let [direct_per_event, through_per_event] = std::mem::take(&mut self.per_event);
        report.add(
            format!("{key}/direct/cpu-per-event"),
            format!("{direct_label}: upstream CPU per event"),
            Unit::Us,
            direct_per_event,
            None,
        );
        report.add(
            format!("{key}/through/cpu-per-event"),
            format!("{through_label}: gateway CPU per event"),
            Unit::Us,
            through_per_event,
            None,
        );
        let [direct_cpu, through_cpu] = std::mem::take(&mut self.fast_cpu);
        // Read directly, the server under test is the upstream itself.
        add_cpu(report, &format!("{key}/direct"), &format!("{direct_label} (server = the upstream)"), &direct_cpu);
        add_cpu(report, &format!("{key}/through"), &through_label, &through_cpu);
        report.add(
            format!("{key}/through/cpu/upstream"),
            format!("{through_label}: upstream CPU"),
            Unit::Core,
            std::mem::take(&mut self.fast_upstream_cpu),
            None,
        );
    }

    /// The paced runs' figures: latency quantiles each way and added, the CPU through, where
    /// the time goes.
    fn add_paced(self, report: &mut Report, key: &str, paced: &str, name: &str) {
        let [d50, d99, d999, dmax, t50, t99, t999, tmax, a50, a99] = self.latency;
        for (suffix, what, values) in [
            ("paced/direct/p50", "read directly: latency stamp→receive p50", d50),
            ("paced/direct/p99", "read directly: latency stamp→receive p99", d99),
            ("paced/direct/p999", "read directly: latency stamp→receive p999", d999),
            ("paced/direct/max", "read directly: latency stamp→receive max", dmax),
            ("paced/through/p50", "through the gateway: latency stamp→receive p50", t50),
            ("paced/through/p99", "through the gateway: latency stamp→receive p99", t99),
            ("paced/through/p999", "through the gateway: latency stamp→receive p999", t999),
            ("paced/through/max", "through the gateway: latency stamp→receive max", tmax),
            ("added/p50", "latency the gateway adds, p50 (through − direct)", a50),
            ("added/p99", "latency the gateway adds, p99 (through − direct)", a99),
        ] {
            report.add(format!("{key}/{suffix}"), format!("{paced}, {name}: {what}"), Unit::Ms, values, None);
        }
        let paced_label = format!("{paced}, through {name}");
        add_cpu(report, &format!("{key}/paced/through"), &paced_label, &self.paced_cpu);
        report.add(
            format!("{key}/paced/through/cpu/upstream"),
            format!("{paced_label}: upstream CPU"),
            Unit::Core,
            self.paced_upstream_cpu,
            None,
        );
        metrics::add_breakdown(report, &format!("{key}/paced/through"), &paced_label, &self.breakdowns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::TokenSample;

    fn arrived(seqs: &[u64]) -> Received {
        let mut received = Received::default();
        received.content_events = seqs.len() as u64;
        received.terminal = Some("RUN_FINISHED".into());
        received.tokens = seqs.iter().map(|&k| TokenSample { sent_us: 1, received_us: 2, seq: Some(k) }).collect();
        received
    }

    #[test]
    fn a_lost_repeated_or_reordered_delta_fails_the_run() {
        assert!(check_deltas("run", &arrived(&[0, 1, 2, 3]), 4).is_ok());
        assert!(check_deltas("run", &arrived(&[0, 1, 3]), 4).is_err(), "lost");
        assert!(check_deltas("run", &arrived(&[0, 1, 1, 2]), 4).is_err(), "repeated, same count");
        assert!(check_deltas("run", &arrived(&[0, 2, 1, 3]), 4).is_err(), "reordered");
        let mut unfinished = arrived(&[0, 1, 2, 3]);
        unfinished.terminal = None;
        assert!(check_deltas("run", &unfinished, 4).is_err(), "no RUN_FINISHED");
    }
}
