//! Scenario *chat*: N concurrent chats on an `openai`-kind agent, against a scripted
//! OpenAI-compatible model server and an HTTP tool that the tool itself serves on 127.0.0.1.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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

/// The HTTP tool's name and the note every chat pins.
const TOOL: &str = "lookup";
const NOTE: &str = "bench note";
/// How often the monitor samples CPU and RSS.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// The scripted model and tool, shared by their connection tasks.
struct Scripted {
    tokens: u64,
    token_rate: u64,
    /// Per chat (its thread id): the stamps of the tokens sent, when `record` is on (smoke).
    sent: Mutex<HashMap<String, Vec<u64>>>,
    record: bool,
    tool_calls: AtomicU64,
    model_calls: AtomicU64,
}

/// A model server and tool endpoint on one loopback port, served until dropped.
struct ModelServer {
    base: String,
    state: Arc<Scripted>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelServer {
    async fn start(tokens: u64, token_rate: u64, record: bool) -> Result<ModelServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the scripted model server")?;
        let address = listener.local_addr().context("the model server's address")?;
        let state = Arc::new(Scripted {
            tokens,
            token_rate: token_rate.max(1),
            sent: Mutex::default(),
            record,
            tool_calls: AtomicU64::new(0),
            model_calls: AtomicU64::new(0),
        });
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else { continue };
                let state = shared.clone();
                tokio::spawn(async move {
                    if let Err(error) = serve(socket, &state).await {
                        eprintln!("    (scripted model server: {error})");
                    }
                });
            }
        });
        Ok(ModelServer { base: format!("http://{address}"), state, task })
    }
}

/// One HTTP/1.1 exchange (the answer closes the connection: `Connection: close`).
async fn serve(mut socket: TcpStream, state: &Scripted) -> Result<()> {
    socket.set_nodelay(true).context("setting TCP_NODELAY")?;
    let mut raw = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(end) = memchr::memmem::find(&raw, b"\r\n\r\n") {
            break end;
        }
        if raw.len() > 1 << 20 {
            bail!("a request head over 1 MiB");
        }
        if socket.read_buf(&mut raw).await.context("reading a request")? == 0 {
            return Ok(()); // a connection closed without a request (a pool's probe)
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while raw.len() < body_start + length {
        if socket.read_buf(&mut raw).await.context("reading a request body")? == 0 {
            bail!("the request body was cut short");
        }
    }
    let body: Value = if length == 0 {
        Value::Null
    } else {
        serde_json::from_slice(&raw[body_start..body_start + length]).context("a request body that is not JSON")?
    };
    if path.ends_with("/tool") {
        state.tool_calls.fetch_add(1, Ordering::Relaxed);
        let answer = json!({ "chat": body["chat"], "found": "a scripted answer" }).to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
            answer.len()
        );
        socket.write_all(response.as_bytes()).await.context("answering a tool call")?;
        return Ok(());
    }
    if !path.ends_with("/chat/completions") {
        socket.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await.ok();
        return Ok(());
    }
    state.model_calls.fetch_add(1, Ordering::Relaxed);
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let chat = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .await
        .context("answering a model call")?;
    if results == 0 {
        // Both calls in one answer, the arguments split over two chunks each as models do.
        let args = json!({ "chat": chat }).to_string();
        let (head, tail) = args.split_at(args.len() / 2);
        let note = json!({ "text": NOTE, "tags": ["bench"] }).to_string();
        let (note_head, note_tail) = note.split_at(note.len() / 2);
        let mut answer = String::new();
        answer.push_str(&chunk(json!({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_lookup", "type": "function", "function": {"name": TOOL, "arguments": head}}]})));
        answer.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": tail}}]})));
        answer.push_str(&chunk(json!({"tool_calls": [
            {"index": 1, "id": "call_note", "type": "function", "function": {"name": "board_write", "arguments": note_head}}]})));
        answer.push_str(&chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": note_tail}}]})));
        answer.push_str(&finish("tool_calls", 2));
        answer.push_str("data: [DONE]\n\n");
        write_chunk(&mut socket, answer.as_bytes()).await?;
    } else {
        let every = Duration::from_secs(1) / state.token_rate as u32;
        let started = tokio::time::Instant::now();
        let mut last = 0;
        let mut stamps = Vec::with_capacity(if state.record { state.tokens as usize } else { 0 });
        for n in 0..state.tokens {
            tokio::time::sleep_until(started + every * n as u32).await;
            // Strictly increasing per chat, so order and uniqueness can be checked.
            let stamp = wall_us().max(last + 1);
            last = stamp;
            let mut piece = chunk(json!({ "content": format!(" t{stamp}") }));
            if n == 0 {
                piece = chunk(json!({ "role": "assistant", "content": format!(" t{stamp}") }));
            }
            write_chunk(&mut socket, piece.as_bytes()).await?;
            if state.record {
                stamps.push(stamp);
            }
        }
        let mut end = finish("stop", state.tokens);
        end.push_str("data: [DONE]\n\n");
        write_chunk(&mut socket, end.as_bytes()).await?;
        if state.record {
            state.sent.lock().unwrap_or_else(|p| p.into_inner()).insert(chat, stamps);
        }
    }
    socket.write_all(b"0\r\n\r\n").await.context("ending a model answer")?;
    let _ = socket.shutdown().await;
    Ok(())
}

fn chunk(delta: Value) -> String {
    let event = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    format!("data: {event}\n\n")
}

/// The closing chunk (finish reason) and the usage chunk (`stream_options.include_usage`).
fn finish(reason: &str, completion_tokens: u64) -> String {
    let end = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]});
    let usage = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": completion_tokens,
        "total_tokens": 20 + completion_tokens}});
    format!("data: {end}\n\ndata: {usage}\n\n")
}

/// One HTTP chunk (chunked transfer encoding).
async fn write_chunk(socket: &mut TcpStream, data: &[u8]) -> Result<()> {
    let mut frame = format!("{:x}\r\n", data.len()).into_bytes();
    frame.extend_from_slice(data);
    frame.extend_from_slice(b"\r\n");
    socket.write_all(&frame).await.context("writing a model chunk")
}

/// The `bench` agent: an `openai` agent on the scripted model, with the HTTP tool and the
/// `board_write` built-in.
fn agent(model: &ModelServer) -> String {
    format!(
        r#"[[agents]]
name = "bench"
kind = "openai"
title = "bench"
base_url = "{base}/v1"
model = "scripted"
system_prompt = "You are a benchmark."
request_timeout_secs = 600
retries = 0
max_steps = 4
builtins = ["board_write"]

[[agents.tools]]
name = "{TOOL}"
description = "Looks a chat up."
url = "{base}/tool"
parameters = {{ type = "object", properties = {{ chat = {{ type = "string" }} }}, required = ["chat"] }}

"#,
        base = model.base
    )
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
    let model = ModelServer::start(sizes.chat_tokens, sizes.token_rate, settings.strict).await?;
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
fn chat_body(thread: &str) -> String {
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
    let sent = model.state.sent.lock().unwrap_or_else(|p| p.into_inner()).get(thread).cloned();
    let Some(sent) = sent else { bail!("chat {thread}: the model server has no record of its answer") };
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
