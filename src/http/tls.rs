//! Serving HTTPS on `listen` (`tls.cert_file` / `tls.key_file`): rustls with the ring provider,
//! ALPN `h2` then `http/1.1`, and a certificate that can be replaced while the gateway runs.
//!
//! [`TlsListener`] accepts TCP connections (each under a connection permit, see
//! `connections.rs`) and runs their handshakes on tasks of their own (bounded by
//! `limits.header_read_timeout_secs`), and finished handshakes are handed to the connection
//! server (`connections.rs`), which serves HTTP/2 or HTTP/1.1 as ALPN chose. So HTTPS goes
//! through exactly the connection handling and graceful shutdown plain HTTP uses, and a slow
//! or failed handshake never holds up another connection.
//!
//! The certificate lives in a [`CertificateStore`], which rustls asks at every handshake. The
//! files are read again on SIGHUP and when their modification time or size changes (polled
//! every [`RELOAD_POLL`]); a reload that fails keeps the certificate in use and logs why. Open
//! connections are untouched by a reload: only new handshakes see the new certificate.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::accept::AcceptBackoff;
use crate::config::TlsConfig;

/// How often the certificate files' modification times are looked at.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// Finished handshakes waiting for the connection server to take them.
const ACCEPTED_QUEUE: usize = 128;

/// Why the served certificate could not be loaded. Each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {setting} {path}: {source}")]
    Read { setting: &'static str, path: String, source: io::Error },
    #[error("tls.cert_file {path} is not a PEM certificate chain: {reason}")]
    CertNotPem { path: String, reason: String },
    #[error(
        "tls.cert_file {path} holds no certificate (expected PEM '-----BEGIN CERTIFICATE-----' blocks, leaf first)"
    )]
    NoCertificate { path: String },
    #[error("tls.key_file {path} holds no private key (expected a PEM 'PRIVATE KEY', 'RSA PRIVATE KEY' or 'EC PRIVATE KEY' block): {reason}")]
    NoKey { path: String, reason: String },
    #[error("tls.key_file {key}: cannot use it with tls.cert_file {cert}: {reason}")]
    Unusable { cert: String, key: String, reason: String },
    #[error("tls.key_file {key} is not the private key of the certificate in tls.cert_file {cert}")]
    KeyMismatch { cert: String, key: String },
}

/// The two files named by `tls.cert_file` and `tls.key_file`.
#[derive(Debug, Clone)]
pub struct CertificateFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertificateFiles {
    /// The files to serve, or `None` for plain HTTP (the config has checked both or neither).
    pub fn from_config(tls: &TlsConfig) -> Option<CertificateFiles> {
        if tls.cert_file.is_empty() || tls.key_file.is_empty() {
            return None;
        }
        Some(CertificateFiles { cert: PathBuf::from(&tls.cert_file), key: PathBuf::from(&tls.key_file) })
    }

    /// Reads and checks both files: a chain of at least one certificate, a private key ring
    /// can sign with, and that key belonging to the first (leaf) certificate.
    pub fn load(&self, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
        let cert_path = self.cert.display().to_string();
        let key_path = self.key.display().to_string();
        let cert_pem = read(&self.cert, "tls.cert_file")?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::CertNotPem { path: cert_path.clone(), reason: e.to_string() })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate { path: cert_path });
        }
        let key_pem = read(&self.key, "tls.key_file")?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| TlsError::NoKey { path: key_path.clone(), reason: e.to_string() })?;
        let signing_key = provider.key_provider.load_private_key(key).map_err(|e| TlsError::Unusable {
            cert: cert_path.clone(),
            key: key_path.clone(),
            reason: e.to_string(),
        })?;
        let certified = CertifiedKey::new(chain, signing_key);
        match certified.keys_match() {
            Ok(()) => Ok(certified),
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                Err(TlsError::KeyMismatch { cert: cert_path, key: key_path })
            }
            // The key type cannot tell its public half: nothing to compare, as rustls does.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
            Err(other) => Err(TlsError::Unusable { cert: cert_path, key: key_path, reason: other.to_string() }),
        }
    }

    /// What changes when either file is replaced or rewritten.
    fn stamp(&self) -> Option<[(SystemTime, u64); 2]> {
        let stamp = |path: &Path| std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
        Some([stamp(&self.cert)?, stamp(&self.key)?])
    }
}

fn read(path: &Path, setting: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { setting, path: path.display().to_string(), source })
}

/// The certificate every new handshake is given; replaced whole on reload.
pub struct CertificateStore {
    files: CertificateFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for CertificateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateStore").field("files", &self.files).finish_non_exhaustive()
    }
}

impl ResolvesServerCert for CertificateStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone())
    }
}

impl CertificateStore {
    /// Reads the files again; on any problem the certificate in use stays, and the problem is
    /// logged. `why` says what asked for the reload.
    fn reload(&self, why: &str) {
        match self.files.load(&self.provider) {
            Ok(loaded) => {
                *self.current.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(loaded);
                tracing::info!(cert_file = %self.files.cert.display(), reason = why, "TLS certificate reloaded");
            }
            Err(error) => {
                tracing::warn!(reason = why, "TLS certificate not reloaded, the previous one stays in use: {error}")
            }
        }
    }
}

