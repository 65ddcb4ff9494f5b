//! A minimal HTTP client for the runs, over three transports: HTTP/1.1 on plain TCP, HTTP/1.1
//! over TLS, and HTTP/2 over TLS (ALPN `h2`).
//!
//! HTTP/1.1 opens one connection per request (`Connection: close`) and reads the response body
//! 64 KiB at a time, un-chunked in place, generic over the byte stream (TCP or TLS). HTTP/2 (the
//! `h2` crate) carries many streams on one connection, opening another only when the server's
//! limit of concurrent streams is reached (the gateway's is 200): DATA frames already received
//! are drained into the caller's buffer together and their flow-control capacity is released as
//! they are read.
//!
//! Why not reqwest here: it hands over every HTTP chunk as a frame of its own, and the gateway
//! writes one chunk per event, so a replay of 10,000 events cost the tool ≈ 20 µs per event and
//! the tool, not the gateway, set the figure (measured: tool 70–78 % of a core, gateway 15 %,
//! 10,007 chunks for 9,999 events). Reading whole socket buffers makes the client's cost per
//! byte, not per chunk.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bail;
use crate::error::{Context, Result};
use crate::tls::Material;

const READ_SIZE: usize = 64 * 1024;
/// HTTP/2 receive windows: large enough that a burst is not paced by WINDOW_UPDATE round trips.
const H2_STREAM_WINDOW: u32 = 1 << 20;
const H2_CONNECTION_WINDOW: u32 = 16 << 20;

/// How the runs reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Transport {
    /// HTTP/1.1 over TCP.
    Plain,
    /// HTTP/1.1 over TLS (ALPN `http/1.1`).
    TlsH1,
    /// HTTP/2 over TLS (ALPN `h2`), many streams per connection.
    TlsH2,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Plain, Transport::TlsH1, Transport::TlsH2];

    pub fn label(self) -> &'static str {
        match self {
            Transport::Plain => "plain",
            Transport::TlsH1 => "tls-h1",
            Transport::TlsH2 => "tls-h2",
        }
    }

    pub fn is_tls(self) -> bool {
        self != Transport::Plain
    }

    pub fn scheme(self) -> &'static str {
        if self.is_tls() {
            "https"
        } else {
            "http"
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A byte stream a response is read from: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One HTTP/2 connection of a client's pool.
struct H2Connection {
    send: h2::client::SendRequest<Bytes>,
    /// Streams open on it (ours; the server's limit is `send.current_max_send_streams()`).
    in_use: Arc<AtomicUsize>,
    /// False once the connection task ended (closed, reset, or failed).
    alive: Arc<AtomicBool>,
}

/// A stream's place on an HTTP/2 connection, given back when the response body is dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Opens connections for one transport. Clones share the HTTP/2 connections; [`Client::fresh`]
/// makes one that shares none.
#[derive(Clone)]
pub struct Client {
    transport: Transport,
    tls: Option<Arc<rustls::ClientConfig>>,
    pool: Arc<tokio::sync::Mutex<Vec<H2Connection>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.transport)
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::plain()
    }
}

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

    /// Reads the whole body (small responses: health checks, errors).
    pub async fn into_bytes(mut self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        while self.body.read_into(&mut out).await? {}
        Ok(out)
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
    inner: BodyInner,
}

enum BodyInner {
    H1(H1Body),
    H2 { recv: h2::RecvStream, _slot: Slot },
}

struct H1Body {
    stream: Box<dyn Io>,
    raw: Vec<u8>,
    /// Bytes of `raw` already decoded.
    pos: usize,
    framing: Framing,
}

/// `scheme://authority/path` split, checked against the transport.
fn split_url(url: &str, transport: Transport) -> Result<(&str, &str)> {
    let prefix = format!("{}://", transport.scheme());
    let rest = url
        .strip_prefix(prefix.as_str())
        .with_context(|| format!("not a {prefix} URL (transport {transport}): {url}"))?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    })
}

impl Client {
    /// HTTP/1.1 over TCP (the peers, and `http://` URLs).
    pub fn plain() -> Client {
        Client { transport: Transport::Plain, tls: None, pool: Arc::default() }
    }

    /// A client for `transport`, trusting the run's CA for TLS.
    pub fn new(transport: Transport, tls: &Material) -> Client {
        let config = match transport {
            Transport::Plain => None,
            Transport::TlsH1 => Some(tls.h1.clone()),
            Transport::TlsH2 => Some(tls.h2.clone()),
        };
        Client { transport, tls: config, pool: Arc::default() }
    }

