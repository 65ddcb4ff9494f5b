//! `agui-gateway token mint`: an app token acting as a person, signed with
//! `auth.app_tokens`' key, for development and scripts (a person's app gets its tokens from the
//! token exchange instead).

use super::{known_tenant, CommandResult, Common};
use crate::auth::jwt::{AppClaims, AppTokens};
use crate::auth::Scopes;

#[derive(clap::Subcommand)]
pub enum TokenCommand {
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

impl TokenCommand {
    pub fn run(self) -> CommandResult {
        let TokenCommand::Mint { common, tenant, sub, roles, scopes, clearance, ttl } = self;
        let config = common.load()?;
        known_tenant(&config, &tenant)?;
        let app = AppTokens::from_config(&config.auth.app_tokens)?;
        let scopes = if scopes.is_empty() { Scopes::all() } else { Scopes::gateway(scopes.iter().map(String::as_str)) };
        // Whole seconds of the machine's clock, which serving instances verify `exp` by.
        let now = crate::clock::Clock::now_secs(&crate::clock::SystemClock);
        let claims = AppClaims {
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
            None => Err(
                "no signing key: set auth.app_tokens.secret (AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET) or private_key_file"
                    .into(),
            ),
        }
    }
}
