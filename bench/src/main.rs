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
mod stats;
mod target;
mod tls;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

use database::Store;
use error::{Context, Error, Result};
use gateway::{Gateway, GatewaySettings};
use http::Transport;
use report::Report;
use scenarios::scale_out::{Bus, Layout};
use scenarios::{Settings, Sizes};
use target::{gateway_name, Script};

#[derive(Parser, Debug)]
#[command(name = "agui-bench", about = "Load tool for agui-gateway (see BENCHMARKS.md)")]
struct Cli {
    /// What to run: one scenario, `all` of them, or `smoke` (all, tiny, checked, untimed).
    #[arg(value_enum)]
    scenario: Scenario,
    /// With `smoke` (or `all`): only these scenarios (repeatable, or a list: `--only soak,history`).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Scenario>,
    /// Stores to run the gateway on (repeatable).
    #[arg(long, value_enum, default_values_t = [Store::Postgres, Store::Sqlite])]
    store: Vec<Store>,
    /// The gateway binary.
    #[arg(long, default_value_os_t = default_gateway())]
    gateway: PathBuf,
    /// PostgreSQL server (a fresh database is created on it per run and dropped after).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    postgres: String,
    /// Repetitions of each measurement (min/median/max are reported).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Also run the burst and ticking scenarios on the peers (installed by bench/peers/setup.sh).
    #[arg(long)]
    peers: bool,
    /// TOML appended to the config of every gateway the tool starts (settings other than
    /// `[[agents]]`, e.g. `[turns]`); the defaults of config/gateway.toml otherwise.
    #[arg(long)]
    gateway_config: Option<PathBuf>,
    /// Where the peers are installed.
    #[arg(long, default_value_os_t = peers::default_dir())]
    peers_dir: PathBuf,
    /// Write the figures and verdicts as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Characters per content delta (200 ≈ 300-byte stored events).
    #[arg(long, default_value_t = 200)]
    bytes: usize,
    #[arg(long, default_value_t = 100_000)]
    burst_events: u64,
    #[arg(long, default_value_t = 100)]
    fan_in_turns: u64,
    #[arg(long, default_value_t = 2_000)]
    fan_in_events: u64,
    #[arg(long, default_value_t = 1_000)]
    tick_streams: u64,
    /// Ticks per second per stream.
    #[arg(long, default_value_t = 10)]
    tick_rate: u64,
    /// Length of the ticking measurement window.
    #[arg(long, default_value_t = 6)]
    tick_secs: u64,
    #[arg(long, default_value_t = 10_000)]
    idle_streams: u64,
    #[arg(long, default_value_t = 10_000)]
    replay_events: u64,
    /// Seconds each raw INSERT measurement lasts.
    #[arg(long, default_value_t = 2.0)]
    raw_secs: f64,
    /// Events in the CopilotKit peer's burst: its runtime re-clones the growing message on
    /// every event (quadratic), so the full burst size would take hours.
    #[arg(long, default_value_t = 5_000)]
    copilotkit_burst_events: u64,
    /// Before each scenario, wait until other work on the machine uses at most this % of one
    /// core…
    #[arg(long, default_value_t = 30.0)]
    quiet_below: f64,
    /// …but no longer than this many seconds (0: do not wait).
    #[arg(long, default_value_t = 60)]
    quiet_wait_secs: u64,
    /// A repetition during which other work on the machine used more than this % of one core
    /// is measured again (the machine is shared)…
    #[arg(long, default_value_t = 50.0)]
    noisy_above: f64,
    /// …at most this many extra times per scenario.
    #[arg(long, default_value_t = 4)]
    retries: usize,
    /// How the burst, ticking, idle and handshake scenarios reach the gateway (repeatable):
    /// HTTP/1.1 over TCP, HTTP/1.1 over TLS, HTTP/2 over TLS (fan-in and replay: plain only).
    #[arg(long, value_enum, default_values_t = [Transport::Plain])]
    transport: Vec<Transport>,
    /// All three transports side by side (`--transport plain --transport tls-h1 --transport
    /// tls-h2`); `smoke` always runs all three.
    #[arg(long)]
    tls: bool,
    /// New connections per repetition of the handshake scenario.
    #[arg(long, default_value_t = 1_000)]
    handshakes: u64,
    /// Concurrent chats of the chat scenario (an `openai` agent on a scripted model).
    #[arg(long, default_value_t = 1_000)]
    chats: u64,
    /// Tokens in each chat's answer…
    #[arg(long, default_value_t = 200)]
    chat_tokens: u64,
    /// …streamed at this many per second per chat.
    #[arg(long, default_value_t = 50)]
    token_rate: u64,
    /// Waiting turns, a stream each, on one instance over plain HTTP/1.1…
    #[arg(long, default_value_t = 10_000)]
    waiting_turns: u64,
    /// …and then this many over HTTP/2 with TLS (past the open-file limit; 0: skip).
    #[arg(long, default_value_t = 50_000)]
    waiting_turns_max: u64,
    /// Seconds the waiting scenario counts lease writes over.
    #[arg(long, default_value_t = 10)]
    waiting_secs: u64,
    /// Events in the upstream scenario's as-fast-as-sent run (read directly and through the
    /// gateway)…
    #[arg(long, default_value_t = 100_000)]
    upstream_events: u64,
    /// …and deltas in its paced run, for latency…
    #[arg(long, default_value_t = 5_000)]
    upstream_paced_events: u64,
    /// …sent at this many per second.
    #[arg(long, default_value_t = 1_000)]
    upstream_rate: u64,
    /// Upper bound of one repetition of a scenario.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Events the history scenario writes before the gateway starts…
    #[arg(long, default_value_t = 10_000_000)]
    history_events: u64,
    /// …over this many threads (one finished turn each).
    #[arg(long, default_value_t = 100_000)]
    history_threads: u64,
    /// Fresh runs whose start (POST → RUN_STARTED) the history scenario times, per repetition.
    #[arg(long, default_value_t = 200)]
    history_starts: u64,
    /// Seconds of chat load in the soak scenario (two instances on one PostgreSQL database).
    #[arg(long, default_value_t = 1800)]
    soak_secs: u64,
    /// New chats per second in the soak (each `--chat-tokens` at `--token-rate`; the default,
    /// 10/s of 200 tokens at 50/s, offers 2,000 tokens/s: see BENCHMARKS.md).
    #[arg(long, default_value_t = 10.0)]
    soak_chats_per_sec: f64,
    /// Every this many seconds, a quarter of the open streams are dropped and resumed with
    /// `Last-Event-ID` on the other instance…
    #[arg(long, default_value_t = 30)]
    soak_reconnect_secs: u64,
    /// …and every this many seconds one instance is killed (SIGKILL) and restarted, in turn.
    #[arg(long, default_value_t = 300)]
    soak_kill_secs: u64,
    /// Gateway instances on one database in the scale-out scenario (repeatable, or a list:
    /// `--instances 3,6`).
    #[arg(long, value_delimiter = ',', default_values_t = [scenarios::scale_out::INSTANCES])]
    instances: Vec<usize>,
    /// How the scale-out instances hear of each other's appends (repeatable).
    #[arg(long, value_enum, default_values_t = [Bus::Postgres])]
    bus: Vec<Bus>,
    /// The NATS server of `--bus nats` (one is started as the tool's child if none answers).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Burst,
    FanIn,
    Ticking,
    Idle,
    Replay,
    Raw,
    Handshake,
    Chat,
    ScaleOut,
    Waiting,
    Upstream,
    History,
    Soak,
    All,
    Smoke,
}

