//! Serving connections: each accepted connection is handed to hyper's HTTP/1.1 or HTTP/2 server
//! directly, the protocol chosen before hyper reads a byte — by ALPN over TLS, by peeking at
//! the socket for the HTTP/2 preface in plain text (h2c with prior knowledge).
//!
//! Why not `axum::serve`: it detects the protocol by reading the first bytes and handing them
//! back in front of the socket. HTTP/1.1 then starts its 8 KiB read buffer with those bytes in
//! it and, needing a full 8 KiB of room for the next read, doubles it to 16 KiB — for the whole
//! life of every connection (≈ 8 KiB per open stream). Peeking leaves the socket untouched.
//!
//! Shutdown is as `axum::serve`'s: accepting stops, every connection is asked to finish
//! (HTTP/1.1 closes after its response, HTTP/2 sends GOAWAY), and `serve` returns once all have.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use super::tls::TlsListener;

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How long a plain connection may take to send enough bytes to tell its protocol.
const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Serves `app` on every connection until `shutdown` resolves, then drains them.
pub async fn serve(connections: Connections, app: Router, shutdown: impl Future<Output = ()> + Send) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut connections = connections;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&mut connections) => match accepted {
                Accepted::Plain(tcp, peer) => {
                    let watcher = graceful.watcher();
                    let app = app.clone();
                    tokio::spawn(async move {
                        // Told apart before hyper reads: nothing to hand back in front of it.
                        let Some(protocol) = plain_protocol(&tcp).await else { return };
                        serve_connection(tcp, peer, protocol, app, watcher).await;
                    });
                }
                Accepted::Tls(tls, peer) => {
                    let protocol = match tls.get_ref().1.alpn_protocol() {
                        Some(b"h2") => Protocol::Http2,
                        _ => Protocol::Http1,
                    };
                    let watcher = graceful.watcher();
                    let app = app.clone();
                    tokio::spawn(serve_connection(tls, peer, protocol, app, watcher));
                }
            }
        }
    }
    // Stop accepting before waiting for the connections, as `axum::serve` does.
    drop(connections);
    graceful.shutdown().await;
}

enum Accepted {
    Plain(TcpStream, SocketAddr),
    Tls(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr),
}

async fn accept(connections: &mut Connections) -> Accepted {
    match connections {
        Connections::Plain(listener) => loop {
            match listener.accept().await {
                Ok((mut tcp, peer)) => {
                    super::no_delay(&mut tcp);
                    return Accepted::Plain(tcp, peer);
                }
                Err(error) => super::tls::accept_error(error).await,
            }
        },
        Connections::Tls(listener) => {
            let (tls, peer) = axum::serve::Listener::accept(listener).await;
            Accepted::Tls(tls, peer)
        }
    }
}

/// HTTP/2 when the connection opens with the preface, HTTP/1.1 as soon as its bytes differ from
/// it; `None` when the peer closes or stalls before either is known.
async fn plain_protocol(tcp: &TcpStream) -> Option<Protocol> {
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
    tokio::time::timeout(PREFACE_TIMEOUT, tell).await.ok().flatten()
}

async fn serve_connection<Io>(
    io: Io,
    peer: SocketAddr,
    protocol: Protocol,
    app: Router,
    watcher: hyper_util::server::graceful::Watcher,
) where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // What `into_make_service_with_connect_info` gives the handlers.
        request.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        async move {
            Ok::<_, Infallible>(app.oneshot(request.map(axum::body::Body::new)).await.unwrap_or_else(|e| match e {}))
        }
    });
    let io = TokioIo::new(io);
    let outcome = match protocol {
        Protocol::Http1 => watcher.watch(http1::Builder::new().serve_connection(io, service)).await,
        Protocol::Http2 => watcher.watch(http2::Builder::new(TokioExecutor::new()).serve_connection(io, service)).await,
    };
    if let Err(error) = outcome {
        tracing::trace!(%peer, %error, "connection ended with an error");
    }
}
