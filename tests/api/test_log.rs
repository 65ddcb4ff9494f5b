//! The tracing subscriber of this test process, for the gateways the tests start in it
//! ([`TestApp`](crate::helpers::TestApp)): with `TEST_LOG=1` their logs go to the output of the
//! test that started them (shown when it fails, or always with `--nocapture`); a test that
//! checks what is logged reads them through [`captured`]. The subscriber is installed once, and
//! only when one of the two is asked for: otherwise the tests stay quiet. (The gateway
//! processes a test starts show their logs under the same switch:
//! [`test_log_on`](crate::gateway_process::test_log_on).)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::gateway_process::test_log_on;

/// What the gateways log at info level, from the first call of [`captured`] on.
static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static CAPTURING: AtomicBool = AtomicBool::new(false);

/// The filter of the logs `TEST_LOG=1` shows, as the gateway processes get it.
const SHOWN: &str = "info,sqlx=warn";

/// Shows the logs of this process's gateways in the test's output under `TEST_LOG=1`.
pub fn show_when_asked() {
    if test_log_on() {
        install();
    }
}

/// Everything logged at info level in this test process from now on, from any thread.
pub fn captured() -> &'static Mutex<Vec<u8>> {
    CAPTURING.store(true, Ordering::SeqCst);
    install();
    &CAPTURED
}

fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let capture = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| CaptureWriter)
            .with_filter(EnvFilter::new("info"));
        let shown = test_log_on().then(|| {
            tracing_subscriber::fmt::layer().with_ansi(false).with_test_writer().with_filter(EnvFilter::new(SHOWN))
        });
        let subscriber = tracing_subscriber::registry().with(capture).with(shown);
        tracing::subscriber::set_global_default(subscriber).expect("the tests install the only subscriber");
    });
}

/// Appends to [`CAPTURED`] once a test asked for it; drops the lines before.
struct CaptureWriter;

impl std::io::Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if CAPTURING.load(Ordering::SeqCst) {
            CAPTURED.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
