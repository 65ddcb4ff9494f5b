//! Scenario *binary*: the same finished turn (the replay scenario's: a message of
//! `replay_events − 5` content deltas of `bytes` characters) read back over SSE and over the
//! binary transport (`Accept: application/vnd.ag-ui.event+proto`), each replayed
//! [`REPLAYS`] times in a row: bytes on the wire per event, events per second (request sent
//! to last byte), and the gateway's CPU time per event. The two transports alternate which
//! goes first in each repetition, so neither always meets the colder cache.
//!
//! The tool only frames what it reads (blank lines for SSE, length prefixes for binary), so
//! both figures are the gateway's and the wire's, not a client's JSON or protobuf decoder.

use std::time::Instant;

use memchr::memmem;

use super::{count, run_to_end, unique, warm_up, Repetitions, Settings};
use crate::bail;
use crate::error::{Context, Result};
use crate::http::Client;
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::sse;
use crate::target::Target;

/// Replays of the turn per transport per repetition: enough CPU time to read off
/// `/proc/<pid>/stat`'s clock ticks.
pub const REPLAYS: usize = 20;

/// The binary transport's media type.
const BINARY: &str = "application/vnd.ag-ui.event+proto";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Sse,
    Binary,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::Sse => "sse",
            Wire::Binary => "binary",
        }
    }

    fn accept(self) -> &'static str {
        match self {
            Wire::Sse => "text/event-stream",
            Wire::Binary => BINARY,
        }
    }
}

/// What one replay delivered: its bytes and its events.
struct Read {
    bytes: u64,
    events: u64,
}

/// POSTs `body` after `last_event_id` asking for `wire`, reads the whole answer and counts its
/// events by their framing.
async fn replay(client: &Client, url: &str, body: &str, last_event_id: &str, wire: Wire) -> Result<Read> {
    let headers = [("Accept", wire.accept()), ("Last-Event-ID", last_event_id)];
    let response = client.post(url, body, &headers).await?;
    if response.status != 200 {
        bail!("binary: {} replay answered {}", wire.name(), response.status);
    }
    let content_type = response.header("content-type").unwrap_or("").to_string();
    if !content_type.starts_with(wire.accept()) {
        bail!("binary: asked for {}, answered {content_type:?}", wire.accept());
    }
    let bytes = response.into_bytes().await?;
    let events = match wire {
        Wire::Sse => memmem::find_iter(&bytes, b"\n\n").count() as u64,
        Wire::Binary => {
            let mut at = 0;
            let mut frames = 0;
            while at + 4 <= bytes.len() {
                let length = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
                at += 4 + length;
                frames += 1;
            }
            if at != bytes.len() {
                bail!("binary: the frames do not walk the body ({at} of {} bytes)", bytes.len());
            }
            frames
        }
    };
    Ok(Read { bytes: bytes.len() as u64, events })
}

/// Runs the scenario (gateway only); returns the events the gateway should have stored.
/// Per wire (SSE first, then binary): bytes per event, events read per second and the
/// gateway's CPU per event, one sample per kept repetition.
type Figures = [(Vec<f64>, Vec<f64>, Vec<f64>); 2];

/// Adds each wire's three figures to the report.
fn add_figures(report: &mut Report, target: &Target, settings: &Settings, figures: Figures) {
    let label = format!(
        "replay of a finished {}-event turn ({} chars a delta), {}",
        count(settings.sizes.replay_events),
        settings.sizes.bytes,
        target.name
    );
    for (wire, (bytes, rates, cpu)) in [Wire::Sse, Wire::Binary].into_iter().zip(figures) {
        let key = format!("{}/binary/{}", target.name, wire.name());
        report.add(
            format!("{key}/bytes-per-event"),
            format!("{label}, {}: bytes per event", wire.name()),
            Unit::Times,
            bytes,
            None,
        );
        report.add(format!("{key}/rate"), format!("{label}, {}: events read", wire.name()), Unit::PerSec, rates, None);
        report.add(
            format!("{key}/cpu-per-event"),
            format!("{label}, {}: gateway CPU per event", wire.name()),
            Unit::Us,
            cpu,
            None,
        );
    }
}

pub async fn run(target: &Target, settings: &Settings, report: &mut Report) -> Result<u64> {
    let client = target.client();
    let mut stored = warm_up(&client, target, settings).await?;
    let props = super::replay::script(settings).peer_props();
    let mut figures: Figures = Default::default();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let body = sse::run_body(&unique("binary"), "run-1", &props);
        let original =
            run_to_end(&client, &target.run_url, body.clone(), None, settings.read_options(), settings.timeout).await?;
        original.expect_finished("binary: the original run")?;
        stored += original.events;
        let first_id = original.first_id.clone().context("binary: the original run's events carry no id")?;
        let order = if repetition % 2 == 0 { [Wire::Sse, Wire::Binary] } else { [Wire::Binary, Wire::Sse] };
        let mut others = Vec::new();
        let mut measured = Vec::new();
        for wire in order {
            let before = CpuSnapshot::take(target.pid)?;
            let started = Instant::now();
            let (mut bytes, mut events) = (0, 0);
            for _ in 0..REPLAYS {
                let read = replay(&client, &target.run_url, &body, &first_id, wire).await?;
                if read.events + 1 != original.events {
                    bail!(
                        "binary: a {} replay carried {} events, expected {}",
                        wire.name(),
                        read.events,
                        original.events - 1
                    );
                }
                bytes += read.bytes;
                events += read.events;
            }
            let wall = started.elapsed().as_secs_f64();
            let cpu = before.until(&CpuSnapshot::take(target.pid)?);
            let per_event_us = cpu.server / 100.0 * wall / events as f64 * 1e6;
            let rate = events as f64 / wall;
            let bytes_per_event = bytes as f64 / events as f64;
            eprintln!(
                "  {} binary {repetition}/{}: {}: {bytes_per_event:.1} bytes/event, {rate:.0} events/s, {per_event_us:.2} µs gateway CPU/event (other CPU {:.0} %)",
                target.name,
                settings.repeats,
                wire.name(),
                cpu.other
            );
            others.push(cpu.other);
            measured.push((wire, bytes_per_event, rate, per_event_us));
        }
        if !repetitions.keep(others.iter().copied().fold(0.0, f64::max)) {
            continue;
        }
        for (wire, bytes_per_event, rate, per_event_us) in measured {
            let slot = &mut figures[usize::from(wire == Wire::Binary)];
            slot.0.push(bytes_per_event);
            slot.1.push(rate);
            slot.2.push(per_event_us);
        }
    }
    add_figures(report, target, settings, figures);
    Ok(stored)
}
