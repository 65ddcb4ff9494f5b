//! Scenario *handshake*: what a new connection costs the gateway. N connections one after
//! another, each new — TCP connect; over TLS a full handshake (the client keeps no session to
//! resume); over HTTP/2 also the connection preface and SETTINGS — each carrying one
//! `GET /livez` read to its end, then closed. Per transport: time per connection (p50, p99),
//! connections per second, and the gateway's and the tool's CPU per connection (from
//! `/proc/<pid>/stat` over the whole loop, divided by N).
//!
//! One at a time, so the time is a connection's latency, not a queue's; plain TCP beside the
//! TLS transports gives what TLS adds.

use std::time::{Duration, Instant};

use super::{add_cpu, count, Repetitions, Settings};
use crate::bail;
use crate::database::Store;
use crate::error::{Error, Result};
use crate::gateway::{Gateway, GatewaySettings};
use crate::http::{Client, Transport};
use crate::procfs::CpuSnapshot;
use crate::report::{Report, Unit};
use crate::stats::percentile;
use crate::target::{gateway_name, Script};

/// Connections made before measuring (the gateway's first accepts, the tool's caches).
const WARM_CONNECTIONS: u64 = 20;

pub async fn run(
    gateways: &GatewaySettings,
    store: Store,
    transports: &[Transport],
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    for &transport in transports {
        quiet.wait().await?;
        let gateway = Gateway::start(gateways, store, transport, &Script::Wait { ms: 1_000 }).await?;
        let outcome = measure(&gateway, settings, report).await;
        let log = gateway.log_tail();
        gateway.stop().await?;
        outcome.map_err(|e| Error::msg(format!("{e}\n--- gateway log ---\n{log}")))?;
    }
    Ok(())
}

/// One new connection and one `GET` on it, read to the end.
async fn one(client: &Client, url: &str) -> Result<()> {
    // A client of its own: nothing (no HTTP/2 connection) is shared with the previous one.
    let response = client.fresh().get(url).await?;
    let status = response.status;
    let body = response.into_bytes().await?;
    if status != 200 {
        bail!("GET {url} answered {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(())
}

async fn measure(gateway: &Gateway, settings: &Settings, report: &mut Report) -> Result<()> {
    let name = gateway_name(gateway.database.store, gateway.transport);
    let url = gateway.url("/livez");
    let client = gateway.client();
    let connections = settings.sizes.handshakes.max(1);
    for _ in 0..WARM_CONNECTIONS {
        one(&client, &url).await?;
    }
    let mut figures: [Vec<f64>; 5] = Default::default();
    let mut cpu = Vec::new();
    let mut repetitions = Repetitions::new(settings);
    while let Some(repetition) = repetitions.next() {
        let mut times_us = Vec::with_capacity(connections as usize);
        let before = CpuSnapshot::take(gateway.pid)?;
        let started = Instant::now();
        let work = async {
            for _ in 0..connections {
                let at = Instant::now();
                one(&client, &url).await?;
                times_us.push(at.elapsed().as_micros() as u64);
            }
            Ok::<_, Error>(())
        };
        tokio::time::timeout(settings.timeout, work).await.map_err(|_| {
            Error::msg(format!("{connections} connections to {url} took over {:?}", settings.timeout))
        })??;
        let elapsed = started.elapsed().as_secs_f64();
        let after = CpuSnapshot::take(gateway.pid)?;
        let use_ = before.until(&after);
        times_us.sort_unstable();
        let ms = |q: f64| percentile(&times_us, q).map_or(0.0, |us| us as f64 / 1000.0);
        // % of a core over the loop → milliseconds of CPU per connection.
        let per_connection = |percent: f64| percent / 100.0 * elapsed * 1000.0 / connections as f64;
        let rate = connections as f64 / elapsed.max(1e-9);
        eprintln!(
            "  {name} handshake {repetition}/{}: {connections} connections, {rate:.0}/s, p50 {:.2} ms, p99 {:.2} ms; CPU per connection: gateway {:.3} ms, tool {:.3} ms (CPU: server {:.0} %, postgres {:.0} %, tool {:.0} %, other {:.0} %)",
            settings.repeats,
            ms(0.5),
            ms(0.99),
            per_connection(use_.server),
            per_connection(use_.tool),
            use_.server,
            use_.postgres,
            use_.tool,
            use_.other
        );
        if !repetitions.keep(use_.other) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        for (figure, value) in
            figures.iter_mut().zip([ms(0.5), ms(0.99), rate, per_connection(use_.server), per_connection(use_.tool)])
        {
            figure.push(value);
        }
        cpu.push(use_);
    }
    let key = format!("{name}/handshake");
    let label = format!("handshake: {} new connections + GET /livez, one at a time, {name}", count(connections));
    let [p50, p99, rate, server, tool] = figures;
    report.add(format!("{key}/p50"), format!("{label}: time per connection p50"), Unit::Ms, p50, None);
    report.add(format!("{key}/p99"), format!("{label}: time per connection p99"), Unit::Ms, p99, None);
    report.add(format!("{key}/rate"), format!("{label}: connections"), Unit::PerSec, rate, None);
    report.add(format!("{key}/server-cpu"), format!("{label}: gateway CPU per connection"), Unit::Ms, server, None);
    report.add(format!("{key}/tool-cpu"), format!("{label}: load tool CPU per connection"), Unit::Ms, tool, None);
    add_cpu(report, &key, &label, &cpu);
    Ok(())
}
