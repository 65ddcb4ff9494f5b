//! Waiting out a failed accept, for both listeners (plain in `connections.rs`, TLS in
//! `tls.rs`): the one piece of the accept loop they share.

use std::time::Duration;

use crate::retry::Backoff;

/// How the accept loop waits out an error: a connection that failed before it was accepted is
/// nobody's problem; anything else — above all running out of file descriptors (`EMFILE`,
/// `ENFILE`), which stays true until some connection closes — is waited out, 5 ms at first and
/// doubling up to a second, so the loop neither spins nor stops. Logged once per run of errors.
#[derive(Default)]
pub(super) struct AcceptBackoff {
    /// The schedule of the current run of errors; `None` while accepting succeeds.
    backoff: Option<Backoff>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);

    pub(super) async fn wait(&mut self, error: std::io::Error) {
        use std::io::ErrorKind;
        if matches!(
            error.kind(),
            ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
        ) {
            return;
        }
        let backoff = self.backoff.get_or_insert_with(|| {
            tracing::error!(%error, "accepting a connection failed; accepting slows down until it succeeds again");
            Backoff::new(Self::FIRST, Self::MOST)
        });
        backoff.wait().await;
    }
}

/// Every event is written the moment it is committed; Nagle's algorithm would hold a small
/// write back until the peer's delayed ACK (~40 ms on Linux), which a new HTTP/2 connection's
/// first answer met every time.
pub(crate) fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(error) = tcp.set_nodelay(true) {
        tracing::debug!(%error, "could not set TCP_NODELAY");
    }
}
