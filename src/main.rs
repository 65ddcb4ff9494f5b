//! The `agui-gateway` command: parses the command line and dispatches. Everything else lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agui_gateway::auth::{keys, Scopes};
use agui_gateway::config::{self, Config};
use agui_gateway::store::{KeyKind, Store};

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
    Healthcheck {
        /// The URL to probe.
        #[arg(default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 3)]
        timeout_secs: u64,
        /// A PEM bundle of CA certificates to trust for an `https://` URL, besides the
        /// platform's roots and `SSL_CERT_FILE`: the CA of the gateway's own certificate.
        #[arg(long, value_name = "FILE")]
        cacert: Option<String>,
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
    /// Gateway app tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Tenant API keys and app keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Print the audit trail, oldest first.
    Audit {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        tenant: Option<String>,
        /// From when: an RFC 3339 time (2025-01-31T12:00:00Z), a date (2025-01-31), or an age
        /// (30m, 12h, 7d).
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 1000)]
        limit: i64,
    },
    /// Decide an interrupt as a person, with the same checks as the decision route.
    Decide {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// The person deciding.
        #[arg(long = "as")]
        person: String,
        /// The person's roles, comma-separated.
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
        /// The interrupt's id (`int_…`).
        interrupt: String,
        /// Approve (or answer, with --payload); without it the interrupt is denied.
        #[arg(long)]
        approve: bool,
        /// The payload, as JSON (e.g. '{"answer": "Paris"}').
        #[arg(long)]
        payload: Option<String>,
    },
    /// List, show and delete threads.
    Threads {
        #[command(subcommand)]
        command: ThreadsCommand,
    },
}

