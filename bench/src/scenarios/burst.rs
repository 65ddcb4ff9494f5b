//! Scenario 1, *burst*: one turn of N content events (the `burst` step), one client. The figure
//! is events received per second, from sending the request to receiving `RUN_FINISHED`; on the
//! gateway every one of them was durably committed before it was sent.

use std::time::{Duration, Instant};

use super::{add_cpu, count, raw_reference, run_to_end, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::error::Result;
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::sse;
use crate::target::{Script, Target};

/// The script the gateway's `bench` agent runs for this scenario.
pub fn script(settings: &Settings) -> Script {
    Script::Burst { events: settings.sizes.burst_events, bytes: settings.sizes.bytes }
}

/// Runs the scenario with bursts of `events`; returns the events the target should have stored.
pub async fn run(target: &Target, events: u64, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let mut stored = warm_up(&client, target, settings).await?;
    let props = Script::Burst { events, bytes: settings.sizes.bytes }.peer_props();
    let mut rates = Vec::new();
    let mut cpu = Vec::new();
    let mut sizes = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let body = sse::run_body(&unique("burst"), "run-1", &props);
        let before = CpuSnapshot::take(target.pid)?;
        let started = Instant::now();
        let received =
            run_to_end(&client, &target.run_url, body, None, settings.read_options(), settings.timeout).await?;
        let after = CpuSnapshot::take(target.pid)?;
        received.expect_finished(&format!("burst on {}", target.name))?;
        if received.content_events != events {
            bail!("burst on {}: {} content events arrived, {events} were sent", target.name, received.content_events);
        }
        let elapsed = received.last_at.map_or(0.0, |last| last.duration_since(started).as_secs_f64());
        let rate = received.events as f64 / elapsed.max(1e-9);
        let use_ = before.until(&after);
        eprintln!(
            "  {} burst {repetition}/{}: {} events in {:.0} ms = {:.0}/s (CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %)",
            target.name,
            settings.repeats,
            received.events,
            elapsed * 1000.0,
            rate,
            use_.server,
            use_.postgres,
            use_.tool,
            use_.other
        );
        stored += received.events;
        if !repetitions.keep(use_.other) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        }
        sizes.push(received.data_bytes as f64 / received.events.max(1) as f64);
        rates.push(rate);
        cpu.push(use_);
    }
    let key = format!("{}/burst", target.name);
    let label = format!("burst 1 × {} events, {}", count(events), target.name);
    report.add(&key, &label, Unit::PerSec, rates, raw_reference(target, "b100/c1"));
    add_cpu(report, &key, &label, &cpu);
    if target.is_gateway {
        let mean = sizes.iter().sum::<f64>() / sizes.len().max(1) as f64;
        eprintln!("  {}: mean event JSON {mean:.0} bytes", target.name);
    }
    Ok(stored)
}
