//! Scenario *chat*: N concurrent chats on an `openai`-kind agent, against a scripted
//! OpenAI-compatible model server and an HTTP tool that the tool itself serves on 127.0.0.1
//! (`super::model`).
//!
//! Each chat's first model call streams two tool calls in the real chat-completions wire format
//! (`data: {chat.completion.chunk}` lines, `data: [DONE]`): the HTTP tool `lookup` and the
//! `board_write` built-in (a board note). The second call, made once both results are in,
//! streams an answer of `chat_tokens` tokens at `token_rate` per second, each token's text the
//! wall-clock microsecond it left the model server (` t<micros>`), so the client measures
//! model→client latency per token, through the gateway's durable log.
//!
//! Figures: tokens/s delivered, the gateway's CPU per 1,000 tokens/s, token latency
//! p50/p99/p999, the gateway's RSS (peak, and per chat above the idle gateway before the first
//! repetition), PostgreSQL's
//! CPU. They are taken over the window in which every chat is streaming its answer (from the
//! last chat's first token to the first chat's last one), or, when the chats' answers overlap
//! by less than a second, over the whole answer phase (first token to last).
//!
//! Smoke checks each chat: every token the model server sent for it arrived exactly once and in
//! order, both tool calls started and got results, the board note's `STATE_DELTA` arrived, the
//! tool endpoint was called once per chat, and the events table holds what was streamed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::model::{agent, ModelServer, NOTE};
use super::{add_cpu, count, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Context, Error, Result};
use crate::gateway::{Gateway, GatewaySettings};
use crate::http::{Client, Transport};
use crate::procfs::{rss_kib, CpuSnapshot, CpuUse};
use crate::report::{Report, Unit};
use crate::sse::{self, ReadOptions, Received};
use crate::stats::percentile;
use crate::target::Target;

/// How often the monitor samples CPU and RSS.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// A monitor sample: when, CPU snapshot, gateway RSS.
struct Sample {
    at_us: u64,
    cpu: CpuSnapshot,
    rss_kib: u64,
}

/// Samples CPU and RSS every [`SAMPLE_EVERY`] until `stop` is set.
fn monitor(pid: u32, stop: Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        loop {
            if let (Ok(cpu), Ok(rss_kib)) = (CpuSnapshot::take(pid), rss_kib(pid)) {
                samples.push(Sample { at_us: wall_us(), cpu, rss_kib });
            }
            if stop.load(Ordering::Relaxed) {
                return samples;
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    })
}

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    transport: Transport,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let sizes = &settings.sizes;
    let model = ModelServer::start(sizes.chat_tokens, sizes.token_rate, settings.strict, false).await?;
    let database = Database::create(store, &gateways.postgres).await?;
    let gateway = Gateway::start_on(gateways, database, transport, &agent(&model)).await?;
    let outcome = measure(&gateway, &model, settings, quiet, report).await;
    let log = gateway.log_tail();
    gateway.stop().await?;
    outcome.map_err(|e| Error::msg(format!("{e}\n--- gateway log ---\n{log}")))
}

/// One chat's result, checked.
struct Chat {
    received: Received,
}

async fn measure(
    gateway: &Gateway,
    model: &ModelServer,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let target: Target = gateway.target();
    let client = target.client();
    let mut stored = warm_up(&client, &target, settings).await?;
    let mut figures = Figures::default();
    let mut repetitions = Repetitions::new(settings);
    // Once, before any chat: the allocator keeps what a repetition freed, so a later one's
    // own baseline would hide the chats' memory.
    let rss_before = rss_kib(target.pid)?;
    while let Some(repetition) = repetitions.next() {
        quiet.wait().await?;
        let done = chat_once(&client, &target, model, settings).await?;
        stored += done.chats.iter().map(|(_, chat)| chat.received.events).sum::<u64>();
        let measured = Measured::of(&done, rss_before, settings.sizes.chats, &target.name)?;
        measured.print(&target.name, repetition, settings);
        if repetitions.keep(measured.cpu.other) {
            figures.push(measured);
        }
    }
    super::check_stored(settings, &gateway.database, stored, &format!("chat on {}", target.name)).await?;
    figures.add_to(report, &target.name, settings);
    Ok(())
}

