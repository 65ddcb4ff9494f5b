//! Test support: provides the tests with a NATS server, as `pg_server.rs` does PostgreSQL.
//!
//! [`server_url`] decides which server the tests share, in this order: `NATS_URL`, then a
//! server already answering on 127.0.0.1:4222, then a throwaway `nats-server` started once per
//! test process on a free port. A test that stops the server under the gateways starts one of
//! its own ([`NatsServer::start`]), which it can kill and start again on the same port. Every
//! server started here is killed by a watchdog once the test process exits (and by `Drop`
//! before that). Tests that need NATS fail, not skip: when nothing works this panics with what
//! was tried. Only `std` is used.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::watchdog;

/// `nats://HOST:PORT` of the NATS server the tests share. Called from many test threads; the
/// work is done once per process.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn server_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Some(url) = std::env::var("NATS_URL").ok().filter(|u| !u.is_empty()) {
            return url;
        }
        let default: SocketAddr = ([127, 0, 0, 1], 4222).into();
        if TcpStream::connect_timeout(&default, Duration::from_secs(1)).is_ok() {
            return "nats://127.0.0.1:4222".to_string();
        }
        // Kept for the whole process: the watchdog ends it after the process exits.
        let server = NatsServer::start();
        let url = server.url.clone();
        std::mem::forget(server);
        url
    })
    .clone()
}

/// A `nats-server` process of this test process, on 127.0.0.1.
#[allow(dead_code)]
pub struct NatsServer {
    /// `nats://127.0.0.1:<port>`.
    pub url: String,
    pub port: u16,
    binary: PathBuf,
    child: Option<Child>,
}

#[allow(dead_code)]
impl NatsServer {
    /// Starts a server on a port the system picks (`-p -1`), read back from its log.
    pub fn start() -> NatsServer {
        let binary = find_nats_server().unwrap_or_else(|| {
            panic!(
                "no NATS server for the tests: NATS_URL is unset, nothing answers on 127.0.0.1:4222, \
                 and no `nats-server` was found on PATH, in /usr/sbin or in /usr/bin \
                 (Debian: apt-get install nats-server)"
            )
        });
        let (child, port) = spawn(&binary, -1);
        NatsServer { url: format!("nats://127.0.0.1:{port}"), port, binary, child: Some(child) }
    }

    /// Kills the server (SIGKILL: every connection drops at once, nothing is said to clients).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (killing it first if it runs).
    pub fn start_again(&mut self) {
        self.kill();
        let (child, _) = spawn(&self.binary, i32::from(self.port));
        self.child = Some(child);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `nats-server` on `port` (-1: any) and waits for it to say it is ready; returns it
/// with the port it listens on. A watchdog kills it once this process has exited.
// The watchdog is never waited for: it is to outlive this process.
#[allow(clippy::zombie_processes)]
fn spawn(binary: &PathBuf, port: i32) -> (Child, u16) {
    let mut child = Command::new(binary)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let stderr = child.stderr.take().expect("stderr");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // Reads the log to its end (a full pipe would stall the server).
    std::thread::spawn(move || {
        let mut ready = Some(ready_tx);
        let mut listening = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(address) = line.split("Listening for client connections on ").nth(1) {
                listening = address.trim().rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            }
            if line.contains("Server is ready") {
                if let (Some(ready), Some(port)) = (ready.take(), listening) {
                    let _ = ready.send(port);
                }
            }
        }
    });
    let Ok(listening) = ready_rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{} on port {port} did not become ready", binary.display());
    };
    watchdog::after_this_process(&format!("kill -9 {} 2>/dev/null", child.id()), "the throwaway NATS server");
    (child, listening)
}

/// `nats-server` on PATH, else in /usr/sbin (where Debian puts it) or /usr/bin.
fn find_nats_server() -> Option<PathBuf> {
    let path: Vec<PathBuf> = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    path.into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}
