//! A minimal HTTP/1.1 client for the runs: one TCP connection per request (`Connection:
//! close`), the response body read 64 KiB at a time and un-chunked in place.
//!
//! Why not reqwest here: it hands over every HTTP chunk as a frame of its own, and the gateway
//! writes one chunk per event, so a replay of 10,000 events cost the tool ≈ 20 µs per event and
//! the tool, not the gateway, set the figure (measured: tool 70–78 % of a core, gateway 15 %,
//! 10,007 chunks for 9,999 events). Reading whole socket buffers makes the client's cost per
//! byte, not per chunk.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bail;
use crate::error::{Context, Result};

const READ_SIZE: usize = 64 * 1024;

/// Opens connections; cheap to clone (it holds nothing).
#[derive(Debug, Clone, Default)]
pub struct Client;

/// A response whose head has been read; its body is read with [`Body::read_into`].
pub struct Response {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

enum Framing {
    Chunked(ChunkState),
    Length(u64),
    UntilClose,
}

enum ChunkState {
    /// Reading a chunk-size line.
    Size,
    /// Bytes of the current chunk still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The zero-size chunk was read.
    Done,
}

pub struct Body {
    stream: TcpStream,
    raw: Vec<u8>,
    /// Bytes of `raw` already decoded.
    pos: usize,
    framing: Framing,
}

impl Client {
    /// POSTs `body` as JSON to `url` (`http://host:port/path`) with extra `headers`.
    pub async fn post(&self, url: &str, body: &str, headers: &[(&str, &str)]) -> Result<Response> {
        let rest = url.strip_prefix("http://").with_context(|| format!("not an http:// URL: {url}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let stream = TcpStream::connect(authority).await.with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body);
        let mut stream = stream;
        stream.write_all(head.as_bytes()).await.with_context(|| format!("sending POST {url}"))?;
        read_head(stream).await.with_context(|| format!("POST {url}"))
    }
}

async fn read_head(mut stream: TcpStream) -> Result<Response> {
    let mut raw = Vec::with_capacity(8 * 1024);
    let end = loop {
        if let Some(end) = memchr::memmem::find(&raw, b"\r\n\r\n") {
            break end;
        }
        if raw.len() > 64 * 1024 {
            bail!("a response head over 64 KiB");
        }
        raw.reserve(8 * 1024);
        if stream.read_buf(&mut raw).await.context("reading the response head")? == 0 {
            bail!("the connection closed before a response head");
        }
    };
    let head = std::str::from_utf8(&raw[..end]).context("a response head that is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("a malformed status line: {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let framing = if find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        Framing::Chunked(ChunkState::Size)
    } else if let Some(length) = find("content-length").and_then(|v| v.parse().ok()) {
        Framing::Length(length)
    } else {
        Framing::UntilClose
    };
    Ok(Response { status, headers, body: Body { stream, raw, pos: end + 4, framing } })
}

impl Body {
    /// Appends the next decoded body bytes to `out`, reading the socket when needed. Returns
    /// false once the body has ended.
    pub async fn read_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        loop {
            let before = out.len();
            let ended = self.decode(out)?;
            if out.len() > before {
                return Ok(true);
            }
            if ended {
                return Ok(false);
            }
            // Everything buffered is decoded: make room and read more.
            self.raw.drain(..self.pos);
            self.pos = 0;
            if self.raw.capacity() - self.raw.len() < READ_SIZE / 4 {
                self.raw.reserve(READ_SIZE);
            }
            let n = self.stream.read_buf(&mut self.raw).await.context("reading the response body")?;
            if n == 0 {
                return match self.framing {
                    Framing::UntilClose => Ok(false),
                    _ => bail!("the connection closed in the middle of the response body"),
                };
            }
        }
    }

    /// Decodes what is buffered into `out`; true when the body is complete.
    fn decode(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        let raw = &self.raw;
        match &mut self.framing {
            Framing::UntilClose => {
                out.extend_from_slice(&raw[self.pos..]);
                self.pos = raw.len();
                Ok(false)
            }
            Framing::Length(left) => {
                let take = (*left).min((raw.len() - self.pos) as u64) as usize;
                out.extend_from_slice(&raw[self.pos..self.pos + take]);
                self.pos += take;
                *left -= take as u64;
                Ok(*left == 0)
            }
            Framing::Chunked(state) => loop {
                match state {
                    ChunkState::Size => {
                        let Some(eol) = memchr::memmem::find(&raw[self.pos..], b"\r\n") else { return Ok(false) };
                        let line = std::str::from_utf8(&raw[self.pos..self.pos + eol]).unwrap_or("");
                        let hex = line.split(';').next().unwrap_or("").trim();
                        let size = u64::from_str_radix(hex, 16)
                            .with_context(|| format!("a malformed chunk size: {line:?}"))?;
                        self.pos += eol + 2;
                        *state = if size == 0 { ChunkState::Done } else { ChunkState::Data(size) };
                    }
                    ChunkState::Data(left) => {
                        let available = raw.len() - self.pos;
                        if available == 0 {
                            return Ok(false);
                        }
                        let take = (*left).min(available as u64) as usize;
                        out.extend_from_slice(&raw[self.pos..self.pos + take]);
                        self.pos += take;
                        *left -= take as u64;
                        if *left == 0 {
                            *state = ChunkState::DataEnd;
                        }
                    }
                    ChunkState::DataEnd => {
                        if raw.len() - self.pos < 2 {
                            return Ok(false);
                        }
                        self.pos += 2;
                        *state = ChunkState::Size;
                    }
                    ChunkState::Done => return Ok(true),
                }
            },
        }
    }
}
