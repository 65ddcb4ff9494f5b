//! The operator commands of `agui-gateway`, one file per command group, each with its command
//! line (clap) and its body: [`keys`] (tenant API keys and app keys), [`audit`] (the audit
//! trail), [`token`] (minting an app token), [`decide`] (an interrupt decided at a terminal),
//! [`threads`] (list, show, delete), [`healthcheck`] (a container's probe). `main.rs` parses
//! the command line and dispatches here.
//!
//! A command opens only what it needs, through the [`Wiring`] it is handed: `admin` sits below
//! `server`, which connects the store and builds an engine.

pub mod audit;
pub mod decide;
pub mod healthcheck;
pub mod keys;
pub mod threads;
pub mod token;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use crate::auth::{Caller, Person, Scopes};
use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::store::Store;

/// What a command ends with: done, or the words printed after `error:`.
pub type CommandResult = Result<(), Box<dyn Error>>;

/// The store and engine a command works on, built by `server` from the loaded configuration
/// (`server::CommandWiring`).
#[async_trait::async_trait(?Send)]
pub trait Wiring {
    /// The configured database, migrated.
    async fn store(&self, config: &Config) -> Result<Arc<dyn Store>, Box<dyn Error>>;
    /// An engine beside the serving instances (it serves nothing and sweeps nothing).
    async fn engine(&self, config: Config) -> Result<Engine, Box<dyn Error>>;
}

/// The options every command that reads the configuration takes.
#[derive(clap::Args)]
pub struct Common {
    /// A TOML file merged over the built-in defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://FILE or postgres://… (overrides config and env).
    #[arg(long)]
    pub database: Option<String>,
}

impl Common {
    /// The configuration: the built-in defaults, the file, the environment, then `--database`.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut config = Config::load(self.config.as_deref(), Config::environment()?)?;
        if let Some(url) = &self.database {
            config.database.url = url.clone();
        }
        Ok(config)
    }
}

/// Refuses a tenant the configuration does not name, before anything is opened.
fn known_tenant(config: &Config, tenant: &str) -> Result<(), Box<dyn Error>> {
    match config.tenant(tenant) {
        Some(_) => Ok(()),
        None => Err(format!("tenant '{tenant}' is not configured").into()),
    }
}

/// A person at the terminal (`via: cli`).
fn operator(person: &str, roles: Vec<String>) -> Caller {
    Caller::Person(Person {
        id: person.to_string(),
        roles,
        scopes: Scopes::all(),
        clearance: Vec::new(),
        via: Some("cli".into()),
        app_key: None,
        expires_at: None,
    })
}
