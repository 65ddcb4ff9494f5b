//! agui-bench: the gateway's load tool (see BENCHMARKS.md).
//!
//! Drives the real gateway (a child process on a fresh database) over loopback HTTP with
//! `script` agents, in the six scenarios of issue 3, each bounded in count and time and
//! repeated for min/median/max; prints each gateway throughput also as a ratio of the raw
//! database limit measured in the same run, and judges the targets. With `--peers`, the
//! AG-UI Python stack and CopilotKit's runtime run the burst and ticking scenarios side by side.
//! Beyond those: `chat` (an `openai` agent on a scripted model the tool serves), `scale-out`
//! (three instances on one PostgreSQL database), `waiting` (many waiting turns on one
//! instance, their memory and lease writes) and `upstream` (an upstream AG-UI server read
//! directly and through the gateway's `agui` agent: the relay's rate and added latency).
//! Growth: `history` (start, replay and ticking on a database holding millions of events,
//! against an empty one) and `soak` (chat load on two instances for half an hour, with
//! reconnects and kills: memory over time, lost and duplicated tokens); `all` leaves these
//! two out (they are long), `smoke` runs them tiny.
//!
//! `smoke` runs every gateway scenario tiny, in seconds, checking every event and the stored
//! rows and nothing about timing: it fails loudly when a scenario breaks.

