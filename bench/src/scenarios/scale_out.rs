//! Scenario *scale-out*: three gateway instances on ONE PostgreSQL database, started by the
//! tool on the same fresh database, each on its own port.
//!
//! - fan-in: the fan-in turns spread round-robin over the three, against the same turns on one
//!   of them, in the same run (same database, same warm caches).
//! - ticking: the ticking streams started on instance `i % 3` and followed on `(i + 1) % 3`:
//!   the run's first event is read (its `id:`), the connection dropped, and the run requested
//!   again on the next instance with `Last-Event-ID`. That instance hears of the owner's
//!   appends through PostgreSQL LISTEN/NOTIFY, so its latency is the cross-instance path;
//!   the same streams reconnected on the instance that started them are the comparison.
//!
//! PostgreSQL only: SQLite is one process's file.

use super::fan_in;
use super::ticking::{self, Follow};
use super::{count, raw_reference, warm_up, Settings};
use crate::bail;
use crate::database::{Database, Store};
use crate::error::{Error, Result};
use crate::gateway::{agent_toml, Gateway, GatewaySettings};
use crate::report::Report;
use crate::target::Target;

/// Instances on the one database.
pub const INSTANCES: usize = 3;

/// The agents every instance serves: `bench` runs the fan-in burst, `tick` the ticking script.
fn agents(settings: &Settings) -> String {
    format!("{}{}", agent_toml("bench", &fan_in::script(settings)), agent_toml("tick", &ticking::script(settings)))
}

pub async fn run(
    gateways: &GatewaySettings,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let database = Database::create(Store::Postgres, &gateways.postgres).await?;
    let mut started: Vec<Gateway> = Vec::new();
    // The first instance migrates the fresh database; the others start on it once it is ready.
    let outcome = async {
        let mut owner = Some(database);
        for _ in 0..INSTANCES {
            let database = match owner.take() {
                Some(database) => database,
                None => started[0].database.shared(),
            };
            started
                .push(Gateway::start_on(gateways, database, crate::http::Transport::Plain, &agents(settings)).await?);
        }
        measure(&started, settings, quiet, report).await
    }
    .await;
    let logs: Vec<String> = started.iter().map(Gateway::log_tail).collect();
    // The owner of the database last: it drops the database.
    let mut stop_error = None;
    while let Some(gateway) = started.pop() {
        if let Err(error) = gateway.stop().await {
            stop_error.get_or_insert(error);
        }
    }
    outcome.map_err(|error| {
        let logs: Vec<String> =
            logs.iter().enumerate().map(|(n, log)| format!("--- instance {n} log ---\n{log}")).collect();
        Error::msg(format!("{error}\n{}", logs.join("\n")))
    })?;
    match stop_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

async fn measure(instances: &[Gateway], settings: &Settings, quiet: &crate::Quiet, report: &mut Report) -> Result<()> {
    let mut fan_in_targets: Vec<Target> = Vec::new();
    let mut tick_targets: Vec<Target> = Vec::new();
    let mut stored = 0;
    for (n, gateway) in instances.iter().enumerate() {
        let mut target = gateway.target();
        target.name = format!("{}/instance{n}", target.name);
        stored += warm_up(&target.client(), &target, settings).await?;
        let mut tick = target.clone();
        tick.run_url = gateway.url("/v1/agui/agents/tick");
        fan_in_targets.push(target);
        tick_targets.push(tick);
    }
    let name = "gateway/postgres/scale-out";
    let sizes = &settings.sizes;
    let fan_in_label = |n: usize| {
        format!(
            "scale-out fan-in {} turns × {} events over {n} instance{} of one database",
            count(sizes.fan_in_turns),
            count(sizes.fan_in_events),
            if n == 1 { "" } else { "s" }
        )
    };
    let reference = raw_reference(&instances[0].target(), "b1000/c8");
    quiet.wait().await?;
    stored += fan_in::run_over(
        &fan_in_targets[..1],
        &format!("{name}/fan-in-1"),
        &fan_in_label(1),
        reference.clone(),
        settings,
        report,
    )
    .await?;
    quiet.wait().await?;
    stored += fan_in::run_over(
        &fan_in_targets,
        &format!("{name}/fan-in-{INSTANCES}"),
        &fan_in_label(INSTANCES),
        reference,
        settings,
        report,
    )
    .await?;
    for (suffix, offset, how) in [
        ("ticking-same", 0, "reconnected on the instance that started them"),
        ("ticking-cross", 1, "started on instance i, followed on instance i+1 (LISTEN/NOTIFY)"),
    ] {
        quiet.wait().await?;
        let label = format!(
            "scale-out ticking {} streams × {}/s over {INSTANCES} instances, {how}",
            count(sizes.tick_streams),
            sizes.tick_rate
        );
        stored += ticking::run_routed(
            &tick_targets,
            Follow::Reconnect { offset },
            &format!("{name}/{suffix}"),
            &label,
            settings,
            report,
        )
        .await?;
    }
    if settings.strict {
        let in_table = instances[0].database.event_count().await?;
        if in_table != stored as i64 {
            bail!("scale-out: the events table holds {in_table} events, {stored} were streamed");
        }
    }
    Ok(())
}
