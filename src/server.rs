//! Wiring: from a [`Config`] to a ready [`AppState`] (store connected and migrated, engine
//! started). Used by `serve` and by the tests, which then call [`crate::http::serve`].

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::Config;
use crate::engine::Engine;
use crate::http::AppState;
use crate::store::{self, StoreError};

/// Connects to the configured database, applies migrations and starts the engine.
pub async fn build(config: Config) -> Result<(AppState, watch::Sender<bool>), StoreError> {
    let config = Arc::new(config);
    let store = store::connect(&config.database.url, config.database.max_connections).await?;
    store.migrate().await?;
    let engine = Engine::start(config, store).await?;
    Ok(AppState::new(engine))
}
