//! The database of one benchmark run: a fresh PostgreSQL database (`agui_bench_<random>`, dropped
//! afterwards) on the given server, or a SQLite file in a temporary directory.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::Connection;

use crate::error::{Context, Result};

/// Which store the gateway runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Store {
    Postgres,
    Sqlite,
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Store::Postgres => "postgres",
            Store::Sqlite => "sqlite",
        })
    }
}

pub struct Database {
    pub store: Store,
    /// The URL the gateway (and the raw scenario) connect to.
    pub url: String,
    /// For PostgreSQL: the server URL (without a database) and the database's name.
    postgres: Option<(String, String)>,
    /// For SQLite: the directory holding the file, deleted with it.
    _dir: Option<tempfile::TempDir>,
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

impl Database {
    /// Creates an empty database. `postgres_server` is like `postgres://postgres@127.0.0.1:5432`.
    pub async fn create(store: Store, postgres_server: &str) -> Result<Database> {
        match store {
            Store::Postgres => {
                let server = postgres_server.trim_end_matches('/').to_string();
                let name = format!("agui_bench_{}", unique_suffix());
                let mut admin = connect_admin(&server).await?;
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .await
                    .with_context(|| format!("creating database {name}"))?;
                let _ = admin.close().await;
                Ok(Database { store, url: format!("{server}/{name}"), postgres: Some((server, name)), _dir: None })
            }
            Store::Sqlite => {
                let dir = tempfile::Builder::new()
                    .prefix("agui-bench-")
                    .tempdir()
                    .context("creating a temporary directory for SQLite")?;
                let url = format!("sqlite://{}", dir.path().join("gateway.db").display());
                Ok(Database { store, url, postgres: None, _dir: Some(dir) })
            }
        }
    }

    /// A second handle on a database another gateway of the run created (several instances on
    /// one database): it is dropped by the owner's handle, never by this one.
    pub fn shared(&self) -> Database {
        Database { store: self.store, url: self.url.clone(), postgres: None, _dir: None }
    }

    /// Events in the gateway's log, in rows from before segments and in segments (to check
    /// that what streamed was also stored).
    pub async fn event_count(&self) -> Result<i64> {
        const COUNT: &str =
            "SELECT (SELECT count(*) FROM events) + (SELECT COALESCE(SUM(events), 0) FROM event_segments)";
        let count: (i64,) = match self.store {
            Store::Postgres => {
                let mut conn =
                    sqlx::PgConnection::connect(&self.url).await.context("connecting to the benchmark database")?;
                sqlx::query_as(COUNT).fetch_one(&mut conn).await.context("counting events")?
            }
            Store::Sqlite => {
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(&self.url).context("SQLite URL")?;
                let mut conn =
                    sqlx::SqliteConnection::connect_with(&options).await.context("opening the benchmark database")?;
                sqlx::query_as(COUNT).fetch_one(&mut conn).await.context("counting events")?
            }
        };
        Ok(count.0)
    }

    /// Drops the PostgreSQL database (the SQLite directory goes with `self`).
    pub async fn drop_database(mut self) -> Result<()> {
        if let Some((server, name)) = self.postgres.take() {
            let mut admin = connect_admin(&server).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await
                .with_context(|| format!("dropping database {name}"))?;
            let _ = admin.close().await;
        }
        Ok(())
    }
}

async fn connect_admin(server: &str) -> Result<sqlx::PgConnection> {
    sqlx::PgConnection::connect(&format!("{server}/postgres"))
        .await
        .with_context(|| format!("connecting to PostgreSQL at {server}"))
}

/// The PostgreSQL server's version string.
pub async fn postgres_version(server: &str) -> Result<String> {
    let mut admin = connect_admin(server.trim_end_matches('/')).await?;
    let (version,): (String,) =
        sqlx::query_as("SHOW server_version").fetch_one(&mut admin).await.context("reading the PostgreSQL version")?;
    let _ = admin.close().await;
    Ok(version)
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some((_, name)) = &self.postgres {
            eprintln!("warning: database {name} was not dropped");
        }
    }
}
