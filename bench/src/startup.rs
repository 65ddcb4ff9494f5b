//! The gateway's start-up handshake: it is started on port 0 and binds the port itself, then
//! logs `agui-gateway listening address=…` once its listener is bound (the same line the
//! gateway's own tests read, `tests/support/gateway_process.rs`). Reading that line is the wait:
//! no port is found in advance (no bind-drop-rebind race) and no readiness poll sleeps.
//!
//! The other servers the tool starts (the upstream AG-UI server, the peers) do the same in their
//! own words: started on port 0, each prints `listening <base URL>` on stdout once its listener
//! is bound ([`read_server_base`]).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::bail;
use crate::error::{Context, Result};

/// What the start-up line contains.
const LISTENING: &str = "agui-gateway listening";

/// The `address` of a start-up line (pretty, with or without colours, or JSON), or `None` for
/// any other line.
pub fn listening_address(line: &str) -> Option<String> {
    let plain = strip_ansi(line);
    if !plain.contains(LISTENING) {
        return None;
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(&plain) {
        return json["fields"]["address"].as_str().map(str::to_string);
    }
    plain.split_whitespace().find_map(|word| word.strip_prefix("address=")).map(str::to_string)
}

/// Copies `stderr` into `log` line by line until the start-up line, and returns its address;
/// the rest of `stderr` is then copied into `log` by a task of its own until the process ends.
/// Fails when `stderr` ends first (the process exited during start-up).
pub async fn read_listening_address<R, W>(stderr: R, mut log: W) -> Result<String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut lines = BufReader::new(stderr);
    let mut line = String::new();
    loop {
        line.clear();
        let read = lines.read_line(&mut line).await.context("reading the gateway's log")?;
        if read == 0 {
            let _ = log.flush().await;
            bail!("the gateway exited during start-up");
        }
        log.write_all(line.as_bytes()).await.context("writing the gateway log")?;
        if let Some(address) = listening_address(&line) {
            log.flush().await.context("writing the gateway log")?;
            tokio::spawn(async move {
                let _ = tokio::io::copy_buf(&mut lines, &mut log).await;
                let _ = log.flush().await;
            });
            return Ok(address);
        }
    }
}

/// Reads a started server's stdout up to its line `listening <base URL>` and returns the base
/// URL; the rest of `stdout` is then read and dropped by a task of its own, so a server that
/// prints more never blocks on a full pipe. Lines before it (a banner) are passed over. `Err`
/// carries what was read instead, when the server exited (its stdout ended) or did not say where
/// it listens `within`.
pub async fn read_server_base<R>(stdout: R, within: Duration) -> std::result::Result<String, String>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let mut lines = BufReader::new(stdout);
    let mut said = String::new();
    let read = tokio::time::timeout(within, async {
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if let Some(base) = line.trim().strip_prefix("listening ") {
                return Some(base.to_string());
            }
            said.push_str(&line);
        }
    })
    .await;
    let Ok(Some(base)) = read else { return Err(said) };
    tokio::spawn(async move {
        let _ = tokio::io::copy_buf(&mut lines, &mut tokio::io::sink()).await;
    });
    Ok(base)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pretty_start_up_line_gives_its_address() {
        let line =
            "2026-12-04T12:00:00Z  INFO agui_gateway: agui-gateway listening address=127.0.0.1:41234 scheme=http";
        assert_eq!(listening_address(line).as_deref(), Some("127.0.0.1:41234"));
    }

    #[test]
    fn a_coloured_start_up_line_gives_its_address() {
        let line = "\u{1b}[32m INFO\u{1b}[0m agui-gateway listening \u{1b}[3maddress\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:5000";
        assert_eq!(listening_address(line).as_deref(), Some("127.0.0.1:5000"));
    }

    #[test]
    fn a_json_start_up_line_gives_its_address() {
        let line = r#"{"level":"INFO","fields":{"message":"agui-gateway listening","address":"127.0.0.1:6000"}}"#;
        assert_eq!(listening_address(line).as_deref(), Some("127.0.0.1:6000"));
    }

    #[test]
    fn other_lines_give_none() {
        assert_eq!(listening_address("INFO migrations applied address=127.0.0.1:1"), None);
    }

    #[tokio::test]
    async fn the_handshake_reads_the_port_and_keeps_every_line() {
        let stderr: &[u8] = b"INFO starting\nINFO agui-gateway listening address=127.0.0.1:7000\nINFO later\n";
        let (log, mut read_back) = tokio::io::duplex(4096);
        let address = read_listening_address(stderr, log).await.expect("the start-up line");
        assert_eq!(address, "127.0.0.1:7000");
        let mut logged = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut read_back, &mut logged).await.expect("the log");
        assert_eq!(logged.lines().count(), 3, "{logged}");
    }

    #[tokio::test]
    async fn a_server_that_prints_where_it_listens_gives_its_base_url() {
        let stdout: &[u8] = b"a banner\nlistening http://127.0.0.1:8123\nlater output\n";
        let base = read_server_base(stdout, Duration::from_secs(5)).await;
        assert_eq!(base.as_deref(), Ok("http://127.0.0.1:8123"));
    }

    #[tokio::test]
    async fn a_server_that_exits_or_says_something_else_gives_what_it_said() {
        let silent: &[u8] = b"";
        assert_eq!(read_server_base(silent, Duration::from_secs(5)).await, Err(String::new()));
        let other: &[u8] = b"Traceback (most recent call last):\n";
        let said = read_server_base(other, Duration::from_secs(5)).await;
        assert_eq!(said, Err("Traceback (most recent call last):\n".to_string()));
    }

    #[tokio::test]
    async fn a_process_that_ends_before_listening_fails_the_handshake() {
        let stderr: &[u8] = b"ERROR the database does not answer\n";
        let error = read_listening_address(stderr, tokio::io::sink()).await.expect_err("no start-up line");
        assert!(error.to_string().contains("exited during start-up"), "{error}");
    }
}
