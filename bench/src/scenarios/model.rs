//! The chat and soak scenarios' scripted OpenAI-compatible model server and HTTP tool, on one
//! loopback port: the first model call of a chat streams two tool calls in the real
//! chat-completions wire format (the HTTP tool `lookup` and the `board_write` built-in), the
//! second, once both results are in, an answer of `tokens` tokens at `token_rate` per second,
//! each token's text the wall-clock microsecond it left the server (` t<micros>`, strictly
//! increasing per answer: a unique marker). With `record` on, every answer's stamps are kept
//! per chat (the chat's user message is its id), so a client can check each arrived once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::bail;
use crate::error::{Context, Result};

/// The HTTP tool's name and the note every chat pins.
const TOOL: &str = "lookup";
pub const NOTE: &str = "bench note";

fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// One answer the model streamed for a chat: the stamps it wrote to the socket, in order, and
/// whether it got to the end (an answer to a gateway killed meanwhile breaks off).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub stamps: Vec<u64>,
    pub complete: bool,
}

/// The scripted model and tool, shared by their connection tasks.
pub struct Scripted {
    tokens: u64,
    token_rate: u64,
    /// Per chat (its thread id): every answer streamed to it, when `record` is on.
    pub sent: Mutex<HashMap<String, Vec<Answer>>>,
    record: bool,
    /// Answers whose connection broke (counted; printed unless breaks are expected).
    pub broken: AtomicU64,
    expect_breaks: bool,
    pub tool_calls: AtomicU64,
    pub model_calls: AtomicU64,
}

impl Scripted {
    /// The answers streamed to `chat` so far.
    pub fn answers(&self, chat: &str) -> Vec<Answer> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).get(chat).cloned().unwrap_or_default()
    }

    fn keep(&self, chat: &str, answer: Answer) {
        if self.record {
            self.sent.lock().unwrap_or_else(|p| p.into_inner()).entry(chat.to_string()).or_default().push(answer);
        }
    }
}

/// A model server and tool endpoint on one loopback port, served until dropped.
pub struct ModelServer {
    pub base: String,
    pub state: Arc<Scripted>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelServer {
    /// `tokens` per answer at `token_rate` per second; `record`: keep every answer's stamps;
    /// `expect_breaks`: answers cut off by a killed gateway are counted, not printed.
    pub async fn start(tokens: u64, token_rate: u64, record: bool, expect_breaks: bool) -> Result<ModelServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding the scripted model server")?;
        let address = listener.local_addr().context("the model server's address")?;
        let state = Arc::new(Scripted {
            tokens,
            token_rate: token_rate.max(1),
            sent: Mutex::default(),
            record,
            broken: AtomicU64::new(0),
            expect_breaks,
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
                        state.broken.fetch_add(1, Ordering::Relaxed);
                        if !state.expect_breaks {
                            eprintln!("    (scripted model server: {error})");
                        }
                    }
                });
            }
        });
        Ok(ModelServer { base: format!("http://{address}"), state, task })
    }
}

/// Reads one request: its path and JSON body (`null` when empty); `None` when the connection
/// closed without one.
async fn read_request(socket: &mut TcpStream) -> Result<Option<(String, Value)>> {
    let mut raw = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(end) = memchr::memmem::find(&raw, b"\r\n\r\n") {
            break end;
        }
        if raw.len() > 1 << 20 {
            bail!("a request head over 1 MiB");
        }
        if socket.read_buf(&mut raw).await.context("reading a request")? == 0 {
            return Ok(None); // a connection closed without a request (a pool's probe)
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
    Ok(Some((path, body)))
}

/// The first answer of a chat: both tool calls in one answer, as a model streams them.
fn tool_calls_answer(chat: &str) -> String {
    // The arguments split over two chunks each, as models do.
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
    answer
}

/// The second answer of a chat: `state.tokens` stamped tokens at `state.token_rate`, each
/// stamp recorded (when `state.record`) as written, so a kill's cut is known.
async fn stream_tokens(socket: &mut TcpStream, state: &Scripted, chat: &str) -> Result<()> {
    let every = Duration::from_secs(1) / state.token_rate as u32;
    let started = tokio::time::Instant::now();
    let mut last = 0;
    let mut answer =
        Answer { stamps: Vec::with_capacity(if state.record { state.tokens as usize } else { 0 }), complete: false };
    for n in 0..state.tokens {
        tokio::time::sleep_until(started + every * n as u32).await;
        // Strictly increasing per chat, so order and uniqueness can be checked.
        let stamp = wall_us().max(last + 1);
        last = stamp;
        let mut piece = chunk(json!({ "content": format!(" t{stamp}") }));
        if n == 0 {
            piece = chunk(json!({ "role": "assistant", "content": format!(" t{stamp}") }));
        }
        if let Err(error) = write_chunk(socket, piece.as_bytes()).await {
            // The gateway went (killed): what was written so far is this answer.
            state.keep(chat, answer);
            return Err(error);
        }
        if state.record {
            answer.stamps.push(stamp);
        }
    }
    let mut end = finish("stop", state.tokens);
    end.push_str("data: [DONE]\n\n");
    let ended = write_chunk(socket, end.as_bytes()).await;
    answer.complete = ended.is_ok();
    state.keep(chat, answer);
    ended
}

/// One HTTP/1.1 exchange (the answer closes the connection: `Connection: close`).
async fn serve(mut socket: TcpStream, state: &Scripted) -> Result<()> {
    socket.set_nodelay(true).context("setting TCP_NODELAY")?;
    let Some((path, body)) = read_request(&mut socket).await? else {
        return Ok(());
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
        let answer = tool_calls_answer(&chat);
        write_chunk(&mut socket, answer.as_bytes()).await?;
    } else {
        stream_tokens(&mut socket, state, &chat).await?;
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
pub fn agent(model: &ModelServer) -> String {
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
