//! The `agui-gateway` command: parses the command line and dispatches. The operator commands
//! (keys, audit, token, decide, threads, healthcheck) are `agui_gateway::admin`'s, given the
//! store and engine `server` builds; `serve`, `migrate` and `check-config` call `server` and
//! `config` directly. Everything else lives in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agui_gateway::admin::{self, Common};
use agui_gateway::config::{self, Config};
use agui_gateway::server::CommandWiring;

/// mimalloc, not the system allocator: see the note on the dependency in `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "agui-gateway", version, about = "An AG-UI 1.0 gateway with a durable, replayable event log")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gateway (no config: SQLite in ./agui-gateway.db and the demo agent).
    Serve {
        #[command(flatten)]
        common: Common,
        /// Address to listen on (overrides config and env).
        #[arg(long)]
        listen: Option<String>,
        /// Log lines for people (`pretty`) or one JSON object per line (`json`); overrides
        /// `log.format`.
        #[arg(long, value_enum)]
        log_format: Option<config::LogFormat>,
    },
    /// Exit 0 when a gateway answers 200 at URL (for a container's HEALTHCHECK), else 1.
    Healthcheck(admin::healthcheck::HealthcheckArgs),
    /// Apply the database migrations and exit.
    Migrate {
        #[command(flatten)]
        common: Common,
    },
    /// Load and validate the configuration, then print a summary.
    CheckConfig {
        #[command(flatten)]
        common: Common,
    },
    /// Print the commented default configuration.
    PrintDefaultConfig,
    /// Gateway app tokens.
    Token {
        #[command(subcommand)]
        command: admin::token::TokenCommand,
    },
    /// Tenant API keys and app keys.
    Keys {
        #[command(subcommand)]
        command: admin::keys::KeysCommand,
    },
    /// Print the audit trail, oldest first.
    Audit(admin::audit::AuditArgs),
    /// Decide an interrupt as a person, with the same checks as the decision route.
    Decide(admin::decide::DecideArgs),
    /// List, show and delete threads.
    Threads {
        #[command(subcommand)]
        command: admin::threads::ThreadsCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        Command::PrintDefaultConfig => {
            print!("{}", config::DEFAULT_CONFIG_TOML);
            Ok(())
        }
        Command::CheckConfig { common } => {
            let config = common.load()?;
            // The files `serve` reads at start, read the same way.
            agui_gateway::tls::client_config(&config.tls)?;
            println!(
                "config ok: listen {}, database {}, {} tenant(s), agents: {}",
                config.listen,
                config::redact_url(&config.database.url),
                config.tenants.len(),
                config.agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
            );
            Ok(())
        }
        Command::Token { command } => command.run(),
        Command::Keys { command } => command.run(&CommandWiring).await,
        Command::Audit(args) => args.run(&CommandWiring).await,
        Command::Decide(args) => args.run(&CommandWiring).await,
        Command::Threads { command } => command.run(&CommandWiring).await,
        Command::Healthcheck(args) => args.run().await,
        Command::Migrate { common } => {
            let config = common.load()?;
            let _telemetry = init_logging(&config);
            let store = agui_gateway::server::connect_store(&config.database.url, 2).await?;
            agui_gateway::server::migrate(store.as_ref(), &config).await?;
            println!("migrations applied to {}", config::redact_url(&config.database.url));
            Ok(())
        }
        Command::Serve { common, listen, log_format } => {
            let mut config = common.load()?;
            if let Some(format) = log_format {
                config.log.format = format;
            }
            let _telemetry = init_logging(&config);
            if let Some(listen) = listen {
                config.listen = listen;
            }
            let address = config.listen_addr()?;
            let server = agui_gateway::server::Server::start(config.clone()).await?;
            if server.state().auth.local_dev() {
                tracing::warn!(
                    "no authentication is configured: anonymous callers from loopback act as the local person \
                     'local' (development only; configure [auth] before exposing the gateway)"
                );
            }
            let listener = tokio::net::TcpListener::bind(address).await?;
            tracing::info!(
                address = %listener.local_addr()?,
                scheme = %if server.serves_tls() { "https" } else { "http" },
                database = %config::redact_url(&config.database.url),
                instance = %server.state().engine.instance(),
                "agui-gateway listening"
            );
            Ok(server.serve(listener, shutdown_signal()).await?)
        }
    }
}

fn init_logging(config: &Config) -> agui_gateway::telemetry::Telemetry {
    agui_gateway::telemetry::init(config)
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
