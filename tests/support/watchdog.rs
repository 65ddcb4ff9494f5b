//! Test support: a throwaway server started for the tests never outlives the test process,
//! however that process ends (a panic, a kill, `cargo test` stopped).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Runs `cleanup` (a shell command line) as soon as this test process has gone: a shell in a
/// process group of its own polls for the process once a second.
pub fn after_this_process(cleanup: &str, what: &str) {
    let script = format!("while kill -0 {} 2>/dev/null; do sleep 1; done; {cleanup}", std::process::id());
    let spawned = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(error) = spawned {
        panic!("cannot spawn the watchdog shell for {what}: {error}");
    }
}
