//! The `[auth]` section: gateway-signed app tokens, identity providers and local development
//! mode (tenant API keys live in the database, not here).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError};

/// Who may call (§2.1): gateway-signed app tokens, identity providers' tokens, and the
/// loopback mode for local development. Tenant API keys live in the database.
#[derive(Clone, Serialize, Deserialize)]
pub struct AuthConfig {
    /// `auto` (anonymous loopback callers act as the local person only while no token
    /// verifier is configured, the store holds no API key and `listen` is a loopback address;
    /// see `auth::Auth::start`), `on` or `off`.
    pub local_dev: String,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// How often revoked keys are looked up, so open streams of a revoked key end (§2.1).
    pub revocation_check_ms: u64,
    /// How often the counts of refused credentials are written to the audit trail, per tenant.
    pub failure_report_secs: u64,
    pub app_tokens: AppTokensConfig,
    /// Identity providers whose tokens are accepted as persons.
    #[serde(default)]
    pub identity_providers: Vec<IdentityProviderConfig>,
    /// The bearer token Prometheus presents to scrape `GET /metrics` from beyond loopback (the
    /// metrics name agents); empty: only loopback callers may read them.
    #[serde(default)]
    pub metrics_token: String,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("local_dev", &self.local_dev)
            .field("leeway_secs", &self.leeway_secs)
            .field("revocation_check_ms", &self.revocation_check_ms)
            .field("failure_report_secs", &self.failure_report_secs)
            .field("app_tokens", &self.app_tokens)
            .field("identity_providers", &self.identity_providers)
            .field("metrics_token", &if self.metrics_token.is_empty() { "" } else { "***" })
            .finish()
    }
}

/// Gateway-signed app tokens: minted by `token mint` and by the token exchange.
#[derive(Clone, Serialize, Deserialize)]
pub struct AppTokensConfig {
    /// `HS256` (with `secret`), `EdDSA` or `RS256` (with key files).
    pub algorithm: String,
    /// The HS256 secret, at least 32 bytes; empty: none. Give it through the environment.
    pub secret: String,
    /// PEM private key (EdDSA/RS256) used to sign; empty: this instance verifies only.
    pub private_key_file: String,
    /// PEM public key (EdDSA/RS256) used to verify.
    pub public_key_file: String,
    pub issuer: String,
    pub audience: String,
    /// Lifetime of a token issued by the token exchange (capped by the subject token's).
    pub exchange_ttl_secs: u64,
    /// Default lifetime of a token from `token mint`.
    pub mint_ttl_secs: u64,
}

impl std::fmt::Debug for AppTokensConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppTokensConfig")
            .field("algorithm", &self.algorithm)
            .field("secret", &if self.secret.is_empty() { "" } else { "***" })
            .field("private_key_file", &self.private_key_file)
            .field("public_key_file", &self.public_key_file)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl AppTokensConfig {
    /// True when app tokens can be verified (a secret or a public key is configured).
    pub fn is_configured(&self) -> bool {
        match self.algorithm.as_str() {
            "HS256" => !self.secret.is_empty(),
            _ => !self.public_key_file.is_empty(),
        }
    }
}

/// An identity provider: its tokens are verified against its public keys (a PEM file, a JWKS
/// file, or a JWKS URL fetched at start and refreshed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdentityProviderConfig {
    pub name: String,
    /// The `iss` its tokens carry; tokens are routed to a provider by it.
    pub issuer: String,
    /// The `aud` its tokens must carry (one of them).
    pub audience: Vec<String>,
    #[serde(default)]
    pub jwks_url: String,
    #[serde(default)]
    pub jwks_file: String,
    /// A PEM public key, with `algorithms` naming exactly its algorithm.
    #[serde(default)]
    pub public_key_file: String,
    /// Algorithms accepted (each key is pinned to one); empty: RS256, ES256 and EdDSA.
    #[serde(default)]
    pub algorithms: Vec<String>,
    #[serde(default = "default_refresh_secs")]
    pub refresh_secs: u64,
    /// The claim naming the person's tenant; it must equal `?tenant=`.
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    #[serde(default = "default_clearance_claim")]
    pub clearance_claim: String,
    /// Gateway scopes of a person whose token names none (see docs/config.md); empty: none.
    #[serde(default = "default_person_scopes")]
    pub default_scopes: Vec<String>,
    /// The tenants whose people this provider speaks for; required once more than one tenant
    /// is configured. A token naming another tenant is refused.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Lets `jwks_url` be a plain `http://` URL. Unsafe: anyone on the path can hand the
    /// gateway a signing key of their own.
    #[serde(default)]
    pub allow_insecure_http: bool,
}

fn default_refresh_secs() -> u64 {
    300
}

fn default_tenant_claim() -> String {
    "tenant".into()
}

fn default_roles_claim() -> String {
    "roles".into()
}

fn default_clearance_claim() -> String {
    "clearance".into()
}

