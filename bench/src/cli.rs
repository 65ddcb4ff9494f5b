//! The command line: the scenario to run, the stores, the sizes of every scenario (with the
//! fixed tiny sizes of `smoke`), and the settings derived from them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::database::Store;
use crate::http::Transport;
use crate::scenarios::scale_out::{Bus, Layout};
use crate::scenarios::{self, Settings, Sizes};

#[derive(Parser, Debug)]
#[command(name = "agui-bench", about = "Load tool for agui-gateway (see BENCHMARKS.md)")]
pub struct Cli {
    /// What to run: one scenario, `all` of them, or `smoke` (all, tiny, checked, untimed).
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// With `smoke` (or `all`): only these scenarios (repeatable, or a list: `--only soak,history`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Scenario>,
    /// Stores to run the gateway on (repeatable).
    #[arg(long, value_enum, default_values_t = [Store::Postgres, Store::Sqlite])]
    pub store: Vec<Store>,
    /// The gateway binary.
    #[arg(long, default_value_os_t = default_gateway())]
    pub gateway: PathBuf,
    /// PostgreSQL server (a fresh database is created on it per run and dropped after).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pub postgres: String,
    /// Repetitions of each measurement (min/median/max are reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Also run the burst and ticking scenarios on the peers (installed by bench/peers/setup.sh).
    #[arg(long)]
    pub peers: bool,
    /// TOML appended to the config of every gateway the tool starts (settings other than
    /// `[[agents]]`, e.g. `[turns]`); the defaults of config/gateway.toml otherwise.
    #[arg(long)]
    pub gateway_config: Option<PathBuf>,
    /// Where the peers are installed.
    #[arg(long, default_value_os_t = crate::peers::default_dir())]
    pub peers_dir: PathBuf,
    /// Write the figures and verdicts as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Characters per content delta (200 ≈ 300-byte stored events).
    #[arg(long, default_value_t = 200)]
    pub bytes: usize,
    #[arg(long, default_value_t = 100_000)]
    pub burst_events: u64,
    #[arg(long, default_value_t = 100)]
    pub fan_in_turns: u64,
    #[arg(long, default_value_t = 2_000)]
    pub fan_in_events: u64,
    #[arg(long, default_value_t = 1_000)]
    pub tick_streams: u64,
    /// Ticks per second per stream.
    #[arg(long, default_value_t = 10)]
    pub tick_rate: u64,
    /// Length of the ticking measurement window.
    #[arg(long, default_value_t = 6)]
    pub tick_secs: u64,
    #[arg(long, default_value_t = 10_000)]
    pub idle_streams: u64,
    #[arg(long, default_value_t = 10_000)]
    pub replay_events: u64,
    /// Seconds each raw INSERT measurement lasts.
    #[arg(long, default_value_t = 2.0)]
    pub raw_secs: f64,
    /// Events in the CopilotKit peer's burst: its runtime re-clones the growing message on
    /// every event (quadratic), so the full burst size would take hours.
    #[arg(long, default_value_t = 5_000)]
    pub copilotkit_burst_events: u64,
    /// Before each scenario, wait until other work on the machine uses at most this % of one
    /// core…
    #[arg(long, default_value_t = 30.0)]
    pub quiet_below: f64,
    /// …but no longer than this many seconds (0: do not wait).
    #[arg(long, default_value_t = 60)]
    pub quiet_wait_secs: u64,
    /// A repetition during which other work on the machine used more than this % of one core
    /// is measured again (the machine is shared)…
    #[arg(long, default_value_t = 50.0)]
    pub noisy_above: f64,
    /// …at most this many extra times per scenario.
    #[arg(long, default_value_t = 4)]
    pub retries: usize,
    /// How the burst, ticking, idle and handshake scenarios reach the gateway (repeatable):
    /// HTTP/1.1 over TCP, HTTP/1.1 over TLS, HTTP/2 over TLS (fan-in and replay: plain only).
    #[arg(long, value_enum, default_values_t = [Transport::Plain])]
    pub transport: Vec<Transport>,
    /// All three transports side by side (`--transport plain --transport tls-h1 --transport
    /// tls-h2`); `smoke` always runs all three.
    #[arg(long)]
    pub tls: bool,
    /// New connections per repetition of the handshake scenario.
    #[arg(long, default_value_t = 1_000)]
    pub handshakes: u64,
    /// Concurrent chats of the chat scenario (an `openai` agent on a scripted model).
    #[arg(long, default_value_t = 1_000)]
    pub chats: u64,
    /// Tokens in each chat's answer…
    #[arg(long, default_value_t = 200)]
    pub chat_tokens: u64,
    /// …streamed at this many per second per chat.
    #[arg(long, default_value_t = 50)]
    pub token_rate: u64,
    /// Waiting turns, a stream each, on one instance over plain HTTP/1.1…
    #[arg(long, default_value_t = 10_000)]
    pub waiting_turns: u64,
    /// …and then this many over HTTP/2 with TLS (past the open-file limit; 0: skip).
    #[arg(long, default_value_t = 50_000)]
    pub waiting_turns_max: u64,
    /// Seconds the waiting scenario counts lease writes over.
    #[arg(long, default_value_t = 10)]
    pub waiting_secs: u64,
    /// Events in the upstream scenario's as-fast-as-sent run (read directly and through the
    /// gateway)…
    #[arg(long, default_value_t = 100_000)]
    pub upstream_events: u64,
    /// …and deltas in its paced run, for latency…
    #[arg(long, default_value_t = 5_000)]
    pub upstream_paced_events: u64,
    /// …sent at this many per second.
    #[arg(long, default_value_t = 1_000)]
    pub upstream_rate: u64,
    /// Upper bound of one repetition of a scenario.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
    /// Events the history scenario writes before the gateway starts…
    #[arg(long, default_value_t = 10_000_000)]
    pub history_events: u64,
    /// …over this many threads (one finished turn each).
    #[arg(long, default_value_t = 100_000)]
    pub history_threads: u64,
    /// Fresh runs whose start (POST → RUN_STARTED) the history scenario times, per repetition
    /// (enough for a p99 that is not one or two slow starts: with 200 it moved 2.5 × from run
    /// to run on the same empty database).
    #[arg(long, default_value_t = 2_000)]
    pub history_starts: u64,
    /// Seconds of chat load in the soak scenario (two instances on one PostgreSQL database).
    #[arg(long, default_value_t = 1800)]
    pub soak_secs: u64,
    /// New chats per second in the soak (each `--chat-tokens` at `--token-rate`; the default,
    /// 10/s of 200 tokens at 50/s, offers 2,000 tokens/s: see BENCHMARKS.md).
    #[arg(long, default_value_t = 10.0)]
    pub soak_chats_per_sec: f64,
    /// Every this many seconds, a quarter of the open streams are dropped and resumed with
    /// `Last-Event-ID` on the other instance…
    #[arg(long, default_value_t = 30)]
    pub soak_reconnect_secs: u64,
    /// …and every this many seconds one instance is killed (SIGKILL) and restarted, in turn.
    #[arg(long, default_value_t = 300)]
    pub soak_kill_secs: u64,
    /// Gateway instances on one database in the scale-out scenario (repeatable, or a list:
    /// `--instances 3,6`).
    #[arg(long, value_delimiter = ',', default_values_t = [scenarios::scale_out::INSTANCES])]
    pub instances: Vec<usize>,
    /// How the scale-out instances hear of each other's appends (repeatable).
    #[arg(long, value_enum, default_values_t = [Bus::Postgres])]
    pub bus: Vec<Bus>,
    /// The NATS server of `--bus nats` (one is started as the tool's child if none answers).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Burst,
    FanIn,
    Ticking,
    Idle,
    Replay,
    /// The replay's turn read back over SSE and over the binary transport.
    Binary,
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
    pub fn settings(&self) -> Settings {
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
    pub fn transports(&self) -> Vec<Transport> {
        if self.tls || self.scenario == Scenario::Smoke {
            return Transport::ALL.to_vec();
        }
        let mut transports = self.transport.clone();
        transports.sort();
        transports.dedup();
        transports
    }

    /// Whether `scenario` runs: `smoke` runs all; `all` all but the long growth scenarios.
    pub fn runs(&self, scenario: Scenario) -> bool {
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
    pub fn layouts(&self) -> Vec<Layout> {
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
