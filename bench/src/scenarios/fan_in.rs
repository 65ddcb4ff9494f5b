//! Scenario 2, *fan-in*: C turns at once, N content events each, a client on each. The figure
//! is all events received per second, from the first request sent to the last `RUN_FINISHED`.
//! [`run_over`] spreads the turns round-robin over several instances of one database.

use std::sync::Arc;
use std::time::Instant;

use super::{add_cpu, add_instance_cpu, count, raw_reference, run_to_end, unique, warm_up, Repetitions, Settings};
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
    let stored = warm_up(&client, target, settings).await?;
    let key = format!("{}/fan-in", target.name);
    let label = format!(
        "fan-in {} turns × {} events, {}",
        count(settings.sizes.fan_in_turns),
        count(settings.sizes.fan_in_events),
        target.name
    );
    let reference = raw_reference(target, "b1000/c8");
    let over = run_over(std::slice::from_ref(target), &key, &label, reference, settings, report).await?;
    Ok(stored + over)
}

/// The scenario with turn `i` on `targets[i % n]` (the warm-up is the caller's); figures go
/// under `key`, with each instance's CPU when there are several. Returns the events streamed.
/// Waits for every turn's client, checks each turn delivered its `per_turn` content events, and
/// returns the events received and when the last one arrived (`started` if none did).
async fn await_turns(
    tasks: Vec<tokio::task::JoinHandle<Result<sse::Received>>>,
    name: &str,
    per_turn: u64,
    started: Instant,
) -> Result<(u64, Instant)> {
    let mut events = 0;
    let mut last = started;
    for task in tasks {
        let received = task.await.context("a fan-in client task failed")??;
        received.expect_finished(&format!("fan-in on {name}"))?;
        if received.content_events != per_turn {
            bail!("fan-in on {name}: a turn delivered {} content events of {per_turn}", received.content_events);
        }
        events += received.events;
        if let Some(at) = received.last_at {
            last = last.max(at);
        }
    }
    Ok((events, last))
}

pub async fn run_over(
    targets: &[Target],
    key: &str,
    label: &str,
    reference: Option<String>,
    settings: &Settings,
    report: &mut Report,
) -> Result<u64> {
    let Some(target) = targets.first() else { crate::bail!("fan-in: no target") };
    let clients: Vec<crate::http::Client> = targets.iter().map(Target::client).collect();
    let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
    let mut stored = 0;
    let turns = settings.sizes.fan_in_turns;
    let per_turn = settings.sizes.fan_in_events;
    let props = Arc::new(script(settings).peer_props());
    let mut rates = Vec::new();
    let mut cpu = Vec::new();
    let mut per_instance: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let before = CpuSnapshot::take_all(&pids)?;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..turns {
            let on = i as usize % targets.len();
            let client = clients[on].clone();
            let url = targets[on].run_url.clone();
            let body = sse::run_body(&unique("fanin"), "run-1", &props);
            let options = settings.read_options();
            let timeout = settings.timeout;
            tasks.push(tokio::spawn(async move { run_to_end(&client, &url, body, None, options, timeout).await }));
        }
        let (events, last) = await_turns(tasks, &target.name, per_turn, started).await?;
        let after = CpuSnapshot::take_all(&pids)?;
        let elapsed = last.duration_since(started).as_secs_f64().max(1e-9);
        let rate = events as f64 / elapsed;
        let use_ = before.until(&after);
        let each = before.each_until(&after);
        if targets.len() > 1 {
            let each: Vec<String> = each.iter().map(|c| format!("{c:.0} %")).collect();
            eprintln!("    CPU per instance: {}", each.join(", "));
        }
        eprintln!(
            "  {} {repetition}/{}: {events} events in {:.0} ms = {rate:.0}/s (CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %)",
            key,
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
        for (all, one) in per_instance.iter_mut().zip(each) {
            all.push(one);
        }
    }
    report.add(key, label, Unit::PerSec, rates, reference);
    add_cpu(report, key, label, &cpu);
    add_instance_cpu(report, key, label, per_instance, targets);
    Ok(stored)
}
