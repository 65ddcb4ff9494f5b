//! The peers, run side by side with the gateway for the burst and ticking scenarios: the AG-UI
//! Python stack (`python_peer.py`: ag-ui-protocol's encoder on FastAPI/uvicorn) and CopilotKit's
//! runtime (`copilotkit_peer.mjs`: in-memory runner, stub agent). Both stream the same events
//! from memory and keep nothing durable. Installed by `bench/peers/setup.sh`. Each is started on
//! port 0 and prints `listening http://127.0.0.1:<port>` once its listener is bound, as the
//! upstream server does (`crate::startup::read_server_base`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::bail;
use crate::error::{Context, Result};
use crate::gateway::{log_tail, terminate};
use crate::http::Client;
use crate::startup::read_server_base;
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
    /// `http://127.0.0.1:<port>`, as the peer printed it.
    base: String,
    /// Where the peer's stderr goes, kept for as long as the peer runs (read when it fails to
    /// start).
    _log: tempfile::NamedTempFile,
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
    /// Starts the peer on port 0; it is ready once it printed where it listens (no poll).
    pub async fn start(kind: PeerKind, dir: &Path) -> Result<Peer> {
        check_installed(dir)?;
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
        let mut child = command
            .arg("--port")
            .arg("0")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {kind} peer"))?;
        let pid = child.id().context("the peer exited at once")?;
        let stdout = child.stdout.take().context("the peer's stdout")?;
        match read_server_base(stdout, Duration::from_secs(30)).await {
            Ok(base) => Ok(Peer { kind, child, pid, base, _log: log }),
            Err(line) => {
                terminate(&mut child, pid).await;
                let log = log_tail(log.path());
                bail!("the {kind} peer did not say where it listens (it exited, or said nothing of it within 30 s; got {line:?})\n--- {kind} peer log ---\n{log}");
            }
        }
    }

    pub fn target(&self) -> Target {
        let url = match self.kind {
            PeerKind::Python => format!("{}/agent", self.base),
            PeerKind::CopilotKit => format!("{}/api/copilotkit/agent/bench/run", self.base),
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
