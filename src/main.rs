//! The `agui-gateway` command: parses the command line and dispatches. Everything else lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agui_gateway::config::{self, Config};

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
    },
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
}

#[derive(clap::Args)]
struct Common {
    /// A TOML file merged over the built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Database URL: sqlite://FILE or postgres://… (overrides config and env).
    #[arg(long)]
    database: Option<String>,
}

impl Common {
    fn load(&self) -> Result<Config, config::ConfigError> {
        let mut config = Config::load(self.config.as_deref(), std::env::vars())?;
        if let Some(url) = &self.database {
            config.database.url = url.clone();
        }
        Ok(config)
    }
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
            println!(
                "config ok: listen {}, database {}, {} tenant(s), agents: {}",
                config.listen,
                config::redact_url(&config.database.url),
                config.tenants.len(),
                config.agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
            );
            Ok(())
        }
        Command::Migrate { common } => {
            let config = common.load()?;
            init_logging(&config);
            let store = agui_gateway::store::connect(&config.database.url, 2).await?;
            store.migrate().await?;
            println!("migrations applied to {}", config::redact_url(&config.database.url));
            Ok(())
        }
        Command::Serve { common, listen } => {
            let mut config = common.load()?;
            init_logging(&config);
            if let Some(listen) = listen {
                config.listen = listen;
            }
            let address = config.listen_addr()?;
            let (state, stop_streams) = agui_gateway::server::build(config.clone()).await?;
            let engine = state.engine.clone();
            let listener = tokio::net::TcpListener::bind(address).await?;
            tracing::info!(
                address = %listener.local_addr()?,
                database = %config::redact_url(&config.database.url),
                instance = %engine.instance(),
                "agui-gateway listening"
            );
            let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
            let shutdown = async move {
                shutdown_signal().await;
                let _ = stopping_tx.send(true);
            };
            let mut server = tokio::spawn(agui_gateway::http::serve(listener, state, stop_streams, shutdown));
            tokio::select! {
                served = &mut server => return Ok(served??),
                _ = stopping.wait_for(|stop| *stop) => {}
            }
            // Streams are ending (clients resume elsewhere); hand the turns over meanwhile.
            let grace = std::time::Duration::from_secs(config.turns.shutdown_grace_secs);
            let deadline = tokio::time::Instant::now() + grace;
            engine.hand_over(grace).await;
            match tokio::time::timeout_at(deadline, server).await {
                Ok(served) => served??,
                Err(_) => tracing::warn!("the grace period ended before every connection closed"),
            }
            tracing::info!("stopped");
            Ok(())
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log.filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
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
    tracing::info!("shutting down: closing streams (clients resume with Last-Event-ID) and handing turns over");
}
