//! Scenario *soak*: chat load for `soak_secs` on TWO gateway instances sharing one PostgreSQL
//! database, with streams moved between them and instances killed, checking that no token is
//! lost or duplicated and watching each instance's memory over time.
//!
//! - Load: `soak_chats_per_sec` new chats a second, each a run of the chat scenario's `openai`
//!   agent on its scripted model (`super::model`: two tool calls, then `soak_tokens` tokens at
//!   `token_rate` per second, each token's text a unique stamp), started on the two instances
//!   in turn.
//! - Every `soak_reconnect_secs`: a quarter of the open streams (a different quarter each
//!   round) are dropped and resumed with `Last-Event-ID` on the other instance.
//! - Every `soak_kill_secs`: one instance (in turn) is killed with SIGKILL and started again
//!   on the same port with the same config. Its turns are taken over by the other instance
//!   once their lease lapses (the tool shortens `[turns]` to `lease_ms = 2000`, `heartbeat_ms =
//!   500`, `sweep_ms = 500` unless `--gateway-config` sets `[turns]`), and its clients resume
//!   with `Last-Event-ID` on the surviving instance.
//! - Every `soak_sample_secs` (10 s): each instance's RSS. Printed as a table over time. The
//!   growth of an instance is taken per process (a kill starts a new one): the mean RSS of its
//!   last minute ÷ the mean of the minute after its warm-up, the warm-up being its first two
//!   minutes (shorter runs scale both: warm-up a quarter, window a sixth of the run); a process
//!   too short-lived for both is left out.
//!
//! Tokens: the model server records every answer it streamed to a chat, in order. Across all
//! of a chat's reconnects, every token of the chat's last answer must arrive exactly once; an
//! answer that a later one replaced (a gateway was killed during it and the turn was taken
//! over, so the model was asked again) must have arrived as a prefix: its tail may never have
//! been committed, and is counted as such, not as lost. A token arriving twice is duplicated;
//! one missing before a token that arrived, or from the last answer, is lost. The pass: no
//! lost, no duplicated token, no failed chat.

mod tally;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::chat::chat_body;
use super::model::{agent, ModelServer};
use super::{count, unique, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Error, Result};
use crate::gateway::{Gateway, GatewaySettings};
use crate::http::{Client, Transport};
use crate::procfs::rss_kib;
use crate::report::{Report, Unit};
use crate::sse::{self, ReadOptions, Received};
use tally::{tally, Tally};

/// The instances sharing the database.
const INSTANCES: usize = 2;
/// Lease settings that let a takeover happen within seconds of a kill.
const FAST_LEASES: &str = "\n[turns]\nlease_ms = 2000\nheartbeat_ms = 500\nsweep_ms = 500\n";
/// Between attempts to reach an instance that did not answer.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// What every chat task shares.
struct Shared {
    urls: Vec<String>,
    clients: Vec<Client>,
    /// Whether each instance is up (false from its kill until it is ready again).
    alive: Vec<AtomicBool>,
    tokens_received: AtomicU64,
    moved: AtomicU64,
    /// Streams that broke (a killed instance) and were resumed elsewhere.
    resumed_after_break: AtomicU64,
    /// Requests that could not reach an instance (retried on the other).
    unreachable: AtomicU64,
    chats_done: AtomicU64,
}

impl Shared {
    fn new(instances: &[Gateway]) -> Shared {
        Shared {
            urls: instances.iter().map(|g| g.url("/v1/agui/agents/bench")).collect(),
            clients: instances.iter().map(Gateway::client).collect(),
            alive: (0..INSTANCES).map(|_| AtomicBool::new(true)).collect(),
            tokens_received: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            resumed_after_break: AtomicU64::new(0),
            unreachable: AtomicU64::new(0),
            chats_done: AtomicU64::new(0),
        }
    }

    /// The instance to go to after `from`: the other one, or `from` when the other is down.
    fn next_after(&self, from: usize) -> usize {
        let other = (from + 1) % INSTANCES;
        if self.alive[other].load(Ordering::Relaxed) {
            other
        } else {
            from
        }
    }
}

/// One RSS sample of one instance.
#[derive(Debug, Clone, Copy)]
struct RssSample {
    at_secs: f64,
    pid: u32,
    kib: u64,
}

/// The load's progress at a sampling time.
#[derive(Debug, Clone, Copy)]
struct Progress {
    at_secs: f64,
    chats_done: u64,
    tokens_received: u64,
}