    /// The same transport with no connection shared with this one.
    pub fn fresh(&self) -> Client {
        Client { transport: self.transport, tls: self.tls.clone(), pool: Arc::default() }
    }

    /// POSTs `body` as JSON to `url` with extra `headers`.
    pub async fn post(&self, url: &str, body: &str, headers: &[(&str, &str)]) -> Result<Response> {
        self.request("POST", url, Some(body), headers).await.with_context(|| format!("POST {url}"))
    }

    /// GETs `url`.
    pub async fn get(&self, url: &str) -> Result<Response> {
        self.request("GET", url, None, &[]).await.with_context(|| format!("GET {url}"))
    }

    async fn request(&self, method: &str, url: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Result<Response> {
        let (authority, path) = split_url(url, self.transport)?;
        if self.transport == Transport::TlsH2 {
            return self.request_h2(method, url, authority, body, headers).await;
        }
        let mut stream = self.connect(authority).await?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
        if let Some(body) = body {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body.unwrap_or(""));
        stream.write_all(head.as_bytes()).await.context("sending the request")?;
        // TLS holds written records until flushed.
        stream.flush().await.context("sending the request")?;
        read_head(stream).await
    }

    /// A TCP connection to `authority`, wrapped in TLS when the transport says so.
    async fn connect(&self, authority: &str) -> Result<Box<dyn Io>> {
        let tcp = TcpStream::connect(authority).await.with_context(|| format!("connecting to {authority}"))?;
        tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
        let Some(config) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .with_context(|| format!("a TLS server name from {authority}"))?;
        let tls = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS handshake with {authority}"))?;
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let wanted: &[u8] = if self.transport == Transport::TlsH2 { b"h2" } else { b"http/1.1" };
        if alpn.as_deref() != Some(wanted) {
            bail!(
                "{authority} negotiated ALPN {:?}, not {:?}",
                alpn.map(|a| String::from_utf8_lossy(&a).into_owned()),
                String::from_utf8_lossy(wanted)
            );
        }
        Ok(Box::new(tls))
    }

    /// A connection of the pool with room for one more stream (a new one when none has), and
    /// the stream's slot on it.
    async fn h2_connection(&self, authority: &str) -> Result<(h2::client::SendRequest<Bytes>, Slot)> {
        let mut pool = self.pool.lock().await;
        pool.retain(|c| c.alive.load(Ordering::Relaxed));
        if let Some(connection) =
            pool.iter().find(|c| c.in_use.load(Ordering::Relaxed) < c.send.current_max_send_streams())
        {
            connection.in_use.fetch_add(1, Ordering::Relaxed);
            return Ok((connection.send.clone(), Slot(connection.in_use.clone())));
        }
        let io = self.connect(authority).await?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONNECTION_WINDOW)
            .handshake::<_, Bytes>(io)
            .await
            .with_context(|| format!("HTTP/2 handshake with {authority}"))?;
        let alive = Arc::new(AtomicBool::new(true));
        let alive_in_task = alive.clone();
        tokio::spawn(async move {
            // Errors surface on the streams; the pool only needs to know the connection ended.
            let _ = connection.await;
            alive_in_task.store(false, Ordering::Relaxed);
        });
        let in_use = Arc::new(AtomicUsize::new(1));
        pool.push(H2Connection { send: send.clone(), in_use: in_use.clone(), alive });
        Ok((send, Slot(in_use)))
    }

    async fn request_h2(
        &self,
        method: &str,
        url: &str,
        authority: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Response> {
        let (send, slot) = self.h2_connection(authority).await?;
        let mut request = http::Request::builder().method(method).uri(url);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(()).context("building the request")?;
        let mut send = send.ready().await.context("waiting for room on the HTTP/2 connection")?;
        let (response, mut request_body) = send.send_request(request, body.is_none()).context("sending the request")?;
        if let Some(body) = body {
            request_body
                .send_data(Bytes::copy_from_slice(body.as_bytes()), true)
                .context("sending the request body")?;
        }
        let response = response.await.context("reading the response head")?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect();
        let recv = response.into_body();
        Ok(Response { status, headers, body: Body { inner: BodyInner::H2 { recv, _slot: slot } } })
    }
}

async fn read_head(mut stream: Box<dyn Io>) -> Result<Response> {
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
    let body = H1Body { stream, raw, pos: end + 4, framing };
    Ok(Response { status, headers, body: Body { inner: BodyInner::H1(body) } })
}

impl Body {
    /// Appends the next decoded body bytes to `out`, reading the connection when needed.
    /// Returns false once the body has ended.
    pub async fn read_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        match &mut self.inner {
            BodyInner::H1(body) => body.read_into(out).await,
            BodyInner::H2 { recv, .. } => read_h2(recv, out).await,
        }
    }
}