fn default_gateway() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/agui-gateway")
}

impl Cli {
    fn settings(&self) -> Settings {
        let smoke = self.scenario == Scenario::Smoke;
        let sizes = if smoke {
            Sizes {
                bytes: self.bytes,
                burst_events: 2_000,
                fan_in_turns: 4,
                fan_in_events: 300,
                tick_streams: 20,
                tick_rate: 20,
                tick_secs: 1,
                idle_streams: 50,
                replay_events: 1_000,
                raw_secs: 0.2,
                copilotkit_burst_events: 300,
                handshakes: 20,
                chats: 6,
                chat_tokens: 25,
                token_rate: 50,
                waiting_turns: 40,
                waiting_turns_max: 60,
                waiting_window_secs: 1,
                upstream_events: 2_000,
                upstream_paced_events: 200,
                upstream_rate: 1_000,
                history_events: 20_000,
                history_threads: 200,
                history_starts: 20,
                // One reconnect round (at 7 s) and one kill (at 9 s) within 12 s.
                soak_secs: 12,
                soak_chats_per_sec: 3.0,
                soak_tokens: 100,
                soak_reconnect_secs: 7,
                soak_kill_secs: 9,
                soak_sample_secs: 2,
            }
        } else {
            Sizes {
                bytes: self.bytes,
                burst_events: self.burst_events,
                fan_in_turns: self.fan_in_turns,
                fan_in_events: self.fan_in_events,
                tick_streams: self.tick_streams,
                tick_rate: self.tick_rate.max(1),
                tick_secs: self.tick_secs.max(1),
                idle_streams: self.idle_streams,
                replay_events: self.replay_events,
                raw_secs: self.raw_secs,
                copilotkit_burst_events: self.copilotkit_burst_events,
                handshakes: self.handshakes,
                chats: self.chats,
                chat_tokens: self.chat_tokens.max(1),
                token_rate: self.token_rate.max(1),
                waiting_turns: self.waiting_turns,
                waiting_turns_max: self.waiting_turns_max,
                waiting_window_secs: self.waiting_secs.max(1),
                upstream_events: self.upstream_events,
                upstream_paced_events: self.upstream_paced_events,
                upstream_rate: self.upstream_rate.max(1),
                history_events: self.history_events,
                history_threads: self.history_threads.max(1),
                history_starts: self.history_starts.max(1),
                soak_secs: self.soak_secs.max(1),
                soak_chats_per_sec: self.soak_chats_per_sec.max(0.01),
                soak_tokens: self.chat_tokens.max(1),
                soak_reconnect_secs: self.soak_reconnect_secs,
                soak_kill_secs: self.soak_kill_secs,
                soak_sample_secs: 10,
            }
        };
        Settings {
            sizes,
            repeats: if smoke { 1 } else { self.repeats.max(1) },
            timeout: Duration::from_secs(if smoke { self.timeout_secs.min(30) } else { self.timeout_secs }),
            strict: smoke,
            noisy_above: if smoke { f64::INFINITY } else { self.noisy_above },
            retries: self.retries,
        }
    }

