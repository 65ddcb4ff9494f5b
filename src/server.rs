//! Wiring: from a [`Config`] to a ready [`AppState`] (store connected and migrated, the agents
//! built, engine started, authentication loaded), and [`Server::serve`], which serves it and runs
//! the whole shutdown. `agui-gateway serve` and the tests both go through [`Server`]; the
//! operator commands get their store and engine from [`CommandWiring`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::agents;
use crate::auth::{Auth, AuthSetupError};
use crate::config::Config;
use crate::engine::Engine;
use crate::http::tls::{TlsError, TlsServing};
use crate::http::AppState;
use crate::store::{self, StoreError};
use crate::tls::{self, TlsSetupError};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] crate::engine::StartError),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    #[error(transparent)]
    Serving(#[from] TlsError),
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// The database's TLS handshake failed at start (`sslmode=verify-full` and a certificate
    /// that does not verify, …).
    #[error("database: TLS: {0}")]
    DatabaseTls(String),
}

/// Connects to the database; a failed TLS handshake is told as the certificate problem it is.
pub async fn connect_store(url: &str, max_connections: u32) -> Result<Arc<dyn store::Store>, BuildError> {
    let parsed = reqwest::Url::parse(url).ok();
    // The driver reports an unreadable certificate file without its name; name it here.
    for (parameter, path) in parsed.iter().flat_map(|u| u.query_pairs()) {
        if matches!(&*parameter, "sslrootcert" | "sslcert" | "sslkey") {
            if let Err(error) = std::fs::metadata(&*path) {
                return Err(BuildError::DatabaseTls(format!("{parameter} '{path}' cannot be read ({error})")));
            }
        }
    }
    store::connect(url, max_connections).await.map_err(|error| {
        let host = parsed.as_ref().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        let trusted = "sslrootcert in the database URL, or the platform's";
        match tls::describe_failure_trusting(&error, &host, trusted) {
            Some(problem) => BuildError::DatabaseTls(problem),
            None => BuildError::Store(error),
        }
    })
}

/// Applies the migrations, and makes the log's partitions for the turns to come at the
/// configured size (PostgreSQL): the database is then ready to log.
pub async fn migrate(store: &dyn store::Store, config: &Config) -> Result<(), store::StoreError> {
    store.set_log_partition_turns(config.event_log.turns_per_partition());
    store.migrate().await
}

/// An engine for a one-off command (`decide`, `threads show`) beside serving instances.
pub async fn build_passive(config: Config) -> Result<crate::engine::Engine, BuildError> {
    let config = Arc::new(config);
    let outbound = tls::client_config(&config.tls)?;
    let store = connect_store(&config.database.url, 2).await?;
    migrate(store.as_ref(), &config).await?;
    let agents = Arc::new(agents::registry(&config, &outbound));
    Ok(Engine::start_passive(config, store, agents).await?)
}

/// What the operator commands (`crate::admin`) open: the store (two connections, migrated) and
/// a passive engine, built as [`connect_store`] and [`build_passive`] build them.
pub struct CommandWiring;

#[async_trait::async_trait(?Send)]
impl crate::admin::Wiring for CommandWiring {
    async fn store(&self, config: &Config) -> Result<Arc<dyn store::Store>, Box<dyn std::error::Error>> {
        let store = connect_store(&config.database.url, 2).await?;
        migrate(store.as_ref(), config).await?;
        Ok(store)
    }

    async fn engine(&self, config: Config) -> Result<Engine, Box<dyn std::error::Error>> {
        Ok(build_passive(config).await?)
    }
}

/// Connects to the configured database and the wake-up bus, applies migrations, loads the keys
/// and starts the engine; the engine and auth read the time of day from `clock`, the one clock
/// of the gateway (the machine's when serving, a test's moved by hand).
pub async fn build(
    config: Config,
    clock: Arc<dyn crate::clock::Clock>,
) -> Result<(AppState, watch::Sender<bool>), BuildError> {
    // Before anything can say them: the secrets this configuration holds.
    config.hold_its_secrets();
    let config = Arc::new(config);
    // Read first: a bad certificate file is reported before anything connects anywhere.
    let outbound = tls::client_config(&config.tls)?;
    let store = connect_store(&config.database.url, config.database.max_connections).await?;
    // The wake-up bus before the migrations: an instance that cannot reach it does not start,
    // and it should change nothing on its way out (a newer schema under older instances).
    let bus = crate::bus::connect(&config.bus, store.clone()).await.map_err(crate::engine::StartError::from)?;
    migrate(store.as_ref(), &config).await?;
    let auth = Auth::start_with_clock(&config, store.clone(), &outbound, clock.clone()).await?;
    let agents = Arc::new(agents::registry(&config, &outbound));
    let engine = Engine::start_on_bus(config, store, agents, bus, clock).await?;
    Ok(AppState::new(engine, auth))
}

