//! The gateway as a child process: a config with the scenario's `script` agent, a fresh
//! database, `agui-gateway serve` started through `sh` with the open-file limit raised to its
//! hard limit, on port 0: the gateway binds its own port and its start-up line says which
//! ([`crate::startup`]), so no port is picked in advance and no readiness poll sleeps; one
//! `/readyz` over the run's transport then checks it answers. Stopped with SIGTERM (then SIGKILL). A TLS
//! transport gives it the run's server certificate (`tls.cert_file`/`tls.key_file`), so its
//! listener serves HTTPS only, with ALPN `h2` and `http/1.1`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Context, Result};
use crate::http::{Client, Transport};
use crate::target::{gateway_name, Script, Target, WARMUP};
use crate::tls::Material;

/// How to start gateways.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub binary: PathBuf,
    pub postgres: String,
    /// TOML appended to every generated config (e.g. a `[turns]` table); empty by default.
    pub extra_config: String,
    /// The run's CA and server certificate (TLS transports).
    pub tls: Arc<Material>,
}

pub struct Gateway {
    child: Child,
    pub pid: u32,
    pub address: String,
    pub database: Database,
    pub transport: Transport,
    /// A client for `transport` (the template [`Target::client`] copies).
    connector: Client,
    dir: tempfile::TempDir,
}

/// Where a new gateway listens: port 0, so it binds a free port itself and reports it.
const ANY_LOOPBACK_PORT: &str = "127.0.0.1:0";

/// How long a gateway may take to log its start-up line (migrations included).
const START_UP_LIMIT: Duration = Duration::from_secs(30);

/// `name`'s steps as a `[[agents]]` entry.
pub fn agent_toml(name: &str, script: &Script) -> String {
    format!("[[agents]]\nname = \"{name}\"\nkind = \"script\"\ntitle = \"{name}\"\nsteps = {}\n\n", script.toml_steps())
}

impl Gateway {
    /// Starts a gateway on a fresh database of `store`, with a `bench` agent running `script`
    /// and a `warmup` agent, serving `transport`.
    pub async fn start(
        settings: &GatewaySettings,
        store: Store,
        transport: Transport,
        script: &Script,
    ) -> Result<Gateway> {
        let database = Database::create(store, &settings.postgres).await?;
        Gateway::start_on(settings, database, transport, &agent_toml("bench", script)).await
    }

    /// Starts a gateway on `database` (fresh, or [`Database::shared`] with another gateway's),
    /// with `bench_agent` (a whole `[[agents]]` entry named `bench`) and a `warmup` agent.
    pub async fn start_on(
        settings: &GatewaySettings,
        database: Database,
        transport: Transport,
        bench_agent: &str,
    ) -> Result<Gateway> {
        if !settings.binary.exists() {
            bail!(
                "no gateway binary at {} (build it with `cargo build --release`, or pass --gateway)",
                settings.binary.display()
            );
        }
        let dir =
            tempfile::Builder::new().prefix("agui-bench-gw-").tempdir().context("creating a temporary directory")?;
        let config_path = dir.path().join("bench.toml");
        // The load runs thousands of turns of one tenant at once: past the default quota of
        // concurrent turns (0: no limit).
        let tenant = "[[tenants]]\nname = \"default\"\nquotas = { max_concurrent_turns = 0 }\n\n";
        let config = format!("{tenant}{bench_agent}{}{}\n", agent_toml("warmup", &WARMUP), settings.extra_config);
        std::fs::write(&config_path, config).context("writing the gateway config")?;
        if transport.is_tls() {
            settings.tls.write_server_files(dir.path())?;
        }
        let mut child = spawn(settings, dir.path(), &database.url, ANY_LOOPBACK_PORT, transport)?;
        let pid = child.id().context("the gateway exited at once")?;
        let connector = Client::new(transport, &settings.tls);
        let started = listening_address(&mut child, dir.path()).await;
        let address = started.as_ref().map_or_else(|_| String::new(), Clone::clone);
        let gateway = Gateway { child, pid, address, database, transport, connector, dir };
        let ready = match started {
            Ok(_) => gateway.check_ready().await,
            Err(error) => Err(error),
        };
        if let Err(error) = ready {
            let log = gateway.log_tail();
            let _ = gateway.stop().await;
            bail!("{error}\n--- gateway log ---\n{log}");
        }
        Ok(gateway)
    }

    /// Kills the gateway with SIGKILL (no graceful hand-over: its turns stay leased to it until
    /// the lease lapses) and waits for it to exit.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts the gateway again as before (same port, config and database; its log goes on),
    /// ready when its start-up line says it listens and `/readyz` answers. The port is the one
    /// the gateway chose at first (the load's clients hold its URL); the gateway binds it again
    /// itself.
    pub async fn restart(&mut self, settings: &GatewaySettings) -> Result<()> {
        self.kill().await;
        self.child = spawn(settings, self.dir.path(), &self.database.url, &self.address, self.transport)?;
        self.pid = self.child.id().context("the restarted gateway exited at once")?;
        listening_address(&mut self.child, self.dir.path()).await?;
        self.check_ready().await
    }
}