pub async fn run(gateways: &GatewaySettings, settings: &Settings, report: &mut Report) -> Result<()> {
    let sizes = &settings.sizes;
    let model = ModelServer::start(sizes.soak_tokens, sizes.token_rate, true, true).await?;
    let mut gateways = gateways.clone();
    if !gateways.extra_config.contains("[turns]") {
        gateways.extra_config.push_str(FAST_LEASES);
    }
    let database = Database::create(Store::Postgres, &gateways.postgres).await?;
    let mut started: Vec<Gateway> = Vec::new();
    let outcome = async {
        let first = Gateway::start_on(&gateways, database, Transport::Plain, &agent(&model)).await?;
        let shared = first.database.shared();
        started.push(first);
        started.push(Gateway::start_on(&gateways, shared, Transport::Plain, &agent(&model)).await?);
        soak(&mut started, &gateways, &model, settings, report).await
    }
    .await;
    crate::gateway::stop_all(started, outcome).await
}

async fn soak(
    instances: &mut [Gateway],
    gateways: &GatewaySettings,
    model: &ModelServer,
    settings: &Settings,
    report: &mut Report,
) -> Result<()> {
    let sizes = &settings.sizes;
    let shared = Arc::new(Shared::new(instances));
    let pids: Arc<Vec<AtomicU32>> = Arc::new(instances.iter().map(|g| AtomicU32::new(g.pid)).collect());
    let started = Instant::now();
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(pids.clone(), shared.clone(), sizes.soak_sample_secs, started, stop_sampling.clone());
    let mut load = Load {
        instances,
        gateways,
        shared: &shared,
        pids: &pids,
        started,
        tasks: Vec::new(),
        chats: 0,
        rounds: 0,
        kills: 0,
    };
    load.drive(settings).await?;
    let Load { tasks, chats, rounds, kills, .. } = load;
    eprintln!(
        "  soak: {} chats started over {:.0} s; waiting for the open ones to end",
        count(chats),
        started.elapsed().as_secs_f64()
    );
    let outcomes = join_chats(tasks).await;
    stop_sampling.store(true, Ordering::Relaxed);
    let (samples, progress) = sampler.await.map_err(|e| Error::msg(format!("the RSS sampler failed: {e}")))?;
    let tally = tally(&outcomes, &model.state);
    let elapsed = started.elapsed().as_secs_f64();
    print_rss_table(&samples, &progress);
    let growth = growth(&samples, sizes.soak_secs as f64);
    for (n, figures) in growth.iter().enumerate() {
        for (pid, ratio) in figures {
            eprintln!("  soak: instance {n} (pid {pid}) RSS growth {ratio:.3} (last minute ÷ minute after warm-up)");
        }
    }
    print_summary(&tally, &shared, model, (chats, kills), elapsed);
    add_figures(report, &tally, &growth, &samples, settings);
    verdict(&tally, &shared, (rounds, kills), settings)
}

/// The load as it is driven: new chats at their rate, reconnect rounds and kills when due.
struct Load<'a> {
    instances: &'a mut [Gateway],
    gateways: &'a GatewaySettings,
    shared: &'a Arc<Shared>,
    pids: &'a Arc<Vec<AtomicU32>>,
    started: Instant,
    /// Each chat's thread and task, in the order they started.
    tasks: Vec<(String, tokio::task::JoinHandle<Result<Received>>)>,
    /// Chats started, reconnect rounds and kills so far.
    chats: u64,
    rounds: u64,
    kills: u64,
}

