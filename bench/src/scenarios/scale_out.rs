//! Scenario *scale-out*: N gateway instances (`--instances`, 3 by default) on ONE PostgreSQL
//! database, started by the tool on the same fresh database, each on its own port, over a
//! given bus (`--bus`): `postgres` (LISTEN/NOTIFY, the gateway's default: no `[bus]` table is
//! written) or `nats` (each config gets `[bus] kind = "nats"` and the NATS URL; a NATS server
//! is started as the tool's child when none answers there).
//!
//! - fan-in: the fan-in turns spread round-robin over the N, against the same turns on one
//!   of them, in the same run (same database, same warm caches).
//! - ticking: the ticking streams started on instance `i % N` and followed on `(i + 1) % N`:
//!   the run's first event is read (its `id:`), the connection dropped, and the run requested
//!   again on the next instance with `Last-Event-ID`. That instance hears of the owner's
//!   appends through the bus, so its latency is the cross-instance path; the same streams
//!   reconnected on the instance that started them are the comparison. The ticking window
//!   also reads PostgreSQL's commits and the `events` table's index scans (`crate::pgstats`):
//!   the index scans per commit are the database reads a follower makes per committed batch.
//!
//! A gateway that refuses the configuration (a `[bus]` it does not know) is reported as a
//! failed configuration of that bus, with the gateway's own words; the other runs go on.
//!
//! PostgreSQL only: SQLite is one process's file.

use super::fan_in;
use super::ticking::{self, Follow};
use super::{count, raw_reference, warm_up, Settings};
use crate::database::{Database, Store};
use crate::error::{Error, Result};
use crate::gateway::{agent_toml, Gateway, GatewaySettings};
use crate::report::Report;
use crate::target::Target;

/// Instances on the one database, by default.
pub const INSTANCES: usize = 3;

/// How the instances hear of each other's appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bus {
    Postgres,
    Nats,
}

impl std::fmt::Display for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bus::Postgres => "postgres",
            Bus::Nats => "nats",
        })
    }
}

/// One configuration of the scenario.
#[derive(Debug, Clone)]
pub struct Layout {
    pub instances: usize,
    pub bus: Bus,
    pub nats_url: String,
}

impl Layout {
    /// The figures' key prefix: the historical one for the default layout.
    fn name(&self) -> String {
        if self.instances == INSTANCES && self.bus == Bus::Postgres {
            "gateway/postgres/scale-out".to_string()
        } else {
            format!("gateway/postgres/scale-out/{}x{}", self.bus, self.instances)
        }
    }

    /// The config every instance gets on top of the tool's (empty for the default bus).
    fn bus_toml(&self) -> String {
        match self.bus {
            Bus::Postgres => String::new(),
            Bus::Nats => format!("\n[bus]\nkind = \"nats\"\nnats_url = \"{}\"\n", self.nats_url),
        }
    }
}

/// The agents every instance serves: `bench` runs the fan-in burst, `tick` the ticking script.
fn agents(settings: &Settings) -> String {
    format!("{}{}", agent_toml("bench", &fan_in::script(settings)), agent_toml("tick", &ticking::script(settings)))
}

pub async fn run(
    gateways: &GatewaySettings,
    layout: &Layout,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let _nats = match layout.bus {
        Bus::Nats => crate::nats::ensure(&layout.nats_url).await?,
        Bus::Postgres => None,
    };
    let mut gateways = gateways.clone();
    gateways.extra_config.push_str(&layout.bus_toml());
    let database = Database::create(Store::Postgres, &gateways.postgres).await?;
    let mut started: Vec<Gateway> = Vec::new();
    // The first instance migrates the fresh database; the others start on it once it is ready.
    let outcome = async {
        let mut owner = Some(database);
        for n in 0..layout.instances.max(1) {
            let database = match owner.take() {
                Some(database) => database,
                None => started[0].database.shared(),
            };
            let gateway = Gateway::start_on(&gateways, database, crate::http::Transport::Plain, &agents(settings))
                .await
                .map_err(|error| refused(layout, n, error))?;
            started.push(gateway);
        }
        measure(&started, layout, settings, quiet, report).await
    }
    .await;
    crate::gateway::stop_all(started, outcome).await
}

/// A start-up failure, named a failed configuration when the gateway refused its config.
fn refused(layout: &Layout, n: usize, error: Error) -> Error {
    let text = error.to_string();
    let refusal =
        text.lines().find(|line| line.contains("unknown field") || line.contains("[bus]") || line.contains("bus"));
    match (layout.bus, refusal) {
        (Bus::Nats, Some(line)) => Error::msg(format!(
            "failed configuration: the gateway refused `[bus] kind = \"nats\"` (instance {n}), in its words: {}",
            line.trim()
        )),
        _ => Error::msg(format!("starting instance {n} ({} bus): {text}", layout.bus)),
    }
}

async fn measure(
    instances: &[Gateway],
    layout: &Layout,
    settings: &Settings,
    quiet: &crate::Quiet,
    report: &mut Report,
) -> Result<()> {
    let n_instances = instances.len();
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
    let name = layout.name();
    let bus = layout.bus;
    let sizes = &settings.sizes;
    let fan_in_label = |n: usize| {
        format!(
            "scale-out fan-in {} turns × {} events over {n} instance{} of one database ({bus} bus)",
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
        &format!("{name}/fan-in-{n_instances}"),
        &fan_in_label(n_instances),
        reference,
        settings,
        report,
    )
    .await?;
    for (suffix, offset, how) in [
        ("ticking-same", 0, "reconnected on the instance that started them"),
        ("ticking-cross", 1, "started on instance i, followed on instance i+1 (woken by the bus)"),
    ] {
        quiet.wait().await?;
        let label = format!(
            "scale-out ticking {} streams × {}/s over {n_instances} instances ({bus} bus), {how}",
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
    super::check_stored(settings, &instances[0].database, stored, "scale-out").await
}