#[derive(Subcommand)]
enum ThreadsCommand {
    /// List a tenant's threads, newest activity first, as JSON (`next_cursor` names the next
    /// page).
    List {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Only the threads this person would see listed (default: every thread).
        #[arg(long = "as")]
        person: Option<String>,
        /// Only threads whose latest turn ran this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only threads whose latest turn is running, waiting, succeeded, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Threads per page (1 to 200).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// The previous page's `next_cursor`.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a thread: its turns, open interrupts and conversation.
    Show {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Show it as this person sees it (a person's threads are private).
        #[arg(long = "as", default_value = "local")]
        person: String,
        thread: String,
    },
    /// Erase a thread with its turns, events, interrupts and board (refused while a turn of it
    /// runs or waits); audited as `cli`.
    Delete {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        thread: String,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print an app token acting as a person (for development; needs auth.app_tokens' key).
    Mint {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        tenant: String,
        /// The person (the token's sub).
        #[arg(long)]
        sub: String,
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
        /// Gateway scopes (threads:read, threads:content, agent:NAME, agent:*); default: all.
        #[arg(long, value_delimiter = ',')]
        scopes: Vec<String>,
        /// Board labels the person may read.
        #[arg(long, value_delimiter = ',')]
        clearance: Vec<String>,
        /// Lifetime in seconds (default: auth.app_tokens.mint_ttl_secs).
        #[arg(long)]
        ttl: Option<u64>,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key and print it (it is shown only this once).
    Create {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        tenant: String,
        /// A name for people: what the key is for.
        #[arg(long)]
        name: String,
        /// Agents the key may start (`*` for all of the tenant's).
        #[arg(long, value_delimiter = ',', required = true)]
        agents: Vec<String>,
        /// An app key: accepted only by the token exchange, for apps acting for persons.
        #[arg(long)]
        app: bool,
    },
    /// List keys (never their secrets).
    List {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a key; its open streams end within seconds.
    Revoke {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        tenant: String,
        /// The key's id (the part after agk_, before the next _).
        id: String,
    },
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
        Command::Token { command } => token_command(command).await,
        Command::Keys { command } => keys_command(command).await,
        Command::Audit { common, tenant, since, limit } => audit_command(common, tenant, since, limit).await,
        Command::Decide { common, tenant, person, roles, interrupt, approve, payload } => {
            let config = common.load()?;
            let payload =
                payload.map(|p| serde_json::from_str(&p)).transpose().map_err(|e| format!("--payload: {e}"))?;
            let engine = agui_gateway::server::build_passive(config.clone()).await?;
            let caller = operator(&person, roles);
            let outcome = agui_gateway::admin::decide(&engine, &tenant, &caller, &interrupt, approve, payload).await;
            // A turn the decision set going is handed to the serving instances at once.
            engine.hand_over(std::time::Duration::from_secs(config.turns.shutdown_grace_secs)).await;
            println!("{}", serde_json::to_string_pretty(&outcome.map_err(|e| e.to_string())?)?);
            Ok(())
        }
        Command::Threads { command } => threads_command(command).await,
        Command::Migrate { common } => {
            let config = common.load()?;
            let _telemetry = init_logging(&config);
            let store = agui_gateway::server::connect_store(&config.database.url, 2).await?;
            store.migrate().await?;
            println!("migrations applied to {}", config::redact_url(&config.database.url));
            Ok(())
        }
        Command::Healthcheck { url, timeout_secs, cacert } => healthcheck(&url, timeout_secs, cacert).await,
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

async fn threads_command(command: ThreadsCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        ThreadsCommand::List { common, tenant, person, agent, status, limit, cursor } => {
            let config = common.load()?;
            known_tenant(&config, &tenant)?;
            let engine = agui_gateway::server::build_passive(config).await?;
            let person = person.map(|p| operator(&p, Vec::new()));
            let filter = agui_gateway::engine::threads::ThreadFilter { agent, status, cursor, limit: Some(limit) };
            let listed = agui_gateway::admin::list_threads(&engine, &tenant, person.as_ref(), &filter)
                .await
                .map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&listed)?);
            Ok(())
        }
        ThreadsCommand::Show { common, tenant, person, thread } => {
            let config = common.load()?;
            let engine = agui_gateway::server::build_passive(config.clone()).await?;
            let shown = agui_gateway::admin::show_thread(&engine, &tenant, &operator(&person, Vec::new()), &thread)
                .await
                .map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&shown)?);
            Ok(())
        }
        ThreadsCommand::Delete { common, tenant, thread } => {
            let config = common.load()?;
            known_tenant(&config, &tenant)?;
            let engine = agui_gateway::server::build_passive(config).await?;
            agui_gateway::admin::delete_thread(&engine, &tenant, &thread).await.map_err(|e| e.to_string())?;
            println!("deleted thread {thread} of tenant {tenant}");
            Ok(())
        }
    }
}

async fn open_store(config: &Config) -> Result<std::sync::Arc<dyn Store>, Box<dyn std::error::Error>> {
    let store = agui_gateway::server::connect_store(&config.database.url, 2).await?;
    store.migrate().await?;
    Ok(store)
}

fn known_tenant(config: &Config, tenant: &str) -> Result<(), Box<dyn std::error::Error>> {
    match config.tenant(tenant) {
        Some(_) => Ok(()),
        None => Err(format!("tenant '{tenant}' is not configured").into()),
    }
}

async fn token_command(command: TokenCommand) -> Result<(), Box<dyn std::error::Error>> {
    let TokenCommand::Mint { common, tenant, sub, roles, scopes, clearance, ttl } = command;
    let config = common.load()?;
    known_tenant(&config, &tenant)?;
    let app = agui_gateway::auth::jwt::AppTokens::from_config(&config.auth.app_tokens)?;
    let scopes = if scopes.is_empty() { Scopes::all() } else { Scopes::gateway(scopes.iter().map(String::as_str)) };
    let now = jsonwebtoken_now();
    let claims = agui_gateway::auth::jwt::AppClaims {
        tenant: &tenant,
        sub: &sub,
        roles: &roles,
        scopes: &scopes,
        clearance: &clearance,
        via: None,
        app_key: None,
        expires_at: now + ttl.unwrap_or(config.auth.app_tokens.mint_ttl_secs),
    };
    match app.sign(&claims, now) {
        Some(token) => {
            println!("{}", token?);
            Ok(())
        }
        None => {
            Err("no signing key: set auth.app_tokens.secret (AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET) or private_key_file"
                .into())
        }
    }
}

fn jsonwebtoken_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

async fn keys_command(command: KeysCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        KeysCommand::Create { common, tenant, name, agents, app } => {
            let config = common.load()?;
            known_tenant(&config, &tenant)?;
            let store = open_store(&config).await?;
            let kind = if app { KeyKind::App } else { KeyKind::Tenant };
            let request = keys::KeyRequest { tenant: &tenant, name: &name, kind, agents: &agents, actor: "cli" };
            let made = keys::create(store.as_ref(), request).await?;
            eprintln!(
                "created {} key {} ({}) for tenant {}, scopes: {}. It is shown only now:",
                kind.as_str(),
                made.row.id,
                made.row.name,
                made.row.tenant,
                made.row.scopes
            );
            println!("{}", made.key);
            Ok(())
        }
        KeysCommand::List { common, tenant } => {
            let config = common.load()?;
            let store = open_store(&config).await?;
            println!(
                "{:<16}  {:<12}  {:<6}  {:<24}  {:<24}  {:<10}  scopes",
                "id", "tenant", "kind", "name", "created", "status"
            );
            for key in store.list_api_keys(tenant.as_deref()).await? {
                let status = match key.revoked_at_ms {
                    Some(at) => format!("revoked {}", agui_gateway::auth::time::format_ms(at)),
                    None => "active".to_string(),
                };
                println!(
                    "{:<16}  {:<12}  {:<6}  {:<24}  {:<24}  {:<10}  {}",
                    key.id,
                    key.tenant,
                    key.kind.as_str(),
                    key.name,
                    agui_gateway::auth::time::format_ms(key.created_at_ms),
                    status,
                    key.scopes
                );
            }
            Ok(())
        }
        KeysCommand::Revoke { common, tenant, id } => {
            let config = common.load()?;
            let store = open_store(&config).await?;
            if keys::revoke(store.as_ref(), &tenant, &id, "cli").await? {
                println!("revoked key {id} of tenant {tenant}");
                Ok(())
            } else {
                Err(format!("tenant {tenant} has no active key {id}").into())
            }
        }
    }
}

async fn audit_command(
    common: Common,
    tenant: Option<String>,
    since: Option<String>,
    limit: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    let config = common.load()?;
    let since_ms = match since.as_deref() {
        Some(text) => agui_gateway::auth::time::parse_since(text, agui_gateway::protocol::now_ms())
            .ok_or_else(|| format!("--since '{text}': give an RFC 3339 time, a date, or an age like 30m, 12h, 7d"))?,
        None => 0,
    };
    let store = open_store(&config).await?;
    for row in store.audit_rows(tenant.as_deref(), since_ms, limit).await? {
        let entry = row.entry;
        println!(
            "{}  {}  {}  {}  {}  {}",
            agui_gateway::auth::time::format_ms(entry.at_ms),
            entry.tenant,
            entry.action,
            entry.actor,
            entry.via.as_deref().unwrap_or("-"),
            entry.detail
        );
    }
    Ok(())
}

fn init_logging(config: &Config) -> agui_gateway::telemetry::Telemetry {
    agui_gateway::telemetry::init(config)
}

/// One GET: success only for `200`, so a container is healthy exactly when `/readyz` says so.
/// An `https://` URL is verified like every outbound connection (certificate and host name),
/// trusting `cacert` too.
async fn healthcheck(url: &str, timeout_secs: u64, cacert: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    let trust = config::TlsConfig { extra_ca_file: cacert.unwrap_or_default(), ..Default::default() };
    let tls = agui_gateway::tls::client_config(&trust)?;
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(timeout_secs))
        .use_preconfigured_tls(rustls::ClientConfig::clone(&tls))
        .build()?;
    let host = reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
    let status = match client.get(url).send().await {
        Ok(response) => response.status(),
        Err(error) => {
            let why =
                agui_gateway::tls::describe_failure(&error, &host).unwrap_or_else(|| error.without_url().to_string());
            return Err(format!("{}: {why}", config::redact_url(url)).into());
        }
    };
    if status == reqwest::StatusCode::OK {
        Ok(())
    } else {
        Err(format!("{} answered {status}", config::redact_url(url)).into())
    }
}

/// A person at the terminal (`via: cli`).
fn operator(person: &str, roles: Vec<String>) -> agui_gateway::auth::Caller {
    agui_gateway::auth::Caller::Person(agui_gateway::auth::Person {
        id: person.to_string(),
        roles,
        scopes: agui_gateway::auth::Scopes::all(),
        clearance: Vec::new(),
        via: Some("cli".into()),
        app_key: None,
        expires_at: None,
    })
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