impl Load<'_> {
    /// Starts chats, moves streams and kills instances, each when due, for `soak_secs`.
    async fn drive(&mut self, settings: &Settings) -> Result<()> {
        let sizes = &settings.sizes;
        let (moves, _) = tokio::sync::watch::channel(0u64);
        let every = Duration::from_secs_f64(1.0 / sizes.soak_chats_per_sec);
        let length = Duration::from_secs(sizes.soak_secs);
        let reconnect_every = (sizes.soak_reconnect_secs > 0).then(|| Duration::from_secs(sizes.soak_reconnect_secs));
        let kill_every = (sizes.soak_kill_secs > 0).then(|| Duration::from_secs(sizes.soak_kill_secs));
        let mut next_chat = Duration::ZERO;
        let mut next_move = reconnect_every.unwrap_or(Duration::MAX);
        let mut next_kill = kill_every.unwrap_or(Duration::MAX);
        while self.started.elapsed() < length {
            let now = self.started.elapsed();
            while next_chat <= now {
                self.start_chat(&moves, settings);
                next_chat += every;
            }
            if now >= next_move {
                self.rounds += 1;
                moves.send_replace(self.rounds);
                eprintln!(
                    "  soak {:.0} s: reconnect round {}: a quarter of the open streams move",
                    now.as_secs_f64(),
                    self.rounds
                );
                next_move += reconnect_every.unwrap_or(Duration::MAX);
            }
            if now >= next_kill {
                self.kill_one(now).await?;
                next_kill += kill_every.unwrap_or(Duration::MAX);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Starts the next chat, on the instances in turn.
    fn start_chat(&mut self, moves: &tokio::sync::watch::Sender<u64>, settings: &Settings) {
        let thread = unique("soak");
        let first = (self.chats as usize) % INSTANCES;
        let task = chat(self.shared.clone(), thread.clone(), self.chats, first, moves.subscribe(), settings.clone());
        self.tasks.push((thread, tokio::spawn(task)));
        self.chats += 1;
    }

    /// Kills the next instance in turn (SIGKILL) and starts it again.
    async fn kill_one(&mut self, now: Duration) -> Result<()> {
        let victim = (self.kills as usize) % INSTANCES;
        self.kills += 1;
        let shared = self.shared;
        shared.alive[victim].store(false, Ordering::Relaxed);
        self.instances[victim].kill().await;
        eprintln!("  soak {:.0} s: instance {victim} killed (SIGKILL); restarting it", now.as_secs_f64());
        // The load waits for the restarted instance to be ready (a second or two): chats due
        // meanwhile start late, not dropped; the open ones go on on the other instance.
        self.instances[victim].restart(self.gateways).await?;
        self.pids[victim].store(self.instances[victim].pid, Ordering::Relaxed);
        shared.alive[victim].store(true, Ordering::Relaxed);
        eprintln!(
            "  soak {:.0} s: instance {victim} is back (pid {})",
            self.started.elapsed().as_secs_f64(),
            self.instances[victim].pid
        );
        Ok(())
    }
}

/// Every chat's outcome, by thread, once each has ended.
async fn join_chats(
    tasks: Vec<(String, tokio::task::JoinHandle<Result<Received>>)>,
) -> Vec<(String, Result<Received>)> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    for (thread, task) in tasks {
        let outcome = match task.await {
            Ok(outcome) => outcome,
            Err(error) => Err(Error::msg(format!("the chat task failed: {error}"))),
        };
        outcomes.push((thread, outcome));
    }
    outcomes
}

/// The soak's one-line account: chats, tokens, moves, kills.
fn print_summary(tally: &Tally, shared: &Shared, model: &ModelServer, (chats, kills): (u64, u64), elapsed: f64) {
    eprintln!(
        "  soak: {} chats in {elapsed:.0} s: {} finished, {} failed; {} tokens sent, {} received, {} lost, {} duplicated, {} never committed (answers cut by a kill), {} unknown; streams moved {}, resumed after a break {}, requests that found an instance down {}; kills {kills}; model answers broken off {}",
        count(chats),
        count(tally.finished),
        count(tally.failed.len() as u64),
        count(tally.sent),
        count(shared.tokens_received.load(Ordering::Relaxed)),
        count(tally.lost),
        count(tally.duplicated),
        count(tally.uncommitted),
        count(tally.unknown),
        count(shared.moved.load(Ordering::Relaxed)),
        count(shared.resumed_after_break.load(Ordering::Relaxed)),
        count(shared.unreachable.load(Ordering::Relaxed)),
        count(model.state.broken.load(Ordering::Relaxed))
    );
}

/// The soak's figures: the token accounting, each instance's RSS growth and last RSS.
fn add_figures(
    report: &mut Report,
    tally: &Tally,
    growth: &[Vec<(u32, f64)>],
    samples: &[Vec<RssSample>],
    settings: &Settings,
) {
    let sizes = &settings.sizes;
    let key = "gateway/postgres/soak";
    let label = format!(
        "soak {} s, {}/s chats × {} tokens at {}/s on 2 instances (moves every {} s, a kill every {} s)",
        sizes.soak_secs,
        sizes.soak_chats_per_sec,
        sizes.soak_tokens,
        sizes.token_rate,
        sizes.soak_reconnect_secs,
        sizes.soak_kill_secs
    );
    for (suffix, what, value) in [
        ("lost", "tokens lost", tally.lost),
        ("duplicated", "tokens duplicated", tally.duplicated),
        ("failed", "chats failed", tally.failed.len() as u64),
        ("uncommitted", "tokens never committed (cut by a kill)", tally.uncommitted),
    ] {
        report.add(format!("{key}/{suffix}"), format!("{label}: {what}"), Unit::Times, vec![value as f64], None);
    }
    for (n, figures) in growth.iter().enumerate() {
        if let Some(worst) = figures.iter().map(|(_, r)| *r).reduce(f64::max) {
            report.add(
                format!("{key}/rss-growth/instance{n}"),
                format!("{label}: instance {n} RSS growth, worst process (last minute ÷ minute after warm-up)"),
                Unit::Times,
                vec![worst],
                None,
            );
        }
        let last: Vec<f64> = samples[n].last().map(|s| s.kib as f64).into_iter().collect();
        report.add(
            format!("{key}/rss-last/instance{n}"),
            format!("{label}: instance {n} RSS at the end"),
            Unit::KiB,
            last,
            None,
        );
    }
}

/// The pass: no failed chat, no lost, duplicated or unknown token; in smoke, at least one
/// reconnect round that moved a stream and one kill.
fn verdict(tally: &Tally, shared: &Shared, (rounds, kills): (u64, u64), settings: &Settings) -> Result<()> {
    if let Some((thread, error)) = tally.failed.first() {
        bail!("soak: {} chats failed; the first, {thread}: {error}", tally.failed.len());
    }
    if tally.lost > 0 || tally.duplicated > 0 || tally.unknown > 0 {
        bail!(
            "soak: {} tokens lost, {} duplicated, {} unknown (first chat with a difference: {})",
            tally.lost,
            tally.duplicated,
            tally.unknown,
            tally.first_bad.as_deref().unwrap_or("-")
        );
    }
    if settings.strict && (rounds == 0 || kills == 0 || shared.moved.load(Ordering::Relaxed) == 0) {
        bail!("soak: the run had {rounds} reconnect rounds (moving {} streams) and {kills} kills: at least one of each expected", shared.moved.load(Ordering::Relaxed));
    }
    Ok(())
}

/// One chat, from its first request to its terminal event, across moves and broken streams.
async fn chat(
    shared: Arc<Shared>,
    thread: String,
    index: u64,
    first: usize,
    mut moves: tokio::sync::watch::Receiver<u64>,
    settings: Settings,
) -> Result<Received> {
    let body = chat_body(&thread);
    let options = ReadOptions { tokens: true, ..settings.read_options() };
    let work = async {
        let mut received = Received::default();
        let mut at = first;
        loop {
            let opened =
                sse::open(&shared.clients[at], &shared.urls[at], body.clone(), received.last_id.as_deref()).await;
            let response = match opened {
                Ok(response) => response,
                Err(_) => {
                    // A killed instance, or one not yet ready again: try the other.
                    shared.unreachable.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(RETRY_AFTER).await;
                    at = shared.next_after(at);
                    continue;
                }
            };
            let tokens_before = received.tokens.len();
            let mut stream = sse::EventStream::new(response);
            let moved = tokio::select! {
                outcome = stream.read(&mut received, options) => {
                    if outcome.is_ok() && received.terminal.is_some() {
                        shared.tokens_received.fetch_add((received.tokens.len() - tokens_before) as u64, Ordering::Relaxed);
                        return Ok::<_, Error>(received);
                    }
                    // The stream broke or ended early: its instance was killed.
                    shared.resumed_after_break.fetch_add(1, Ordering::Relaxed);
                    false
                }
                round = wait_for_my_round(&mut moves, index) => round,
            };
            shared.tokens_received.fetch_add((received.tokens.len() - tokens_before) as u64, Ordering::Relaxed);
            if moved {
                shared.moved.fetch_add(1, Ordering::Relaxed);
            } else {
                tokio::time::sleep(RETRY_AFTER).await;
            }
            at = shared.next_after(at);
        }
    };
    let timeout = settings.timeout;
    let outcome = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| Error::msg(format!("chat {thread} did not end within {timeout:?}")))?;
    shared.chats_done.fetch_add(1, Ordering::Relaxed);
    outcome
}