/// The next DATA frame, and every further one already received, appended to `out`.
async fn read_h2(recv: &mut h2::RecvStream, out: &mut Vec<u8>) -> Result<bool> {
    let before = out.len();
    loop {
        let Some(data) = recv.data().await else { return Ok(false) };
        let mut data = data.context("reading the response body")?;
        loop {
            out.extend_from_slice(&data);
            recv.flow_control().release_capacity(data.len()).context("releasing HTTP/2 flow control")?;
            // Frames already here go out in the same read: the tool's cost stays per buffer.
            match recv.data().now_or_never() {
                Some(Some(more)) => data = more.context("reading the response body")?,
                _ => break,
            }
        }
        if out.len() > before {
            return Ok(true);
        }
    }
}

impl H1Body {
    async fn read_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A TLS server on loopback with the run's certificate, offering `alpn`.
    async fn tls_listener(material: &Material, alpn: &[u8]) -> (TcpListener, tokio_rustls::TlsAcceptor) {
        let (chain, key) = material.server_pem();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(chain.as_bytes()).collect::<std::result::Result<_, _>>().expect("chain");
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
        config.alpn_protocols = vec![alpn.to_vec()];
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        (listener, tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }

    #[tokio::test]
    async fn a_chunked_body_is_decoded_over_tls_with_http1() {
        let material = Material::new().expect("material");
        let (listener, acceptor) = tls_listener(&material, b"http/1.1").await;
        let port = listener.local_addr().expect("address").port();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut tls = acceptor.accept(tcp).await.expect("handshake");
            let mut request = vec![0; 4096];
            let _ = tls.read(&mut request).await.expect("request");
            let response =
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n";
            tls.write_all(response.as_bytes()).await.expect("response");
            tls.shutdown().await.expect("close");
        });
        let client = Client::new(Transport::TlsH1, &material);
        let response = client.get(&format!("https://127.0.0.1:{port}/livez")).await.expect("GET");
        assert_eq!(response.status, 200);
        assert_eq!(response.into_bytes().await.expect("body"), b"hello, world");
    }

    #[tokio::test]
    async fn streams_share_one_http2_connection_and_read_every_data_frame() {
        let material = Material::new().expect("material");
        let (listener, acceptor) = tls_listener(&material, b"h2").await;
        let port = listener.local_addr().expect("address").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.expect("accept");
                counted.fetch_add(1, Ordering::Relaxed);
                let tls = acceptor.accept(tcp).await.expect("handshake");
                tokio::spawn(async move {
                    let mut connection = h2::server::handshake(tls).await.expect("h2 handshake");
                    while let Some(Ok((_request, mut respond))) = connection.accept().await {
                        let response = http::Response::builder().status(200).body(()).expect("response");
                        let mut body = respond.send_response(response, false).expect("head");
                        for part in ["data: 1\n\n", "data: 2\n\n", "data: 3\n\n"] {
                            body.send_data(Bytes::from(part), false).expect("data");
                        }
                        body.send_data(Bytes::new(), true).expect("end");
                    }
                });
            }
        });
        let client = Client::new(Transport::TlsH2, &material);
        let url = format!("https://127.0.0.1:{port}/v1/agui/agents/bench");
        for _ in 0..3 {
            let response = client.post(&url, "{}", &[("accept", "text/event-stream")]).await.expect("POST");
            assert_eq!(response.status, 200);
            assert_eq!(response.into_bytes().await.expect("body"), b"data: 1\n\ndata: 2\n\ndata: 3\n\n");
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1, "three requests, one connection");
        // A fresh client shares nothing: its request opens a connection of its own.
        let response = client.fresh().get(&url).await.expect("GET");
        assert_eq!(response.into_bytes().await.expect("body").len(), 27);
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
    }
}
