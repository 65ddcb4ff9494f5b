//! Scenario 5, *replay*: reconnect into a finished turn of 10,000 events (RUN_STARTED,
//! STATE_SNAPSHOT, a message of `replay_events − 5` content events, RUN_FINISHED) with
//! `Last-Event-ID` naming its first event: time to the first replayed event and to the last
//! (`RUN_FINISHED`), from sending the request. Each repetition replays a turn of its own,
//! finished and left alone for a moment first, so it comes from the table, not from memory.

use std::time::{Duration, Instant};

use super::{count, run_to_end, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::error::{Context, Result};
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::sse;
use crate::target::{Script, Target};

/// Events of a turn around its content: RUN_STARTED, STATE_SNAPSHOT, TEXT_MESSAGE_START,
/// TEXT_MESSAGE_END, RUN_FINISHED.
const FRAME_EVENTS: u64 = 5;

pub fn script(settings: &Settings) -> Script {
    Script::Burst {
        events: settings.sizes.replay_events.saturating_sub(FRAME_EVENTS).max(1),
        bytes: settings.sizes.bytes,
    }
}

/// Runs the scenario (gateway only); returns the events the gateway should have stored.
pub async fn run(target: &Target, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let mut stored = warm_up(&client, target, settings).await?;
    let props = script(settings).peer_props();
    let mut firsts = Vec::new();
    let mut lasts = Vec::new();
    let mut rates = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let body = sse::run_body(&unique("replay"), "run-1", &props);
        let original =
            run_to_end(&client, &target.run_url, body.clone(), None, settings.read_options(), settings.timeout).await?;
        original.expect_finished("replay: the original run")?;
        stored += original.events;
        let first_id = original.first_id.clone().context("replay: the original run's events carry no id")?;
        // Let the finished turn's in-memory feed go, so the replay reads the table.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = CpuSnapshot::take(target.pid)?;
        let started = Instant::now();
        let replayed =
            run_to_end(&client, &target.run_url, body, Some(&first_id), settings.read_options(), settings.timeout)
                .await?;
        replayed.expect_finished("replay")?;
        if replayed.events + 1 != original.events {
            bail!("replay after {first_id}: {} events, expected {}", replayed.events, original.events - 1);
        }
        let since = |at: Option<Instant>| at.map_or(0.0, |at| at.duration_since(started).as_secs_f64() * 1000.0);
        let (first, last) = (since(replayed.first_at), since(replayed.last_at));
        let rate = replayed.events as f64 / (last / 1000.0).max(1e-9);
        eprintln!(
            "  {} replay {repetition}/{}: {} events, first after {first:.2} ms, last after {last:.1} ms ({rate:.0}/s)",
            target.name, settings.repeats, replayed.events
        );
        let cpu = before.until(&CpuSnapshot::take(target.pid)?);
        eprintln!(
            "    ({} socket reads; CPU over the replay: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %)",
            replayed.chunks, cpu.server, cpu.postgres, cpu.tool, cpu.other
        );
        if !repetitions.keep(cpu.other) {
            continue;
        }
        firsts.push(first);
        lasts.push(last);
        rates.push(rate);
    }
    let key = format!("{}/replay", target.name);
    let label = format!("replay of a finished {}-event turn, {}", count(settings.sizes.replay_events), target.name);
    report.add(format!("{key}/first"), format!("{label}: first event"), Unit::Ms, firsts, None);
    report.add(format!("{key}/last"), format!("{label}: last event"), Unit::Ms, lasts, None);
    report.add(format!("{key}/rate"), format!("{label}: events replayed"), Unit::PerSec, rates, None);
    Ok(stored)
}
