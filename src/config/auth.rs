//! The `[auth]` section: gateway-signed app tokens, identity providers and local development
//! mode (tenant API keys live in the database, not here).

use serde::{Deserialize, Serialize};

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
