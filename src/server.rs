//! Wiring: from a [`Config`] to a ready [`AppState`] (store connected and migrated, the agents
//! built, engine started, authentication loaded). Used by `serve` and by the tests, which then call
//! [`crate::http::serve`].

use std::sync::Arc;

use tokio::sync::watch;

use crate::agents;
use crate::auth::{Auth, AuthSetupError};
use crate::config::Config;
use crate::engine::Engine;
use crate::http::AppState;
use crate::store::{self, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
}

/// An engine for a one-off command (`decide`, `threads show`) beside serving instances.
pub async fn build_passive(config: Config) -> Result<crate::engine::Engine, BuildError> {
    let config = Arc::new(config);
    let store = store::connect(&config.database.url, 2).await?;
    store.migrate().await?;
    let agents = Arc::new(agents::registry(&config));
    Ok(Engine::start_passive(config, store, agents).await?)
}

/// Connects to the configured database, applies migrations, loads the keys and starts the engine.
pub async fn build(config: Config) -> Result<(AppState, watch::Sender<bool>), BuildError> {
    let config = Arc::new(config);
    let store = store::connect(&config.database.url, config.database.max_connections).await?;
    store.migrate().await?;
    let auth = Auth::start(&config, store.clone()).await?;
    let agents = Arc::new(agents::registry(&config));
    let engine = Engine::start(config, store, agents).await?;
    Ok(AppState::new(engine, auth))
}