    /// The transports of this run, in a fixed order.
    fn transports(&self) -> Vec<Transport> {
        if self.tls || self.scenario == Scenario::Smoke {
            return Transport::ALL.to_vec();
        }
        let mut transports = self.transport.clone();
        transports.sort();
        transports.dedup();
        transports
    }

    /// Whether `scenario` runs: `smoke` runs all; `all` all but the long growth scenarios.
    fn runs(&self, scenario: Scenario) -> bool {
        if !self.only.is_empty() && matches!(self.scenario, Scenario::Smoke | Scenario::All) {
            return self.only.contains(&scenario);
        }
        match self.scenario {
            Scenario::Smoke => true,
            Scenario::All => !matches!(scenario, Scenario::History | Scenario::Soak),
            chosen => chosen == scenario,
        }
    }

    /// The scale-out layouts of this run: every instance count over every bus, in order.
    fn layouts(&self) -> Vec<Layout> {
        let mut buses = self.bus.clone();
        buses.dedup();
        let mut layouts = Vec::new();
        for &bus in &buses {
            for &instances in &self.instances {
                layouts.push(Layout { instances: instances.max(1), bus, nats_url: self.nats_url.clone() });
            }
        }
        layouts
    }
}

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

async fn run(cli: &Cli) -> Result<()> {
    let settings = cli.settings();
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
    // A private copy: a rebuild of the workspace during the run must not swap the binary.
    let binary_dir =
        tempfile::Builder::new().prefix("agui-bench-bin-").tempdir().context("creating a temporary directory")?;
    let binary = binary_dir.path().join("agui-gateway");
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
    let gateways = GatewaySettings { binary, postgres: cli.postgres.clone(), extra_config, tls };
    let transports = cli.transports();
    let quiet = Quiet {
        below: cli.quiet_below,
        wait: if settings.strict { Duration::ZERO } else { Duration::from_secs(cli.quiet_wait_secs) },
    };
    println!("{}", machine(cli).await);
    let mut report = Report::default();
    // A scenario that breaks is recorded and the others still run; the exit code tells.
    let mut failures: Vec<String> = Vec::new();
    let mut record = |what: String, outcome: Result<()>| {
        if let Err(error) = outcome {
            eprintln!("  FAILED: {what}: {error}");
            failures.push(format!("{what}: {error}"));
        }
    };
    for (index, &store) in cli.store.iter().enumerate() {
        eprintln!("== gateway on {store}");
        // Smoke checks the TLS transports on the first store only: the transport does not
        // depend on the store, and smoke stays within about a minute.
        let transports: &[Transport] = if settings.strict && index > 0 { &[Transport::Plain] } else { &transports };
        if cli.runs(Scenario::Raw) {
            let outcome = async {
                quiet.wait().await?;
                scenarios::raw::run(store, &cli.postgres, &settings, &mut report).await
            }
            .await;
            record(format!("raw on {store}"), outcome);
        }
        for scenario in [Scenario::Burst, Scenario::FanIn, Scenario::Ticking, Scenario::Replay] {
            if !cli.runs(scenario) {
                continue;
            }
            let over: &[Transport] =
                if matches!(scenario, Scenario::Burst | Scenario::Ticking) { transports } else { &[Transport::Plain] };
            for &transport in over {
                let outcome = async {
                    quiet.wait().await?;
                    on_gateway(&gateways, store, transport, scenario, &settings, &mut report).await
                }
                .await;
                record(format!("{scenario:?} on {}", gateway_name(store, transport)), outcome);
            }
        }
        if cli.runs(Scenario::Idle) {
            for &transport in transports {
                let outcome = scenarios::idle::run(&gateways, store, transport, &settings, &quiet, &mut report).await;
                record(format!("Idle on {}", gateway_name(store, transport)), outcome);
            }
        }
        if cli.runs(Scenario::Chat) {
            let outcome =
                scenarios::chat::run(&gateways, store, Transport::Plain, &settings, &quiet, &mut report).await;
            record(format!("Chat on {}", gateway_name(store, Transport::Plain)), outcome);
        }
        if cli.runs(Scenario::Waiting) {
            // Smoke checks the HTTP/2 size on the first store only, as it does TLS.
            let with_max = !(settings.strict && index > 0);
            let outcome = scenarios::waiting::run(&gateways, store, &settings, with_max, &quiet, &mut report).await;
            record(format!("Waiting on gateway/{store}"), outcome);
        }
        if cli.runs(Scenario::Upstream) {
            let outcome = scenarios::upstream::run(&gateways, store, &settings, &quiet, &mut report).await;
            record(format!("Upstream on gateway/{store}"), outcome);
        }
    }
    // Several instances share one database: PostgreSQL only.
    if cli.runs(Scenario::ScaleOut) {
        if cli.store.contains(&Store::Postgres) {
            for layout in cli.layouts() {
                eprintln!(
                    "== scale-out: {} gateways on one PostgreSQL database, {} bus",
                    layout.instances, layout.bus
                );
                let outcome = scenarios::scale_out::run(&gateways, &layout, &settings, &quiet, &mut report).await;
                record(format!("Scale-out on gateway/postgres ({} × {} bus)", layout.instances, layout.bus), outcome);
            }
        } else {
            report.note("scale-out: not run (PostgreSQL only; no --store postgres)");
        }
    }
    if cli.runs(Scenario::History) {
        if cli.store.contains(&Store::Postgres) {
            eprintln!(
                "== history: {} events over {} threads against an empty database",
                scenarios::count(settings.sizes.history_events),
                scenarios::count(settings.sizes.history_threads)
            );
            let outcome = scenarios::history::run(&gateways, &settings, &quiet, &mut report).await;
            record("History on gateway/postgres".to_string(), outcome);
        } else {
            report.note("history: not run (PostgreSQL only; no --store postgres)");
        }
    }
    if cli.runs(Scenario::Soak) {
        if cli.store.contains(&Store::Postgres) {
            eprintln!(
                "== soak: {} s of chat load on two gateways sharing one PostgreSQL database",
                settings.sizes.soak_secs
            );
            let outcome = scenarios::soak::run(&gateways, &settings, &mut report).await;
            record("Soak on gateway/postgres".to_string(), outcome);
        } else {
            report.note("soak: not run (PostgreSQL only; no --store postgres)");
        }
    }
    // What a new connection costs does not depend on the store: measured once, on the first.
    if let (true, Some(&store)) = (cli.runs(Scenario::Handshake), cli.store.first()) {
        eprintln!("== handshake cost, gateway on {store}");
        // Plain TCP always, as the baseline TLS is compared with.
        let mut over = transports.clone();
        if !over.contains(&Transport::Plain) {
            over.insert(0, Transport::Plain);
        }
        let outcome = scenarios::handshake::run(&gateways, store, &over, &settings, &quiet, &mut report).await;
        record(format!("Handshake on gateway/{store}"), outcome);
    }
    if cli.peers && (cli.runs(Scenario::Burst) || cli.runs(Scenario::Ticking)) {
        for kind in peers::ALL {
            eprintln!("== peer: {kind}");
            let peer = match peers::Peer::start(kind, &cli.peers_dir).await {
                Ok(peer) => peer,
                Err(error) => {
                    record(format!("starting the {kind} peer"), Err(error));
                    continue;
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
                    scenarios::burst::run(&target, events, &settings, &mut report).await.map(|_| ())
                }
                .await;
                record(format!("Burst on {kind}"), outcome);
            }
            if cli.runs(Scenario::Ticking) {
                let outcome = async {
                    quiet.wait().await?;
                    scenarios::ticking::run(&target, &settings, &mut report).await.map(|_| ())
                }
                .await;
                record(format!("Ticking on {kind}"), outcome);
            }
            peer.stop().await;
        }
    }
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
    if !failures.is_empty() {
        println!("## Failed\n");
        for failure in &failures {
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
        Scenario::Replay => scenarios::replay::script(settings),
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
            _ => scenarios::replay::run(&target, settings, report).await?,
        };
        if settings.strict {
            let stored = gateway.database.event_count().await?;
            if stored != streamed as i64 {
                return Err(Error::msg(format!(
                    "{}: the events table holds {stored} events, {streamed} were streamed",
                    target.name
                )));
            }
        }
        Ok(())
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
