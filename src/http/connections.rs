//! Serving connections: each accepted connection is handed to hyper's HTTP/1.1 or HTTP/2 server
//! directly, the protocol chosen before hyper reads a byte — by ALPN over TLS, by peeking at
//! the socket for the HTTP/2 preface in plain text (h2c with prior knowledge).
//!
//! Why not `axum::serve`: it detects the protocol by reading the first bytes and handing them
//! back in front of the socket. HTTP/1.1 then starts its 8 KiB read buffer with those bytes in
//! it and, needing a full 8 KiB of room for the next read, doubles it to 16 KiB — for the whole
//! life of every connection (≈ 8 KiB per open stream). Peeking leaves the socket untouched.
//!
//! The gateway faces the internet, so every stage of a connection is bounded ([`EdgeLimits`]):
//! at most `max_connections` are open at once (the accept loop waits for one to close before
//! taking the next from the backlog); the TLS handshake, the h2c preface and every request head
//! must arrive within `header_read_timeout` (hyper's own timer, which only runs when the
//! builder is given one); a connection with no request in flight for `idle_timeout` is closed;
//! HTTP/2 peers are pinged and dropped when they stop answering. A streaming response counts as
//! in flight for as long as its body lives, so an SSE stream is never idle.
//!
//! Shutdown is as `axum::serve`'s: accepting stops, every connection is asked to finish
//! (HTTP/1.1 closes after its response, HTTP/2 sends GOAWAY), and `serve` returns once all have.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use super::accept::AcceptBackoff;
use super::tls::TlsListener;
use crate::config::Limits;

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bounds every connection is held to (`[limits]`).
#[derive(Debug, Clone, Copy)]
pub struct EdgeLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub h2_keepalive_interval: Duration,
    pub h2_keepalive_timeout: Duration,
    pub max_header_bytes: usize,
}

impl EdgeLimits {
    pub fn from_limits(limits: &Limits) -> EdgeLimits {
        EdgeLimits {
            max_connections: limits.max_connections,
            header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
            idle_timeout: Duration::from_secs(limits.idle_timeout_secs),
            h2_keepalive_interval: Duration::from_secs(limits.h2_keepalive_interval_secs),
            h2_keepalive_timeout: Duration::from_secs(limits.h2_keepalive_timeout_secs),
            max_header_bytes: limits.max_header_bytes,
        }
    }
}

/// Where connections come from.
pub enum Connections {
    Plain(TcpListener),
    Tls(TlsListener),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Protocol {
    Http1,
    Http2,
}

/// Serves `app` on every connection until `shutdown` resolves, then drains them. `slots` holds
/// one permit per connection that may be open (`limits.max_connections`); a TLS listener takes
/// its permits from the same semaphore before each accept.
pub async fn serve(
    connections: Connections,
    app: Router,
    shutdown: impl Future<Output = ()> + Send,
    limits: EdgeLimits,
    slots: Arc<Semaphore>,
) {
    let (stopping, stop) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut connections = connections;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&mut connections, &slots) => match accepted {
                Accepted::Plain(tcp, peer, permit) => {
                    let app = app.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        // Told apart before hyper reads: nothing to hand back in front of it.
                        let Some(protocol) = plain_protocol(&tcp, limits.header_read_timeout).await else { return };
                        serve_connection(tcp, peer, protocol, app, stop, limits).await;
                        drop(permit);
                    });
                }
                Accepted::Tls(tls, peer, permit) => {
                    let protocol = match tls.get_ref().1.alpn_protocol() {
                        Some(b"h2") => Protocol::Http2,
                        _ => Protocol::Http1,
                    };
                    let app = app.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        serve_connection(*tls, peer, protocol, app, stop, limits).await;
                        drop(permit);
                    });
                }
            }
        }
    }
    // Stop accepting before waiting for the connections, as `axum::serve` does.
    drop(connections);
    let _ = stopping.send(true);
    // Every open connection holds a permit: all of them back means all have closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

enum Accepted {
    Plain(TcpStream, SocketAddr, OwnedSemaphorePermit),
    // Boxed: a TLS stream is over a kilobyte, a plain one a few words.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, SocketAddr, OwnedSemaphorePermit),
}

async fn accept(connections: &mut Connections, slots: &Arc<Semaphore>) -> Accepted {
    match connections {
        Connections::Plain(listener) => {
            let mut backoff = AcceptBackoff::default();
            loop {
                // Never closed: acquiring only waits while `max_connections` are open.
                let Ok(permit) = slots.clone().acquire_owned().await else { return std::future::pending().await };
                match listener.accept().await {
                    Ok((mut tcp, peer)) => {
                        super::accept::no_delay(&mut tcp);
                        return Accepted::Plain(tcp, peer, permit);
                    }
                    Err(error) => {
                        drop(permit);
                        backoff.wait(error).await;
                    }
                }
            }
        }
        Connections::Tls(listener) => {
            let (tls, peer, permit) = listener.accept().await;
            Accepted::Tls(Box::new(tls), peer, permit)
        }
    }
}