/// Waits for the start-up line of `child` (its stderr piped) and returns the address it
/// reports; every line goes on to `dir/gateway.log`.
async fn listening_address(child: &mut Child, dir: &Path) -> Result<String> {
    let stderr = child.stderr.take().context("the gateway's stderr")?;
    let log = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("gateway.log"))
        .await
        .context("opening the gateway log")?;
    match tokio::time::timeout(START_UP_LIMIT, crate::startup::read_listening_address(stderr, log)).await {
        Ok(Ok(address)) => Ok(address),
        Ok(Err(error)) => match child.wait().await {
            Ok(status) => bail!("{error} ({status})"),
            Err(_) => Err(error),
        },
        Err(_) => bail!("the gateway did not log that it listens within {} s", START_UP_LIMIT.as_secs()),
    }
}

/// `agui-gateway serve` with the config in `dir` on `database_url`, listening on `address`,
/// its stderr piped (for [`listening_address`], which appends it to `dir/gateway.log`).
fn spawn(
    settings: &GatewaySettings,
    dir: &Path,
    database_url: &str,
    address: &str,
    transport: Transport,
) -> Result<Child> {
    let config_path = dir.join("bench.toml");
    let mut command = Command::new("sh");
    if transport.is_tls() {
        command
            .env("AGUI_GATEWAY_TLS_CERT_FILE", dir.join(crate::tls::SERVER_CERT_FILE))
            .env("AGUI_GATEWAY_TLS_KEY_FILE", dir.join(crate::tls::SERVER_KEY_FILE));
    }
    command
        .arg("-c")
        .arg(r#"ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" "$@""#)
        .arg(&settings.binary)
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .arg("--database")
        .arg(database_url)
        .arg("--listen")
        .arg(address)
        // One load client is one caller holding thousands of streams, many on one thread.
        .env("AGUI_GATEWAY_LIMITS_MAX_STREAMS_PER_CALLER", "10000000")
        .env("AGUI_GATEWAY_LIMITS_MAX_STREAMS_PER_THREAD", "10000000")
        // Every idle stream of the load is a connection of its own.
        .env("AGUI_GATEWAY_LIMITS_MAX_CONNECTIONS", "1000000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", settings.binary.display()))
}

impl Gateway {
    /// Applies the gateway's migrations to `database` and exits (`agui-gateway migrate`), so
    /// the tool can add its own objects (the waiting scenario's counting triggers) before the
    /// gateway serves.
    pub async fn migrate(settings: &GatewaySettings, database: &Database) -> Result<()> {
        let output = Command::new(&settings.binary)
            .arg("migrate")
            .arg("--database")
            .arg(&database.url)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {} migrate", settings.binary.display()))?;
        if !output.status.success() {
            bail!(
                "agui-gateway migrate failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).chars().take(2000).collect::<String>()
            );
        }
        Ok(())
    }

    /// One `/readyz` once the gateway listens: over the transport itself, so a TLS set-up that
    /// cannot work fails here, and the database must answer.
    async fn check_ready(&self) -> Result<()> {
        let url = self.url("/readyz");
        let response = self.connector.fresh().get(&url).await.with_context(|| format!("GET {url}"))?;
        if response.status != 200 {
            bail!("the gateway listens but {url} answered {}", response.status);
        }
        Ok(())
    }

    /// This gateway as a [`Target`] (`name` like "gateway/postgres", see [`gateway_name`]).
    pub fn target(&self) -> Target {
        let base = format!("{}://{}", self.transport.scheme(), self.address);
        Target {
            name: gateway_name(self.database.store, self.transport),
            run_url: format!("{base}/v1/agui/agents/bench"),
            warmup_url: format!("{base}/v1/agui/agents/warmup"),
            pid: self.pid,
            is_gateway: true,
            database_url: (self.database.store == Store::Postgres).then(|| self.database.url.clone()),
            metrics_url: Some(self.url("/metrics")),
            connector: self.connector.clone(),
        }
    }

    /// `path` on this gateway, e.g. `/livez`.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.transport.scheme(), self.address)
    }

    /// A client for this gateway's transport sharing no connection with another.
    pub fn client(&self) -> Client {
        self.connector.fresh()
    }

    /// The last lines of the gateway's log (for error reports).
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.path().join("gateway.log"))
    }

    /// Stops the gateway and drops its database.
    pub async fn stop(mut self) -> Result<()> {
        terminate(&mut self.child, self.pid).await;
        self.database.drop_database().await
    }
}

/// Stops instances sharing one database, the first started (the database's owner, which
/// drops it) last; a scenario's failure comes back with every instance's last log lines, else
/// the first failure to stop.
pub async fn stop_all<T>(mut started: Vec<Gateway>, outcome: Result<T>) -> Result<T> {
    let logs: Vec<String> = started.iter().map(Gateway::log_tail).collect();
    let mut stop_error = None;
    while let Some(gateway) = started.pop() {
        if let Err(error) = gateway.stop().await {
            stop_error.get_or_insert(error);
        }
    }
    let value = outcome.map_err(|error| {
        let logs: Vec<String> =
            logs.iter().enumerate().map(|(n, log)| format!("--- instance {n} log ---\n{log}")).collect();
        crate::error::Error::msg(format!("{error}\n{}", logs.join("\n")))
    })?;
    stop_error.map_or(Ok(value), Err)
}

/// SIGTERM, up to 10 s for a graceful exit, then SIGKILL.
pub async fn terminate(child: &mut Child, pid: u32) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill only sends a signal to our own child's pid.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
