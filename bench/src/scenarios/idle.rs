//! Scenario 4, *idle*: K open streams waiting, the gateway's resident memory per stream
//! (`/proc/<pid>/status` VmRSS after the streams opened and settled, minus before, over K).
//!
//! Two shapes, each on a fresh gateway per repetition (waiting turns outlive their streams):
//! every stream its own waiting turn (K users each waiting on their agent: the headline), and
//! K streams following one waiting turn (the stream's own cost, without a turn's).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt, TryStreamExt};

use super::{count, unique, warm_up, Settings};
use crate::bail;
use crate::database::Store;
use crate::error::Result;
use crate::gateway::{Gateway, GatewaySettings};
use crate::http::Transport;
use crate::procfs::rss_kib;
use crate::report::{Report, Unit};
use crate::sse::{self, EventStream, ReadOptions, Received};
use crate::target::{gateway_name, Script, Target};

/// Streams being opened at once.
const OPENING: usize = 128;
/// How long a turn waits: longer than any repetition lasts.
const WAIT_MS: u64 = 600_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    OwnTurns,
    SharedTurn,
}

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    transport: Transport,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let streams = settings.sizes.idle_streams;
    let name = gateway_name(store, transport);
    for shape in [Shape::OwnTurns, Shape::SharedTurn] {
        let mut per_stream = Vec::new();
        let mut open_rates = Vec::new();
        for repetition in 1..=settings.repeats {
            quiet.wait().await?;
            let gateway = Gateway::start(gateways, store, transport, &Script::Wait { ms: WAIT_MS }).await?;
            let outcome = measure(&gateway, shape, settings).await;
            let log = gateway.log_tail();
            gateway.stop().await?;
            let (kib, opened_per_sec, total_kib) =
                outcome.map_err(|e| crate::error::Error::msg(format!("{e}\n--- gateway log ---\n{log}")))?;
            eprintln!(
                "  {name} idle{} {repetition}/{}: {streams} streams, RSS {:.1} MiB, {kib:.1} KiB per stream (opened {opened_per_sec:.0}/s)",
                if shape == Shape::SharedTurn { " (one shared turn)" } else { "" },
                settings.repeats,
                total_kib / 1024.0,
            );
            per_stream.push(kib);
            open_rates.push(opened_per_sec);
        }
        let (key, label) = match shape {
            Shape::OwnTurns => (
                format!("{name}/idle"),
                format!("idle {} streams, each its own waiting turn, {name}: RSS per stream", count(streams)),
            ),
            Shape::SharedTurn => (
                format!("{name}/idle-shared"),
                format!("idle {} streams on one waiting turn, {name}: RSS per stream", count(streams)),
            ),
        };
        report.add(&key, &label, Unit::KiB, per_stream, None);
        report.add(format!("{key}/open-rate"), format!("{label} — streams opened"), Unit::PerSec, open_rates, None);
    }
    Ok(())
}

/// Opens the streams; returns (KiB per stream, streams opened per second, RSS in KiB).
async fn measure(gateway: &Gateway, shape: Shape, settings: &Settings) -> Result<(f64, f64, f64)> {
    let target = gateway.target();
    let client = target.client();
    let mut stored = warm_up(&client, &target, settings).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(target.pid)?;
    let streams = settings.sizes.idle_streams;
    let shared_thread = unique("idle-shared");
    let started = Instant::now();
    let opened = &AtomicU64::new(0);
    let open = |i: u64| {
        let client = client.clone();
        let target: Target = target.clone();
        let thread = match shape {
            Shape::OwnTurns => unique("idle"),
            Shape::SharedTurn => shared_thread.clone(),
        };
        let options = ReadOptions { stop_after: Some(2), ..settings.read_options() };
        let timeout = settings.timeout;
        async move {
            let body = sse::run_body(&thread, "run-1", &Script::Wait { ms: WAIT_MS }.peer_props());
            let work = async {
                let response = sse::open(&client, &target.run_url, body, None).await?;
                let mut received = Received::default();
                let stream = sse::read(response, &mut received, options).await?;
                if received.events < 2 || received.terminal.is_some() {
                    bail!(
                        "idle stream {i}: expected RUN_STARTED and STATE_SNAPSHOT, then a wait; got {} events{}",
                        received.events,
                        received.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                    );
                }
                Ok::<EventStream, crate::error::Error>(stream)
            };
            let opened_so_far = opened;
            let outcome = tokio::time::timeout(timeout, work).await.map_err(|_| {
                crate::error::Error::msg(format!(
                    "idle stream {i} got no RUN_STARTED and STATE_SNAPSHOT within {timeout:?} ({} of {streams} streams were open)",
                    opened_so_far.load(Ordering::Relaxed)
                ))
            })??;
            opened_so_far.fetch_add(1, Ordering::Relaxed);
            Ok::<EventStream, crate::error::Error>(outcome)
        }
    };
    let mut open_streams: Vec<EventStream> = Vec::with_capacity(streams as usize);
    if shape == Shape::SharedTurn {
        // The first run starts the turn; the others follow it.
        open_streams.push(open(0).await?);
    }
    let first = open_streams.len() as u64;
    let rest: Vec<EventStream> = stream::iter(first..streams).map(open).buffer_unordered(OPENING).try_collect().await?;
    open_streams.extend(rest);
    let opened_per_sec = streams as f64 / started.elapsed().as_secs_f64().max(1e-9);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(target.pid)?;
    if settings.strict {
        stored += match shape {
            Shape::OwnTurns => 2 * streams,
            Shape::SharedTurn => 2,
        };
        let in_table = gateway.database.event_count().await?;
        if in_table != stored as i64 {
            bail!("idle: the events table holds {in_table} events, {stored} were streamed");
        }
    }
    drop(open_streams);
    let per_stream = after.saturating_sub(before) as f64 / streams.max(1) as f64;
    Ok((per_stream, opened_per_sec, after as f64))
}