/// HTTP/2 when the connection opens with the preface, HTTP/1.1 as soon as its bytes differ from
/// it; `None` when the peer closes or stalls (past `timeout`) before either is known.
async fn plain_protocol(tcp: &TcpStream, timeout: Duration) -> Option<Protocol> {
    let tell = async {
        let mut seen = [0u8; H2_PREFACE.len()];
        loop {
            let read = tcp.peek(&mut seen).await.ok()?;
            if read == 0 {
                return None;
            }
            if seen[..read] != H2_PREFACE[..read] {
                return Some(Protocol::Http1);
            }
            if read == H2_PREFACE.len() {
                return Some(Protocol::Http2);
            }
            // A prefix of the preface so far: wait for more (peek returns at once otherwise).
            tcp.readable().await.ok()?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(timeout, tell).await.ok().flatten()
}

async fn serve_connection<Io>(
    io: Io,
    peer: SocketAddr,
    protocol: Protocol,
    app: Router,
    mut stop: watch::Receiver<bool>,
    limits: EdgeLimits,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (in_flight, activity) = watch::channel(0usize);
    let in_flight = Arc::new(in_flight);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // What `into_make_service_with_connect_info` gives the handlers.
        request.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        let guard = InFlight::begin(&in_flight);
        async move {
            let response = app.oneshot(request.map(axum::body::Body::new)).await.unwrap_or_else(|e| match e {});
            // The request stays in flight until its body is written out or dropped.
            Ok::<_, Infallible>(response.map(|body| axum::body::Body::new(GuardedBody { body, _guard: guard })))
        }
    });
    let io = TokioIo::new(io);
    let outcome = match protocol {
        Protocol::Http1 => {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                // The head is measured once it is whole, to the byte: the read buffer's bound
                // alone is checked only while a head is unfinished, and one read may fill the
                // buffer well past it, so heads up to twice the limit went through.
                .max_header_size(limits.max_header_bytes)
                .max_buf_size(limits.max_header_bytes);
            // With upgrades: the live thread list is a WebSocket (`copilotkit::realtime`); an
            // upgraded connection leaves this loop and lives in its handler's task.
            let connection = builder.serve_connection(io, service).with_upgrades();
            drive(connection, activity, &mut stop, limits, |c| c.graceful_shutdown()).await
        }
        Protocol::Http2 => {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(limits.h2_keepalive_interval))
                .keep_alive_timeout(limits.h2_keepalive_timeout)
                .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
            let connection = builder.serve_connection(io, service);
            drive(connection, activity, &mut stop, limits, |c| c.graceful_shutdown()).await
        }
    };
    if let Err(error) = outcome {
        tracing::trace!(%peer, %error, "connection ended with an error");
    }
}

/// Runs `connection` to its end; asks it to finish (`graceful`) when the server shuts down or
/// when it has had no request in flight for `idle_timeout`. A connection asked to finish because
/// it is idle that still has not closed a `header_read_timeout` later is dropped.
async fn drive<C>(
    connection: C,
    activity: watch::Receiver<usize>,
    stop: &mut watch::Receiver<bool>,
    limits: EdgeLimits,
    graceful: impl Fn(Pin<&mut C>),
) -> Result<(), hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut connection = std::pin::pin!(connection);
    let mut idle = std::pin::pin!(idle_for(activity, limits.idle_timeout));
    tokio::select! {
        outcome = connection.as_mut() => return outcome,
        () = &mut idle => {
            graceful(connection.as_mut());
            return match tokio::time::timeout(limits.header_read_timeout, connection.as_mut()).await {
                Ok(outcome) => outcome,
                Err(_) => Ok(()),
            };
        }
        _ = async { stop.wait_for(|stop| *stop).await.is_ok() } => graceful(connection.as_mut()),
    }
    connection.await
}

/// Resolves once no request has been in flight for `timeout` straight.
async fn idle_for(mut activity: watch::Receiver<usize>, timeout: Duration) {
    loop {
        // (The guards `wait_for` returns are let go at once: they must not be held across an
        // await.)
        let quiet = activity.wait_for(|in_flight| *in_flight == 0).await.is_ok();
        if !quiet {
            return std::future::pending().await;
        }
        let busy = tokio::time::timeout(timeout, async { activity.wait_for(|in_flight| *in_flight > 0).await.is_ok() });
        match busy.await {
            Err(_) => return,
            Ok(false) => return std::future::pending().await,
            Ok(true) => continue,
        }
    }
}

/// One request in flight on its connection, from the moment hyper hands it over until its
/// response body is done.
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn begin(count: &Arc<watch::Sender<usize>>) -> InFlight {
        count.send_modify(|n| *n += 1);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body carrying its request's [`InFlight`]; everything else is the body's own
/// (its size hint too, so a sized response keeps its `Content-Length`).
struct GuardedBody {
    body: axum::body::Body,
    _guard: InFlight,
}

impl hyper::body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