/// Resolves (true) at the first reconnect round that moves chat `index`: a quarter of the
/// chats each round, a different quarter every round.
// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#[allow(clippy::manual_is_multiple_of)]
async fn wait_for_my_round(moves: &mut tokio::sync::watch::Receiver<u64>, index: u64) -> bool {
    loop {
        if moves.changed().await.is_err() {
            // The load is over: no more rounds.
            std::future::pending::<()>().await;
        }
        let round = *moves.borrow_and_update();
        if (index + round) % 4 == 0 {
            return true;
        }
    }
}

/// Each instance's RSS every `every_secs` until `stop`, by the pid it has at the time.
fn sample_rss(
    pids: Arc<Vec<AtomicU32>>,
    shared: Arc<Shared>,
    every_secs: u64,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<Vec<RssSample>>, Vec<Progress>)> {
    tokio::spawn(async move {
        let mut samples: Vec<Vec<RssSample>> = vec![Vec::new(); pids.len()];
        let mut progress = Vec::new();
        let every = Duration::from_secs(every_secs.max(1));
        let mut next = Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            if started.elapsed() >= next {
                let at_secs = started.elapsed().as_secs_f64();
                for (n, pid) in pids.iter().enumerate() {
                    let pid = pid.load(Ordering::Relaxed);
                    // A killed instance has no RSS until it is back: no sample.
                    if let Ok(kib) = rss_kib(pid) {
                        samples[n].push(RssSample { at_secs, pid, kib });
                    }
                }
                progress.push(Progress {
                    at_secs,
                    chats_done: shared.chats_done.load(Ordering::Relaxed),
                    tokens_received: shared.tokens_received.load(Ordering::Relaxed),
                });
                next += every;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (samples, progress)
    })
}

fn print_rss_table(samples: &[Vec<RssSample>], progress: &[Progress]) {
    println!("## Soak: RSS per instance (MiB; * a new process after a kill)\n");
    println!("| t (s) | instance 0 | instance 1 | chats done | tokens received |");
    println!("|---|---|---|---|---|");
    let mut times: Vec<f64> = progress.iter().map(|p| p.at_secs).collect();
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| (*a - *b).abs() < 0.5);
    let mut last_pid = vec![0u32; samples.len()];
    for t in times {
        let cells: Vec<String> = samples
            .iter()
            .enumerate()
            .map(|(n, list)| match list.iter().find(|s| (s.at_secs - t).abs() < 0.5) {
                Some(s) => {
                    let mark = if last_pid[n] != 0 && last_pid[n] != s.pid { "*" } else { "" };
                    last_pid[n] = s.pid;
                    format!("{:.1}{mark}", s.kib as f64 / 1024.0)
                }
                None => "—".to_string(),
            })
            .collect();
        let (done, tokens) =
            progress.iter().find(|p| (p.at_secs - t).abs() < 0.5).map_or((0, 0), |p| (p.chats_done, p.tokens_received));
        println!("| {t:.0} | {} | {} | {} |", cells.join(" | "), count(done), count(tokens));
    }
    println!();
}

