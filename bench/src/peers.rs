//! The peers, run side by side with the gateway for the burst and ticking scenarios: the AG-UI
//! Python stack (`python_peer.py`: ag-ui-protocol's encoder on FastAPI/uvicorn) and CopilotKit's
//! runtime (`copilotkit_peer.mjs`: in-memory runner, stub agent). Both stream the same events
//! from memory and keep nothing durable. Installed by `bench/peers/setup.sh`.

use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::bail;
use crate::error::{Context, Result};
use crate::gateway::{log_tail, terminate};
use crate::http::Client;
use crate::target::Target;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    Python,
    CopilotKit,
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeerKind::Python => "python",
            PeerKind::CopilotKit => "copilotkit",
        })
    }
}

pub const ALL: [PeerKind; 2] = [PeerKind::Python, PeerKind::CopilotKit];

pub struct Peer {
    kind: PeerKind,
    child: Child,
    pid: u32,
    port: u16,
    log: tempfile::NamedTempFile,
}

/// Fails with the install command when the peers are not installed in `dir`.
pub fn check_installed(dir: &Path) -> Result<()> {
    let python = dir.join(".venv/bin/python");
    let runtime = dir.join("node_modules/@copilotkit/runtime/package.json");
    if !python.exists() || !runtime.exists() {
        bail!("the peers are not installed in {} (run {}/setup.sh)", dir.display(), dir.display());
    }
    Ok(())
}

impl Peer {
    pub async fn start(kind: PeerKind, dir: &Path) -> Result<Peer> {
        check_installed(dir)?;
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).context("finding a free port")?.port();
        let log = tempfile::NamedTempFile::new().context("creating the peer log")?;
        let stderr = log.reopen().context("opening the peer log")?;
        let mut command = match kind {
            PeerKind::Python => {
                let mut c = Command::new(dir.join(".venv/bin/python"));
                c.arg("python_peer.py");
                c
            }
            PeerKind::CopilotKit => {
                let mut c = Command::new("node");
                c.arg("copilotkit_peer.mjs").env("COPILOTKIT_TELEMETRY_DISABLED", "true").env("NODE_ENV", "production");
                c
            }
        };
        let child = command
            .arg("--port")
            .arg(port.to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {kind} peer"))?;
        let pid = child.id().context("the peer exited at once")?;
        let mut peer = Peer { kind, child, pid, port, log };
        if let Err(error) = peer.wait_ready().await {
            let log = log_tail(peer.log.path());
            peer.stop().await;
            bail!("{error}\n--- {kind} peer log ---\n{log}");
        }
        Ok(peer)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        // Plain HTTP, but built in one workspace with the gateway, reqwest has its rustls
        // without a provider: ring (the bench's own TLS's) is made the process default first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder().no_proxy().build().context("HTTP client")?;
        let url = format!("http://127.0.0.1:{}/livez", self.port);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait().context("checking the peer")? {
                bail!("the {} peer exited during start-up ({status})", self.kind);
            }
            if let Ok(response) = client.get(&url).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the {} peer was not ready within 30 s", self.kind)
    }

    pub fn target(&self) -> Target {
        let url = match self.kind {
            PeerKind::Python => format!("http://127.0.0.1:{}/agent", self.port),
            PeerKind::CopilotKit => {
                format!("http://127.0.0.1:{}/api/copilotkit/agent/bench/run", self.port)
            }
        };
        Target {
            name: self.kind.to_string(),
            run_url: url.clone(),
            warmup_url: url,
            pid: self.pid,
            is_gateway: false,
            database_url: None,
            metrics_url: None,
            connector: Client::plain(),
        }
    }

    pub async fn stop(mut self) {
        terminate(&mut self.child, self.pid).await;
    }
}

/// `bench/peers` of the workspace this tool was built in.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers")
}
