//! Test support: the gateway as a separate process (so a test can kill it with SIGKILL), its
//! address and instance id read from its start-up log line.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One gateway process.
#[allow(dead_code)]
pub struct Instance {
    pub child: Child,
    pub address: String,
    pub id: String,
}

/// How to start one gateway process: `Spawn::new(config, database)`, optionally with more
/// `serve` arguments, environment variables or an open-file limit, then [`Spawn::start`].
pub struct Spawn<'a> {
    config: &'a Path,
    database: &'a str,
    args: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
    open_files: Option<u64>,
}

#[allow(dead_code)]
impl<'a> Spawn<'a> {
    pub fn new(config: &'a Path, database: &'a str) -> Spawn<'a> {
        Spawn { config, database, args: Vec::new(), env: Vec::new(), open_files: None }
    }

    /// More `serve` arguments (e.g. `--log-format json`).
    pub fn args(mut self, args: &[&'a str]) -> Spawn<'a> {
        self.args.extend_from_slice(args);
        self
    }

    /// Variables added to the process's environment (e.g. `SSL_CERT_FILE`).
    pub fn env(mut self, env: &[(&'a str, &'a str)]) -> Spawn<'a> {
        self.env.extend_from_slice(env);
        self
    }

    /// The process's open-file limit (soft and hard), set by the shell that starts it
    /// (`ulimit -n`).
    pub fn open_files(mut self, limit: u64) -> Spawn<'a> {
        self.open_files = Some(limit);
        self
    }

    /// Starts the process and waits for its start-up line; every line it logs goes to `logs`.
    pub fn start(self, logs: Arc<Mutex<Vec<String>>>) -> Instance {
        let command = match self.open_files {
            Some(limit) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!(r#"ulimit -n {limit} && exec "$0" "$@""#))
                    .arg(env!("CARGO_BIN_EXE_agui-gateway"));
                shell
            }
            None => Command::new(env!("CARGO_BIN_EXE_agui-gateway")),
        };
        spawn_command(command, self.config, self.database, logs, &self.args, &self.env)
    }
}

/// The switch that shows a test's gateway logs: with `TEST_LOG=1` every line of the gateways a
/// test starts goes to the test's output (shown when it fails, or always with `--nocapture`);
/// quiet otherwise.
pub fn test_log_on() -> bool {
    std::env::var("TEST_LOG").is_ok_and(|v| v == "1")
}

fn spawn_command(
    mut command: Command,
    config: &Path,
    database: &str,
    logs: Arc<Mutex<Vec<String>>>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Instance {
    // The test's own variables go last: a test that asks for another log filter gets it.
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--database", database, "--config"])
        .arg(config)
        .args(args)
        .env("NO_COLOR", "1")
        .env("AGUI_GATEWAY_LOG_FILTER", "info,sqlx=warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let lines = logs.clone();
    let (show, pid) = (test_log_on(), child.id());
    // The reader thread inherits the test's output capture, so its lines land in the test's
    // output rather than the terminal.
    let reader = std::thread::spawn(move || {
        let mut ready = Some(ready_tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let plain = strip_ansi(&line);
            if show {
                eprintln!("[gateway {pid}] {plain}");
            }
            // Kept before the start is announced: a test that reads the logs as soon as
            // `start` returns finds the start-up line among them.
            lines.lock().unwrap_or_else(|p| p.into_inner()).push(plain.clone());
            if plain.contains("agui-gateway listening") {
                // A pretty line says `address=…`; a JSON line has the same names among its fields.
                let json: Option<serde_json::Value> = serde_json::from_str(&plain).ok();
                let field = |name: &str| match &json {
                    Some(line) => line["fields"][name].as_str().unwrap_or_default().to_string(),
                    None => plain
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix(&format!("{name}=")))
                        .map(str::to_string)
                        .unwrap_or_default(),
                };
                if let Some(ready) = ready.take() {
                    let _ = ready.send((field("address"), field("instance")));
                }
            }
        }
    });
    let (address, id) = ready_rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
        // Its last lines say why: end it and read them all before failing.
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        panic!("the gateway did not start: {:?}", logs.lock().unwrap_or_else(|p| p.into_inner()))
    });
    Instance { child, address, id }
}

/// A test that fails midway must not leave its gateways running (they would hold ports and
/// database connections past the test, and in CI past the run).
impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Applies the migrations with the `migrate` command, so instances started together do not
/// race to create the schema.
#[allow(dead_code)]
pub fn migrate(database: &str) {
    let status = Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
        .args(["migrate", "--database", database])
        .stdout(Stdio::null())
        .status()
        .expect("migrate runs");
    assert!(status.success(), "migrate failed on {database}");
}