mod cli;
mod database;
mod error;
mod gateway;
mod http;
mod metrics;
mod nats;
mod peers;
mod pgstats;
mod procfs;
mod report;
mod scenarios;
mod sse;
mod startup;
mod stats;
mod target;
mod tls;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use cli::{Cli, Scenario};
use database::Store;
use error::{Context, Error, Result};
use gateway::{Gateway, GatewaySettings};
use http::Transport;
use report::Report;
use scenarios::Settings;
use target::{gateway_name, Script};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let started = Instant::now();
    match run(&cli).await {
        Ok(()) => {
            eprintln!("agui-bench: done in {:.0} s", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("agui-bench: FAILED: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Checks what the chosen scenarios need, starts nothing until it holds, runs every scenario
/// and prints the report.
async fn run(cli: &Cli) -> Result<()> {
    let settings = cli.settings();
    preflight(cli, &settings)?;
    // A private copy: a rebuild of the workspace during the run must not swap the binary. The
    // directory lives as long as the run.
    let binary_dir =
        tempfile::Builder::new().prefix("agui-bench-bin-").tempdir().context("creating a temporary directory")?;
    let gateways = gateway_settings(cli, binary_dir.path())?;
    let quiet = Quiet {
        below: cli.quiet_below,
        wait: if settings.strict { Duration::ZERO } else { Duration::from_secs(cli.quiet_wait_secs) },
    };
    let bench = Bench { cli, transports: cli.transports(), settings, gateways, quiet };
    println!("{}", machine(cli).await);
    let mut report = Report::default();
    let mut failures = Failures::default();
    for (index, &store) in cli.store.iter().enumerate() {
        bench.on_store(index, store, &mut report, &mut failures).await;
    }
    bench.on_several_instances(&mut report, &mut failures).await;
    bench.growth(&mut report, &mut failures).await;
    bench.handshake(&mut report, &mut failures).await;
    if cli.peers && (cli.runs(Scenario::Burst) || cli.runs(Scenario::Ticking)) {
        for kind in peers::ALL {
            bench.on_peer(kind, &mut report, &mut failures).await;
        }
    }
    print_report(cli, &bench.settings, &mut report, &failures)
}

/// Fails before anything starts when the machine cannot run the chosen scenarios: too few open
/// files for their streams, or packages they need not installed.
fn preflight(cli: &Cli, settings: &Settings) -> Result<()> {
    let open_files = procfs::raise_open_files_limit();
    if cli.runs(Scenario::Idle) && open_files < settings.sizes.idle_streams + 1024 {
        return Err(Error::msg(format!(
            "the open-file limit is {open_files}: too low for {} idle streams (raise `ulimit -Hn`)",
            settings.sizes.idle_streams
        )));
    }
    if cli.runs(Scenario::Waiting) && open_files < settings.sizes.waiting_turns + 1024 {
        return Err(Error::msg(format!(
            "the open-file limit is {open_files}: too low for {} waiting streams over HTTP/1.1 (raise `ulimit -Hn`)",
            settings.sizes.waiting_turns
        )));
    }
    if cli.runs(Scenario::Chat) && open_files < 2 * settings.sizes.chats + 1024 {
        return Err(Error::msg(format!(
            "the open-file limit is {open_files}: too low for {} chats (a client and a model connection each)",
            settings.sizes.chats
        )));
    }
    if cli.peers {
        peers::check_installed(&cli.peers_dir)?;
    }
    if cli.scenario == Scenario::Upstream {
        scenarios::upstream::check_installed()?;
    }
    Ok(())
}

/// What every gateway the tool starts shares: the gateway binary copied into `binary_dir`, the
/// extra config, the TLS material.
fn gateway_settings(cli: &Cli, binary_dir: &std::path::Path) -> Result<GatewaySettings> {
    let binary = binary_dir.join("agui-gateway");
    std::fs::copy(&cli.gateway, &binary).with_context(|| {
        format!(
            "copying the gateway binary {} (build it with `cargo build --release`, or pass --gateway)",
            cli.gateway.display()
        )
    })?;
    let extra_config = match &cli.gateway_config {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => String::new(),
    };
    let tls = std::sync::Arc::new(tls::Material::new()?);
    Ok(GatewaySettings { binary, postgres: cli.postgres.clone(), extra_config, tls })
}

/// The scenario runs that broke. A run that breaks is recorded and the others still run; the
/// exit code tells.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn record(&mut self, what: String, outcome: Result<()>) {
        if let Err(error) = outcome {
            eprintln!("  FAILED: {what}: {error}");
            self.0.push(format!("{what}: {error}"));
        }
    }
}

/// What every scenario run of one invocation shares.
struct Bench<'a> {
    cli: &'a Cli,
    settings: Settings,
    gateways: GatewaySettings,
    transports: Vec<Transport>,
    quiet: Quiet,
}

impl Bench<'_> {
    /// The scenarios of one gateway on `store` (the `index`-th store of the command line).
    async fn on_store(&self, index: usize, store: Store, report: &mut Report, failures: &mut Failures) {
        let (cli, settings, quiet) = (self.cli, &self.settings, &self.quiet);
        eprintln!("== gateway on {store}");
        // Smoke checks the TLS transports on the first store only: the transport does not
        // depend on the store, and smoke stays within about a minute.
        let transports: &[Transport] =
            if settings.strict && index > 0 { &[Transport::Plain] } else { &self.transports };
        if cli.runs(Scenario::Raw) {
            let outcome = async {
                quiet.wait().await?;
                scenarios::raw::run(store, &cli.postgres, settings, report).await
            }
            .await;
            failures.record(format!("raw on {store}"), outcome);
        }
        for scenario in [Scenario::Burst, Scenario::FanIn, Scenario::Ticking, Scenario::Replay, Scenario::Binary] {
            if !cli.runs(scenario) {
                continue;
            }
            let over: &[Transport] =
                if matches!(scenario, Scenario::Burst | Scenario::Ticking) { transports } else { &[Transport::Plain] };
            for &transport in over {
                let outcome = async {
                    quiet.wait().await?;
                    on_gateway(&self.gateways, store, transport, scenario, settings, report).await
                }
                .await;
                failures.record(format!("{scenario:?} on {}", gateway_name(store, transport)), outcome);
            }
        }
        self.on_store_with_quiet(index, store, transports, report, failures).await;
    }

    /// The scenarios of one store that wait for a quiet machine themselves, per repetition.
    async fn on_store_with_quiet(
        &self,
        index: usize,
        store: Store,
        transports: &[Transport],
        report: &mut Report,
        failures: &mut Failures,
    ) {
        let (cli, settings, quiet, gateways) = (self.cli, &self.settings, &self.quiet, &self.gateways);
        if cli.runs(Scenario::Idle) {
            for &transport in transports {
                let outcome = scenarios::idle::run(gateways, store, transport, settings, quiet, report).await;
                failures.record(format!("Idle on {}", gateway_name(store, transport)), outcome);
            }
        }
        if cli.runs(Scenario::Chat) {
            let outcome = scenarios::chat::run(gateways, store, Transport::Plain, settings, quiet, report).await;
            failures.record(format!("Chat on {}", gateway_name(store, Transport::Plain)), outcome);
        }
        if cli.runs(Scenario::Waiting) {
            // Smoke checks the HTTP/2 size on the first store only, as it does TLS.
            let with_max = !(settings.strict && index > 0);
            let outcome = scenarios::waiting::run(gateways, store, settings, with_max, quiet, report).await;
            failures.record(format!("Waiting on gateway/{store}"), outcome);
        }
        if cli.runs(Scenario::Upstream) {
            let outcome = scenarios::upstream::run(gateways, store, settings, quiet, report).await;
            failures.record(format!("Upstream on gateway/{store}"), outcome);
        }
    }

    /// Scale-out: several instances share one database, so PostgreSQL only.
    async fn on_several_instances(&self, report: &mut Report, failures: &mut Failures) {
        let (cli, settings, quiet, gateways) = (self.cli, &self.settings, &self.quiet, &self.gateways);
        if !cli.runs(Scenario::ScaleOut) {
            return;
        }
        if !cli.store.contains(&Store::Postgres) {
            report.note("scale-out: not run (PostgreSQL only; no --store postgres)");
            return;
        }
        for layout in cli.layouts() {
            eprintln!("== scale-out: {} gateways on one PostgreSQL database, {} bus", layout.instances, layout.bus);
            let outcome = scenarios::scale_out::run(gateways, &layout, settings, quiet, report).await;
            failures
                .record(format!("Scale-out on gateway/postgres ({} × {} bus)", layout.instances, layout.bus), outcome);
        }
    }

    /// The growth scenarios: history on every store, soak on PostgreSQL.
    async fn growth(&self, report: &mut Report, failures: &mut Failures) {
        let (cli, settings, quiet, gateways) = (self.cli, &self.settings, &self.quiet, &self.gateways);
        if cli.runs(Scenario::History) {
            for &store in &cli.store {
                eprintln!(
                    "== history on {store}: {} events over {} threads against an empty database",
                    scenarios::count(settings.sizes.history_events),
                    scenarios::count(settings.sizes.history_threads)
                );
                let outcome = scenarios::history::run(gateways, store, settings, quiet, report).await;
                failures.record(format!("History on gateway/{store}"), outcome);
            }
        }
        if cli.runs(Scenario::Soak) {
            if cli.store.contains(&Store::Postgres) {
                eprintln!(
                    "== soak: {} s of chat load on two gateways sharing one PostgreSQL database",
                    settings.sizes.soak_secs
                );
                let outcome = scenarios::soak::run(gateways, settings, report).await;
                failures.record("Soak on gateway/postgres".to_string(), outcome);
            } else {
                report.note("soak: not run (PostgreSQL only; no --store postgres)");
            }
        }
    }

    /// What a new connection costs does not depend on the store: measured once, on the first.
    async fn handshake(&self, report: &mut Report, failures: &mut Failures) {
        let (true, Some(&store)) = (self.cli.runs(Scenario::Handshake), self.cli.store.first()) else {
            return;
        };
        eprintln!("== handshake cost, gateway on {store}");
        // Plain TCP always, as the baseline TLS is compared with.
        let mut over = self.transports.clone();
        if !over.contains(&Transport::Plain) {
            over.insert(0, Transport::Plain);
        }
        let outcome =
            scenarios::handshake::run(&self.gateways, store, &over, &self.settings, &self.quiet, report).await;
        failures.record(format!("Handshake on gateway/{store}"), outcome);
    }

    /// The burst and ticking scenarios on one peer, side by side with the gateway's.
    async fn on_peer(&self, kind: peers::PeerKind, report: &mut Report, failures: &mut Failures) {
        let (cli, settings, quiet) = (self.cli, &self.settings, &self.quiet);
        eprintln!("== peer: {kind}");
        let peer = match peers::Peer::start(kind, &cli.peers_dir).await {
            Ok(peer) => peer,
            Err(error) => {
                failures.record(format!("starting the {kind} peer"), Err(error));
                return;
            }
        };
        let target = peer.target();
        if cli.runs(Scenario::Burst) {
            let events = match kind {
                peers::PeerKind::CopilotKit => settings.sizes.copilotkit_burst_events,
                peers::PeerKind::Python => settings.sizes.burst_events,
            };
            let outcome = async {
                quiet.wait().await?;
                scenarios::burst::run(&target, events, settings, report).await.map(|_| ())
            }
            .await;
            failures.record(format!("Burst on {kind}"), outcome);
        }
        if cli.runs(Scenario::Ticking) {
            let outcome = async {
                quiet.wait().await?;
                scenarios::ticking::run(&target, settings, report).await.map(|_| ())
            }
            .await;
            failures.record(format!("Ticking on {kind}"), outcome);
        }
        peer.stop().await;
    }
}