/// What serving HTTPS needs: the rustls configuration (its certificate from a
/// [`CertificateStore`]). Built once at start, where a bad file is an error.
#[derive(Clone)]
pub struct TlsServing {
    store: Arc<CertificateStore>,
    config: Arc<ServerConfig>,
}

impl fmt::Debug for TlsServing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServing").field("store", &self.store).finish_non_exhaustive()
    }
}

impl TlsServing {
    /// Loads the certificate, or `Ok(None)` when the config serves plain HTTP.
    pub fn from_config(tls: &TlsConfig) -> Result<Option<TlsServing>, TlsError> {
        let Some(files) = CertificateFiles::from_config(tls) else { return Ok(None) };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let first = files.load(&provider)?;
        let store =
            Arc::new(CertificateStore { files, provider: provider.clone(), current: RwLock::new(Arc::new(first)) });
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Unusable {
                cert: tls.cert_file.clone(),
                key: tls.key_file.clone(),
                reason: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(store.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Some(TlsServing { store, config: Arc::new(config) }))
    }
}

/// A TCP listener whose connections come out TLS-terminated, each with the connection permit
/// (`limits.max_connections`) it was accepted under. Dropping it (when the server stops
/// accepting) stops accepting, watching the files and any handshake not yet handed over.
pub struct TlsListener {
    accepted: mpsc::Receiver<Handshaken>,
    _tasks: AbortOnDrop,
}

/// A finished handshake, its peer, and the permit it holds while open.
type Handshaken = (TlsStream<TcpStream>, SocketAddr, OwnedSemaphorePermit);

impl TlsListener {
    /// Accepts on `listener`, each connection under a permit of `slots`; a handshake not done
    /// within `handshake_timeout` is dropped.
    pub fn new(
        listener: TcpListener,
        tls: &TlsServing,
        slots: Arc<Semaphore>,
        handshake_timeout: Duration,
    ) -> io::Result<TlsListener> {
        let (handed, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        let acceptor = TlsAcceptor::from(tls.config.clone());
        // SIGHUP is taken, and the files' stamp read, before the first connection is accepted:
        // until a handler is installed SIGHUP ends the process, and a change made before the
        // watch first looked would never be seen as one.
        let hangup = hangup_signal();
        let seen = tls.store.files.stamp();
        let accepting = tokio::spawn(accept_loop(listener, acceptor, handed, slots, handshake_timeout));
        let watching = tokio::spawn(watch_files(tls.store.clone(), hangup, seen));
        Ok(TlsListener { accepted, _tasks: AbortOnDrop(vec![accepting, watching]) })
    }

    /// The next connection whose handshake finished.
    pub async fn accept(&mut self) -> Handshaken {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop never ends on its own; if it did, nothing more arrives.
            None => std::future::pending().await,
        }
    }
}

struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handed: mpsc::Sender<Handshaken>,
    slots: Arc<Semaphore>,
    handshake_timeout: Duration,
) {
    let mut backoff = AcceptBackoff::default();
    loop {
        // A handshake holds a descriptor too: it is counted from the accept on.
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (mut tcp, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff = AcceptBackoff::default();
                accepted
            }
            Err(error) => {
                drop(permit);
                backoff.wait(error).await;
                continue;
            }
        };
        super::accept::no_delay(&mut tcp);
        let acceptor = acceptor.clone();
        let handed = handed.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    // Fails only once the server stopped accepting: the connection just closes.
                    let _ = handed.send((tls, peer, permit)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Reloads the certificate on SIGHUP and when either file changes from `seen`.
async fn watch_files(
    store: Arc<CertificateStore>,
    mut hangup: mpsc::Receiver<()>,
    mut seen: Option<[(SystemTime, u64); 2]>,
) {
    let mut poll = tokio::time::interval(RELOAD_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            _ = poll.tick() => {
                let now = store.files.stamp();
                // A file that is missing for a moment (being replaced) is looked at again on
                // the next tick rather than reported.
                if now.is_none() || now == seen {
                    continue;
                }
                seen = now;
                "the certificate files changed"
            }
            Some(()) = hangup.recv() => "SIGHUP",
        };
        let store = store.clone();
        // File reads and key parsing are blocking work.
        let _ = tokio::task::spawn_blocking(move || store.reload(why)).await;
    }
}

/// SIGHUP as a stream of `()`; never yields where there is no such signal.
fn hangup_signal() -> mpsc::Receiver<()> {
    let (sender, receiver) = mpsc::channel(1);
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut signal) => {
            tokio::spawn(async move {
                while signal.recv().await.is_some() {
                    if sender.send(()).await.is_err() {
                        return;
                    }
                }
            });
        }
        Err(error) => tracing::warn!(%error, "cannot listen for SIGHUP; certificate files are still polled"),
    }
    #[cfg(not(unix))]
    drop(sender);
    receiver
}
