//! `agui-gateway keys create|list|revoke`: tenant API keys and app keys, in the database the
//! gateway serves from; a key's secret is printed once, at creation, and never stored.

use super::{known_tenant, CommandResult, Common, Wiring};
use crate::auth::keys;
use crate::auth::time::format_ms;
use crate::store::KeyKind;

#[derive(clap::Subcommand)]
pub enum KeysCommand {
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

impl KeysCommand {
    pub async fn run(self, wiring: &dyn Wiring) -> CommandResult {
        match self {
            KeysCommand::Create { common, tenant, name, agents, app } => {
                let config = common.load()?;
                known_tenant(&config, &tenant)?;
                let store = wiring.store(&config).await?;
                let kind = if app { KeyKind::App } else { KeyKind::Tenant };
                let request = keys::KeyRequest { tenant: &tenant, name: &name, kind, agents: &agents, actor: "cli" };
                let made = keys::create(store.as_ref(), &crate::clock::SystemClock, request).await?;
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
                let store = wiring.store(&config).await?;
                println!(
                    "{:<16}  {:<12}  {:<6}  {:<24}  {:<24}  {:<10}  scopes",
                    "id", "tenant", "kind", "name", "created", "status"
                );
                for key in store.list_api_keys(tenant.as_deref()).await? {
                    let status = match key.revoked_at_ms {
                        Some(at) => format!("revoked {}", format_ms(at)),
                        None => "active".to_string(),
                    };
                    println!(
                        "{:<16}  {:<12}  {:<6}  {:<24}  {:<24}  {:<10}  {}",
                        key.id,
                        key.tenant,
                        key.kind.as_str(),
                        key.name,
                        format_ms(key.created_at_ms),
                        status,
                        key.scopes
                    );
                }
                Ok(())
            }
            KeysCommand::Revoke { common, tenant, id } => {
                let config = common.load()?;
                let store = wiring.store(&config).await?;
                if keys::revoke(store.as_ref(), &crate::clock::SystemClock, &tenant, &id, "cli").await? {
                    println!("revoked key {id} of tenant {tenant}");
                    Ok(())
                } else {
                    Err(format!("tenant {tenant} has no active key {id}").into())
                }
            }
        }
    }
}
