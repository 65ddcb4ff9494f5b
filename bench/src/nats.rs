//! A NATS server for the scale-out scenario's `nats` bus: the one at the given URL when it
//! answers, else `nats-server -p PORT` (from PATH, /usr/sbin or /usr/bin) started as this
//! tool's child, on loopback, stopped when the returned handle drops. A started server is
//! ready when it logs `Server is ready` (read from its stderr: no connect poll, no sleep).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::bail;
use crate::error::{Context, Result};

/// A NATS server this tool started (killed on drop).
pub struct NatsServer {
    _child: Child,
}

/// `host:port` of a `nats://host:port` URL.
fn address(url: &str) -> Result<(String, u16)> {
    let rest = url.strip_prefix("nats://").unwrap_or(url);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split('/').next().unwrap_or(rest);
    let (host, port) = rest.rsplit_once(':').unwrap_or((rest, "4222"));
    let port = port.parse().with_context(|| format!("the port of the NATS URL {url}"))?;
    Ok((host.to_string(), port))
}

async fn answers(host: &str, port: u16) -> bool {
    matches!(tokio::time::timeout(Duration::from_secs(1), TcpStream::connect((host, port))).await, Ok(Ok(_)))
}

fn nats_server_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// Makes sure a NATS server answers at `url`; returns the one started for it, if any.
pub async fn ensure(url: &str) -> Result<Option<NatsServer>> {
    let (host, port) = address(url)?;
    if answers(&host, port).await {
        return Ok(None);
    }
    let Some(binary) = nats_server_binary() else {
        bail!("no NATS server answers at {url}, and no nats-server binary in PATH, /usr/sbin or /usr/bin");
    };
    let mut child = Command::new(&binary)
        .arg("-a")
        .arg("127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    eprintln!(
        "  no NATS server answered at {url}: started {} -p {port} (pid {}) for this run",
        binary.display(),
        child.id().unwrap_or(0)
    );
    let stderr = child.stderr.take().context("nats-server's stderr")?;
    match tokio::time::timeout(Duration::from_secs(10), logs_ready(stderr)).await {
        Ok(Ok(())) => Ok(Some(NatsServer { _child: child })),
        Ok(Err(error)) => Err(error),
        Err(_) => bail!("the nats-server started on port {port} did not say it was ready within 10 s"),
    }
}

/// Reads nats-server's log until `Server is ready` (logged once it listens), then keeps
/// draining it in a task of its own so the server never blocks on a full pipe.
async fn logs_ready(stderr: tokio::process::ChildStderr) -> Result<()> {
    let mut lines = BufReader::new(stderr).lines();
    while let Some(line) = lines.next_line().await.context("reading nats-server's log")? {
        if line.contains("Server is ready") {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok(());
        }
    }
    bail!("nats-server exited during start-up")
}