/// Judges the targets, prints the figures, notes, targets and failures (and writes the JSON
/// report); fails when any scenario run failed.
fn print_report(cli: &Cli, settings: &Settings, report: &mut Report, failures: &Failures) -> Result<()> {
    report.judge(cli.scenario == Scenario::All, settings.sizes.waiting_turns);
    println!("## Figures\n\n{}", report.table());
    if !report.notes.is_empty() {
        println!("## Notes\n");
        for note in &report.notes {
            println!("- {note}");
        }
        println!();
    }
    if !settings.strict {
        println!("## Targets\n\n{}", report.targets_table());
    }
    if let Some(path) = &cli.json {
        let json = serde_json::to_string_pretty(&report).context("encoding the report")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    let failures = &failures.0;
    if !failures.is_empty() {
        println!("## Failed\n");
        for failure in failures {
            println!("- {}", failure.lines().next().unwrap_or(""));
        }
        return Err(Error::msg(format!("{} scenario run(s) failed:\n{}", failures.len(), failures.join("\n"))));
    }
    if settings.strict {
        println!("smoke: every scenario ran and every check passed");
    }
    Ok(())
}

/// Starts a gateway whose `bench` agent runs the scenario's script, runs the scenario on it,
/// checks in strict mode that the events table holds what was streamed, and stops it.
async fn on_gateway(
    gateways: &GatewaySettings,
    store: Store,
    transport: Transport,
    scenario: Scenario,
    settings: &Settings,
    report: &mut Report,
) -> Result<()> {
    let script: Script = match scenario {
        Scenario::Burst => scenarios::burst::script(settings),
        Scenario::FanIn => scenarios::fan_in::script(settings),
        Scenario::Ticking => scenarios::ticking::script(settings),
        Scenario::Replay | Scenario::Binary => scenarios::replay::script(settings),
        other => return Err(Error::msg(format!("{other:?} does not run on one gateway"))),
    };
    let gateway = Gateway::start(gateways, store, transport, &script).await?;
    let target = gateway.target();
    let outcome = async {
        let streamed = match scenario {
            Scenario::Burst => {
                let events = settings.sizes.burst_events;
                scenarios::burst::run(&target, events, settings, report).await?
            }
            Scenario::FanIn => scenarios::fan_in::run(&target, settings, report).await?,
            Scenario::Ticking => scenarios::ticking::run(&target, settings, report).await?,
            Scenario::Binary => scenarios::binary::run(&target, settings, report).await?,
            _ => scenarios::replay::run(&target, settings, report).await?,
        };
        scenarios::check_stored(settings, &gateway.database, streamed, &target.name).await
    }
    .await;
    let log = gateway.log_tail();
    gateway.stop().await?;
    outcome.map_err(|error| Error::msg(format!("{error}\n--- gateway log ---\n{log}")))
}

/// Waiting for a quiet machine before each measurement (see `--quiet-below`).
pub struct Quiet {
    below: f64,
    wait: Duration,
}

impl Quiet {
    pub async fn wait(&self) -> Result<()> {
        if !self.wait.is_zero() {
            procfs::wait_until_quiet(self.below, self.wait).await?;
        }
        Ok(())
    }
}

/// The machine and software the figures were measured on.
async fn machine(cli: &Cli) -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let postgres = if cli.store.contains(&Store::Postgres) {
        database::postgres_version(&cli.postgres).await.unwrap_or_else(|e| format!("unknown ({e})"))
    } else {
        "not used".into()
    };
    format!(
        "## Machine\n\n- cores: {} ({cpu})\n- memory: {memory}\n- kernel: {}\n- PostgreSQL: {postgres}\n- load average at start: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        read("/proc/sys/kernel/osrelease").trim(),
        read("/proc/loadavg").trim()
    )
}