/// A started gateway (store migrated, engine and authentication running), not yet serving.
pub struct Server {
    state: AppState,
    stop_streams: watch::Sender<bool>,
    /// Set when `tls.cert_file` / `tls.key_file` are: `listen` serves HTTPS.
    tls: Option<TlsServing>,
}

impl Server {
    /// Everything [`build`] does, and loads the served certificate (a bad file is an error
    /// here, before anything listens); the server then waits for [`Server::serve`].
    pub async fn start(config: Config) -> Result<Server, BuildError> {
        Server::start_with_clock(config, crate::clock::system()).await
    }

    /// [`Server::start`] with the time of day read from `clock` (a test's, moved by hand).
    pub async fn start_with_clock(config: Config, clock: Arc<dyn crate::clock::Clock>) -> Result<Server, BuildError> {
        let tls = TlsServing::from_config(&config.tls)?;
        let (state, stop_streams) = build(config, clock).await?;
        Ok(Server { state, stop_streams, tls })
    }

    /// Whether `listen` serves HTTPS.
    pub fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// What the handlers share: the engine, authentication and configuration.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves on `listener` until `shutdown` resolves, then shuts down as an instance does on
    /// SIGTERM (§4.6):
    ///
    /// 1. drains ([`Engine::drain`]): `readyz` answers 503 at once, connections are still
    ///    accepted and open streams stay open, the turns running here go on to their end for up
    ///    to `turns.drain_secs`, and a run that still arrives is served by handing its turn to
    ///    another instance;
    /// 2. then stops accepting connections and ends every stream still open with a broken
    ///    body, which clients report (and `clients/js` resumes anywhere with `Last-Event-ID`);
    /// 3. meanwhile tells the turns still running to stop, commit what they said and give their
    ///    leases back ([`Engine::hand_over`]);
    /// 4. returns within `turns.shutdown_grace_secs` of the drain's end even if a connection
    ///    hangs (logged as a warning).
    ///
    /// An error of the listener before any shutdown is returned as it is.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Server { state, stop_streams, tls } = self;
        let engine = state.engine.clone();
        let grace = Duration::from_secs(state.config.turns.shutdown_grace_secs);
        let drain = Duration::from_secs(state.config.turns.drain_secs);
        let (stopping_tx, mut stopping) = watch::channel(false);
        let draining = engine.clone();
        let shutdown = async move {
            shutdown.await;
            tracing::info!(
                drain_secs = drain.as_secs(),
                "draining: readyz answers 503; the turns running here go on to their end, new ones go elsewhere"
            );
            draining.drain(drain).await;
            tracing::info!("shutting down: closing streams (clients resume with Last-Event-ID) and handing turns over");
            let _ = stopping_tx.send(true);
        };
        let server = crate::http::serve(listener, tls.as_ref(), state, stop_streams, shutdown);
        tokio::pin!(server);
        let finished_first = tokio::select! {
            served = &mut server => Some(served),
            _ = stopping.wait_for(|stop| *stop) => None,
        };
        match finished_first {
            // The listener failed before any shutdown was asked for.
            Some(served) if !*stopping.borrow() => return served,
            // Shutdown was asked for and no connection was open, so the server was done at
            // once: the turns are still handed over.
            Some(served) => {
                engine.hand_over(grace).await;
                served?;
            }
            // Streams are ending (the server drains them); hand the turns over meanwhile.
            None => {
                let deadline = tokio::time::Instant::now() + grace;
                let (_, served) = tokio::join!(engine.hand_over(grace), tokio::time::timeout_at(deadline, &mut server));
                match served {
                    Ok(served) => served?,
                    Err(_) => tracing::warn!("the grace period ended before every connection closed"),
                }
            }
        }
        tracing::info!("stopped");
        Ok(())
    }
}