/// Per instance, per process that lived long enough: last-window mean ÷ mean of the window
/// after the warm-up.
fn growth(samples: &[Vec<RssSample>], run_secs: f64) -> Vec<Vec<(u32, f64)>> {
    let warm_up = (run_secs / 4.0).min(120.0);
    let window = (run_secs / 6.0).min(60.0);
    let mean = |list: &[&RssSample]| list.iter().map(|s| s.kib as f64).sum::<f64>() / list.len().max(1) as f64;
    samples
        .iter()
        .map(|list| {
            let mut by_pid: Vec<(u32, Vec<&RssSample>)> = Vec::new();
            for sample in list {
                match by_pid.last_mut() {
                    Some((pid, group)) if *pid == sample.pid => group.push(sample),
                    _ => by_pid.push((sample.pid, vec![sample])),
                }
            }
            by_pid
                .into_iter()
                .filter_map(|(pid, group)| {
                    let born = group.first()?.at_secs;
                    let end = group.last()?.at_secs;
                    if end - born < warm_up + 2.0 * window - 0.5 {
                        return None;
                    }
                    let after: Vec<&RssSample> = group
                        .iter()
                        .copied()
                        .filter(|s| s.at_secs >= born + warm_up && s.at_secs < born + warm_up + window)
                        .collect();
                    let last: Vec<&RssSample> = group.iter().copied().filter(|s| s.at_secs > end - window).collect();
                    if after.is_empty() || last.is_empty() {
                        return None;
                    }
                    Some((pid, mean(&last) / mean(&after).max(1.0)))
                })
                .collect()
        })
        .collect()
}