pub fn default_person_scopes() -> Vec<String> {
    vec!["threads:read".into(), "threads:content".into(), "agent:*".into()]
}

impl AuthConfig {
    /// True when any token verifier is configured.
    pub fn verifies_tokens(&self) -> bool {
        self.app_tokens.is_configured() || !self.identity_providers.is_empty()
    }
}

impl Config {
    /// The `[auth]` section checked against the rest of the configuration (its tenants).
    pub(super) fn validate_auth(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let auth = &self.auth;
        if !matches!(auth.local_dev.as_str(), "auto" | "on" | "off") {
            return invalid(format!("auth.local_dev must be auto, on or off, not '{}'", auth.local_dev));
        }
        if auth.revocation_check_ms == 0 || auth.failure_report_secs == 0 {
            return invalid("auth.revocation_check_ms and auth.failure_report_secs must be at least 1".into());
        }
        // A secret of only whitespace is no secret (and 40 spaces pass a length check): most
        // likely a template's placeholder or a variable that expanded to nothing but spaces.
        for (setting, secret) in
            [("auth.app_tokens.secret", &auth.app_tokens.secret), ("auth.metrics_token", &auth.metrics_token)]
        {
            if !secret.is_empty() && secret.trim().is_empty() {
                return invalid(format!("{setting} is blank (only whitespace): give a real secret, or leave it empty"));
            }
        }
        let app = &auth.app_tokens;
        match app.algorithm.as_str() {
            "HS256" => {
                if !app.secret.is_empty() && app.secret.len() < 32 {
                    return invalid("auth.app_tokens.secret must be at least 32 bytes".into());
                }
            }
            "EdDSA" | "RS256" => {
                if !app.secret.is_empty() {
                    return invalid(format!("auth.app_tokens.secret is for HS256; {} takes key files", app.algorithm));
                }
            }
            other => return invalid(format!("auth.app_tokens.algorithm must be HS256, EdDSA or RS256, not '{other}'")),
        }
        if app.issuer.is_empty() || app.audience.is_empty() || app.exchange_ttl_secs == 0 || app.mint_ttl_secs == 0 {
            return invalid("auth.app_tokens: issuer, audience and the ttls must be set".into());
        }
        let mut names = HashSet::new();
        let mut issuers = HashSet::from([app.issuer.as_str()]);
        for provider in &auth.identity_providers {
            let name = &provider.name;
            if !crate::ids::is_valid_name(name) || !names.insert(name) {
                return invalid(format!("identity provider '{name}' is duplicated or not a valid name"));
            }
            if provider.issuer.is_empty() || !issuers.insert(provider.issuer.as_str()) {
                return invalid(format!(
                    "identity provider '{name}': issuer must be set and differ from every other issuer (app tokens' too)"
                ));
            }
            if provider.audience.is_empty() {
                return invalid(format!("identity provider '{name}': audience must name at least one audience"));
            }
            let sources = [&provider.jwks_url, &provider.jwks_file, &provider.public_key_file];
            if sources.iter().filter(|s| !s.is_empty()).count() != 1 {
                return invalid(format!(
                    "identity provider '{name}': give exactly one of jwks_url, jwks_file, public_key_file"
                ));
            }
            let url = provider.jwks_url.as_str();
            if !url.is_empty() && !url.starts_with("https://") {
                if !url.starts_with("http://") {
                    return invalid(format!("identity provider '{name}': jwks_url must be an https:// URL"));
                }
                if !provider.allow_insecure_http {
                    return invalid(format!(
                        "identity provider '{name}': jwks_url must be an https:// URL; a plain http:// one lets anyone \
                         on the path hand the gateway a signing key (set allow_insecure_http = true to accept that \
                         risk, see docs/config.md)"
                    ));
                }
            }
            for algorithm in &provider.algorithms {
                if !matches!(algorithm.as_str(), "RS256" | "RS384" | "RS512" | "PS256" | "ES256" | "ES384" | "EdDSA") {
                    return invalid(format!(
                        "identity provider '{name}': algorithm '{algorithm}' is not accepted (asymmetric ones only)"
                    ));
                }
            }
            if !provider.public_key_file.is_empty() && provider.algorithms.len() != 1 {
                return invalid(format!(
                    "identity provider '{name}': a public_key_file needs algorithms = [its one algorithm]"
                ));
            }
            if provider.refresh_secs == 0 {
                return invalid(format!("identity provider '{name}': refresh_secs must be at least 1"));
            }
            if provider.tenants.is_empty() && self.tenants.len() > 1 {
                return invalid(format!(
                    "identity provider '{name}': with more than one tenant configured, name the tenants it speaks \
                     for (tenants = [\"…\"]), so that it cannot assert another tenant's people"
                ));
            }
            if let Some(unknown) = provider.tenants.iter().find(|t| self.tenant(t).is_none()) {
                return invalid(format!("identity provider '{name}' names unknown tenant '{unknown}'"));
            }
        }
        Ok(())
    }
}