/// One repetition's chats, each checked, with the CPU and RSS samples taken meanwhile.
struct Done {
    chats: Vec<(String, Chat)>,
    samples: Vec<Sample>,
    elapsed: Duration,
}

/// Runs `chats` chats spread over one second while the monitor samples the gateway; checks
/// each chat and that the HTTP tool was called once per chat.
async fn chat_once(client: &Client, target: &Target, model: &ModelServer, settings: &Settings) -> Result<Done> {
    let chats = settings.sizes.chats;
    let tools_before = model.state.tool_calls.load(Ordering::Relaxed);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = monitor(target.pid, stop.clone());
    let stagger = Duration::from_secs(1) / chats.max(1) as u32;
    let started = Instant::now();
    let tasks: Vec<_> = (0..chats)
        .map(|i| tokio::spawn(one_chat(client.clone(), target.run_url.clone(), stagger * i as u32, settings)))
        .collect();
    let mut done = Vec::with_capacity(chats as usize);
    let mut failure = None;
    for task in tasks {
        match task.await.context("a chat client task failed") {
            Ok(Ok(chat)) => done.push(chat),
            Ok(Err(error)) | Err(error) => {
                failure.get_or_insert(error);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.context("the CPU/RSS monitor failed")?;
    if let Some(error) = failure {
        return Err(error);
    }
    let elapsed = started.elapsed();
    for (thread, chat) in &done {
        check_chat(thread, chat, model, settings)?;
    }
    let tool_calls = model.state.tool_calls.load(Ordering::Relaxed) - tools_before;
    if tool_calls != chats {
        bail!("chat on {}: the HTTP tool was called {tool_calls} times for {chats} chats", target.name);
    }
    Ok(Done { chats: done, samples, elapsed })
}

/// One chat on a new thread, started after `delay` and read to its end within the timeout.
fn one_chat(
    client: Client,
    url: String,
    delay: Duration,
    settings: &Settings,
) -> impl std::future::Future<Output = Result<(String, Chat)>> + Send + 'static {
    let thread = unique("chat");
    let body = chat_body(&thread);
    let options = ReadOptions { tokens: true, ..settings.read_options() };
    let timeout = settings.timeout;
    async move {
        tokio::time::sleep(delay).await;
        let work = async {
            let response = sse::open(&client, &url, body, None).await?;
            let mut received = Received::default();
            sse::read(response, &mut received, options).await?;
            Ok::<_, Error>(received)
        };
        let received = tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| Error::msg(format!("chat {thread} took over {timeout:?}")))??;
        Ok::<_, Error>((thread, Chat { received }))
    }
}

/// One repetition's figures, over its window.
struct Measured {
    window_kind: &'static str,
    window_secs: f64,
    /// Token latencies inside the window, sorted (µs).
    latencies: Vec<u64>,
    /// Tokens per second inside the window.
    rate: f64,
    cpu: CpuUse,
    /// The gateway's CPU per 1,000 tokens/s (% of one core).
    per_thousand: f64,
    peak_kib: u64,
    per_chat_kib: f64,
    elapsed: Duration,
}

impl Measured {
    fn of(done: &Done, rss_before: u64, chats: u64, name: &str) -> Result<Measured> {
        let (from_us, to_us, window_kind) = window(&done.chats);
        let samples = &done.samples;
        let inside = samples.iter().filter(|s| s.at_us >= from_us && s.at_us <= to_us);
        let (first_sample, last_sample) = match (inside.clone().next(), inside.clone().next_back()) {
            (Some(a), Some(b)) if b.at_us > a.at_us => (a, b),
            _ => match (samples.first(), samples.last()) {
                (Some(a), Some(b)) => (a, b),
                _ => bail!("chat on {name}: no CPU sample was taken"),
            },
        };
        let cpu = first_sample.cpu.until(&last_sample.cpu);
        let mut latencies: Vec<u64> = done
            .chats
            .iter()
            .flat_map(|(_, c)| c.received.tokens.iter())
            .filter(|t| t.received_us >= from_us && t.received_us <= to_us)
            .map(|t| t.received_us.saturating_sub(t.sent_us))
            .collect();
        if latencies.is_empty() {
            bail!("chat on {name}: no token arrived in the measurement window");
        }
        latencies.sort_unstable();
        let window_secs = (to_us - from_us).max(1) as f64 / 1e6;
        let rate = latencies.len() as f64 / window_secs;
        let per_thousand = cpu.server / (rate / 1000.0).max(1e-9);
        let peak_kib = samples.iter().map(|s| s.rss_kib).max().unwrap_or(rss_before);
        let per_chat_kib = peak_kib.saturating_sub(rss_before) as f64 / chats.max(1) as f64;
        let elapsed = done.elapsed;
        Ok(Measured { window_kind, window_secs, latencies, rate, cpu, per_thousand, peak_kib, per_chat_kib, elapsed })
    }

    /// A latency quantile, in ms.
    fn ms(&self, q: f64) -> f64 {
        percentile(&self.latencies, q).map_or(0.0, |us| us as f64 / 1000.0)
    }

    fn print(&self, name: &str, repetition: usize, settings: &Settings) {
        let (window_kind, window_secs, rate, use_) = (self.window_kind, self.window_secs, self.rate, &self.cpu);
        let (per_thousand, per_chat, chats) = (self.per_thousand, self.per_chat_kib, settings.sizes.chats);
        eprintln!(
            "  {name} chat {repetition}/{}: {chats} chats in {:.1} s; window {window_kind} {window_secs:.1} s: {rate:.0} tokens/s, p50 {:.2} / p99 {:.2} / p999 {:.2} ms; CPU: server {:.0} % ({per_thousand:.1} % per 1,000 tokens/s), postgres {:.0} %, tool {:.0} %, other {:.0} %; RSS peak {:.1} MiB ({per_chat:.1} KiB per chat)",
            settings.repeats,
            self.elapsed.as_secs_f64(),
            self.ms(0.5),
            self.ms(0.99),
            self.ms(0.999),
            use_.server,
            use_.postgres,
            use_.tool,
            use_.other,
            self.peak_kib as f64 / 1024.0
        );
    }
}

/// The window: every chat streaming its answer (from the last chat's first token to the first
/// chat's last one), or else the whole answer phase. Returns its ends (µs) and what it is.
fn window(done: &[(String, Chat)]) -> (u64, u64, &'static str) {
    let firsts = done.iter().filter_map(|(_, c)| c.received.tokens.first().map(|t| t.received_us));
    let lasts = done.iter().filter_map(|(_, c)| c.received.tokens.last().map(|t| t.received_us));
    let (from_us, to_us) = (firsts.clone().max().unwrap_or(0), lasts.clone().min().unwrap_or(0));
    if to_us < from_us + 1_000_000 {
        let (from_us, to_us) = (firsts.min().unwrap_or(0), lasts.max().unwrap_or(0));
        return (from_us, to_us, "whole answer phase (the chats overlapped < 1 s)");
    }
    (from_us, to_us, "every chat streaming")
}

/// The kept repetitions' figures, one sample each.
#[derive(Default)]
struct Figures {
    /// Rate, CPU per 1,000 tokens/s, p50, p99, p999, RSS peak, RSS per chat, elapsed (ms).
    values: [Vec<f64>; 8],
    cpu: Vec<CpuUse>,
}

impl Figures {
    fn push(&mut self, m: Measured) {
        for (figure, value) in self.values.iter_mut().zip([
            m.rate,
            m.per_thousand,
            m.ms(0.5),
            m.ms(0.99),
            m.ms(0.999),
            m.peak_kib as f64,
            m.per_chat_kib,
            m.elapsed.as_secs_f64() * 1000.0,
        ]) {
            figure.push(value);
        }
        self.cpu.push(m.cpu);
    }

    fn add_to(self, report: &mut Report, name: &str, settings: &Settings) {
        let sizes = &settings.sizes;
        let key = format!("{name}/chat");
        let label = format!(
            "chat {} chats × {} tokens at {}/s (openai agent, a tool call and a note each), {name}",
            count(sizes.chats),
            count(sizes.chat_tokens),
            sizes.token_rate
        );
        let [rate, per_thousand, p50, p99, p999, peak, per_chat, elapsed] = self.values;
        report.add(format!("{key}/rate"), format!("{label}: tokens delivered"), Unit::PerSec, rate, None);
        report.add(
            format!("{key}/cpu-per-1000"),
            format!("{label}: gateway CPU per 1,000 tokens/s"),
            Unit::Core,
            per_thousand,
            None,
        );
        for (suffix, what, values) in [
            ("p50", "token latency model→client p50", p50),
            ("p99", "token latency model→client p99", p99),
            ("p999", "token latency model→client p999", p999),
            ("elapsed", "all chats done", elapsed),
        ] {
            report.add(format!("{key}/{suffix}"), format!("{label}: {what}"), Unit::Ms, values, None);
        }
        report.add(format!("{key}/rss-peak"), format!("{label}: gateway RSS peak"), Unit::KiB, peak, None);
        report.add(
            format!("{key}/rss-per-chat"),
            format!("{label}: gateway RSS per chat (peak − idle)"),
            Unit::KiB,
            per_chat,
            None,
        );
        add_cpu(report, &key, &label, &self.cpu);
    }
}

/// A chat's run: one user message whose text is the chat's id (the scripted model keys its
/// record of sent tokens by it).
pub fn chat_body(thread: &str) -> String {
    json!({
        "threadId": thread,
        "runId": "run-1",
        "protocolVersion": "1.0",
        "state": {},
        "messages": [{ "id": format!("{thread}-user"), "role": "user", "content": thread }],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    })
    .to_string()
}

fn check_chat(thread: &str, chat: &Chat, model: &ModelServer, settings: &Settings) -> Result<()> {
    let received = &chat.received;
    received.expect_finished(&format!("chat {thread}"))?;
    let wanted = settings.sizes.chat_tokens;
    if received.tokens.len() as u64 != wanted {
        bail!("chat {thread}: {} tokens arrived of {wanted}", received.tokens.len());
    }
    if received.tool_call_starts < 2 || received.tool_call_results < 2 {
        bail!(
            "chat {thread}: {} TOOL_CALL_START and {} TOOL_CALL_RESULT events (the lookup and the note: 2 each)",
            received.tool_call_starts,
            received.tool_call_results
        );
    }
    if !settings.strict {
        return Ok(());
    }
    let answers = model.state.answers(thread);
    let Some(sent) = answers.last().filter(|a| a.complete).map(|a| a.stamps.clone()) else {
        bail!("chat {thread}: the model server has no record of a whole answer")
    };
    let got: Vec<u64> = received.tokens.iter().map(|t| t.sent_us).collect();
    if got != sent {
        let first_difference = got.iter().zip(&sent).position(|(a, b)| a != b);
        bail!(
            "chat {thread}: the tokens arrived differ from those sent ({} arrived, {} sent, first difference at {first_difference:?})",
            got.len(),
            sent.len()
        );
    }
    if !received.state_deltas.iter().any(|d| d.contains(NOTE)) {
        bail!(
            "chat {thread}: no STATE_DELTA with the board note arrived ({} STATE_DELTA)",
            received.state_deltas.len()
        );
    }
    Ok(())
}
