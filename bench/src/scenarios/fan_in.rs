//! Scenario 2, *fan-in*: C turns at once, N content events each, a client on each. The figure
//! is all events received per second, from the first request sent to the last `RUN_FINISHED`.

use std::sync::Arc;
use std::time::Instant;

use super::{add_cpu, count, raw_reference, run_to_end, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::error::{Context, Result};
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::sse;
use crate::target::{Script, Target};

pub fn script(settings: &Settings) -> Script {
    Script::Burst { events: settings.sizes.fan_in_events, bytes: settings.sizes.bytes }
}

/// Runs the scenario; returns the events the target should have stored.
pub async fn run(target: &Target, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let mut stored = warm_up(&client, target, settings).await?;
    let turns = settings.sizes.fan_in_turns;
    let per_turn = settings.sizes.fan_in_events;
    let props = Arc::new(script(settings).peer_props());
    let mut rates = Vec::new();
    let mut cpu = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let before = CpuSnapshot::take(target.pid)?;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..turns {
            let client = client.clone();
            let url = target.run_url.clone();
            let body = sse::run_body(&unique("fanin"), "run-1", &props);
            let options = settings.read_options();
            let timeout = settings.timeout;
            tasks.push(tokio::spawn(async move { run_to_end(&client, &url, body, None, options, timeout).await }));
        }
        let mut events = 0;
        let mut last = started;
        for task in tasks {
            let received = task.await.context("a fan-in client task failed")??;
            received.expect_finished(&format!("fan-in on {}", target.name))?;
            if received.content_events != per_turn {
                bail!(
                    "fan-in on {}: a turn delivered {} content events of {per_turn}",
                    target.name,
                    received.content_events
                );
            }
            events += received.events;
            if let Some(at) = received.last_at {
                last = last.max(at);
            }
        }
        let after = CpuSnapshot::take(target.pid)?;
        let elapsed = last.duration_since(started).as_secs_f64().max(1e-9);
        let rate = events as f64 / elapsed;
        let use_ = before.until(&after);
        eprintln!(
            "  {} fan-in {repetition}/{}: {events} events in {:.0} ms = {rate:.0}/s (CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %)",
            target.name,
            settings.repeats,
            elapsed * 1000.0,
            use_.server,
            use_.postgres,
            use_.tool,
            use_.other
        );
        stored += events;
        if !repetitions.keep(use_.other) {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            continue;
        }
        rates.push(rate);
        cpu.push(use_);
    }
    let key = format!("{}/fan-in", target.name);
    let label = format!("fan-in {} turns × {} events, {}", count(turns), count(per_turn), target.name);
    report.add(&key, &label, Unit::PerSec, rates, raw_reference(target, "b1000/c8"));
    add_cpu(report, &key, &label, &cpu);
    Ok(stored)
}
