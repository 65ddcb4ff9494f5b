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
use crate::http::Transport;
use crate::procfs::{rss_kib, CpuSnapshot};
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
    let name = target.name.clone();
    let client = target.client();
    let mut stored = warm_up(&client, &target, settings).await?;
    let sizes = &settings.sizes;
    let chats = sizes.chats;
    let mut figures: [Vec<f64>; 8] = Default::default();
    let mut cpu = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    // Once, before any chat: the allocator keeps what a repetition freed, so a later one's
    // own baseline would hide the chats' memory.
    let rss_before = rss_kib(target.pid)?;
    while let Some(repetition) = repetitions.next() {
        quiet.wait().await?;
        let tools_before = model.state.tool_calls.load(Ordering::Relaxed);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = monitor(target.pid, stop.clone());
        let stagger = Duration::from_secs(1) / chats.max(1) as u32;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..chats {
            let client = client.clone();
            let url = target.run_url.clone();
            let thread = unique("chat");
            let body = chat_body(&thread);
            let options = ReadOptions { tokens: true, ..settings.read_options() };
            let timeout = settings.timeout;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(stagger * i as u32).await;
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
            }));
        }
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
            stored += chat.received.events;
        }
        let tool_calls = model.state.tool_calls.load(Ordering::Relaxed) - tools_before;
        if tool_calls != chats {
            bail!("chat on {name}: the HTTP tool was called {tool_calls} times for {chats} chats");
        }
        // The window: every chat streaming its answer, or else the whole answer phase.
        let firsts = done.iter().filter_map(|(_, c)| c.received.tokens.first().map(|t| t.received_us));
        let lasts = done.iter().filter_map(|(_, c)| c.received.tokens.last().map(|t| t.received_us));
        let (mut from_us, mut to_us) = (firsts.clone().max().unwrap_or(0), lasts.clone().min().unwrap_or(0));
        let mut window_kind = "every chat streaming";
        if to_us < from_us + 1_000_000 {
            from_us = firsts.min().unwrap_or(0);
            to_us = lasts.max().unwrap_or(0);
            window_kind = "whole answer phase (the chats overlapped < 1 s)";
        }
        let inside = samples.iter().filter(|s| s.at_us >= from_us && s.at_us <= to_us);
        let (first_sample, last_sample) = match (inside.clone().next(), inside.clone().next_back()) {
            (Some(a), Some(b)) if b.at_us > a.at_us => (a, b),
            _ => match (samples.first(), samples.last()) {
                (Some(a), Some(b)) => (a, b),
                _ => bail!("chat on {name}: no CPU sample was taken"),
            },
        };
        let use_ = first_sample.cpu.until(&last_sample.cpu);
        let mut latencies: Vec<u64> = done
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
        let ms = |q: f64| percentile(&latencies, q).map_or(0.0, |us| us as f64 / 1000.0);
        let per_thousand = use_.server / (rate / 1000.0).max(1e-9);
        let peak = samples.iter().map(|s| s.rss_kib).max().unwrap_or(rss_before);
        let per_chat = peak.saturating_sub(rss_before) as f64 / chats.max(1) as f64;
        eprintln!(
            "  {name} chat {repetition}/{}: {chats} chats in {:.1} s; window {window_kind} {window_secs:.1} s: {rate:.0} tokens/s, p50 {:.2} / p99 {:.2} / p999 {:.2} ms; CPU: server {:.0} % ({per_thousand:.1} % per 1,000 tokens/s), postgres {:.0} %, tool {:.0} %, other {:.0} %; RSS peak {:.1} MiB ({per_chat:.1} KiB per chat)",
            settings.repeats,
            elapsed.as_secs_f64(),
            ms(0.5),
            ms(0.99),
            ms(0.999),
            use_.server,
            use_.postgres,
            use_.tool,
            use_.other,
            peak as f64 / 1024.0
        );
        if !repetitions.keep(use_.other) {
            continue;
        }
        for (figure, value) in figures.iter_mut().zip([
            rate,
            per_thousand,
            ms(0.5),
            ms(0.99),
            ms(0.999),
            peak as f64,
            per_chat,
            elapsed.as_secs_f64() * 1000.0,
        ]) {
            figure.push(value);
        }
        cpu.push(use_);
    }
    if settings.strict {
        let in_table = gateway.database.event_count().await?;
        if in_table != stored as i64 {
            bail!("chat on {name}: the events table holds {in_table} events, {stored} were streamed");
        }
    }
    let key = format!("{name}/chat");
    let label = format!(
        "chat {} chats × {} tokens at {}/s (openai agent, a tool call and a note each), {name}",
        count(chats),
        count(sizes.chat_tokens),
        sizes.token_rate
    );
    let [rate, per_thousand, p50, p99, p999, peak, per_chat, elapsed] = figures;
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
    add_cpu(report, &key, &label, &cpu);
    Ok(())
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
