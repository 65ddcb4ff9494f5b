//! The auth layer's errors: a refused credential ([`AuthError`], each with its reason for the
//! counts and the audit), a setup that cannot start ([`AuthSetupError`]) and a token that
//! cannot be minted ([`MintError`]), and a key that cannot be loaded ([`KeyError`]).

use crate::store::StoreError;

/// Why a caller was not accepted: 401 `unauthenticated`. The message never repeats the
/// credential; [`AuthError::reason`] names the failure in the audit trail's counts.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("this gateway has no authentication configured and accepts requests only from loopback")]
    NotLoopback,
    #[error("an Authorization header with a bearer credential is required")]
    Missing,
    #[error("the Authorization header must be `Bearer <credential>`")]
    Malformed,
    #[error("{0}")]
    InvalidToken(&'static str),
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the API key is not valid")]
    UnknownKey,
    #[error("the API key has been revoked")]
    Revoked,
    #[error("an app key is accepted only by POST /v1/auth/token")]
    AppKeyAsBearer,
    #[error("the key is not an app key")]
    NotAnAppKey,
    #[error("the token's identity provider does not speak for the tenant the token names")]
    TenantNotBound,
    #[error("the credential could not be checked")]
    Store(#[source] StoreError),
}

impl AuthError {
    /// A short name for counting.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::NotLoopback => "not_loopback",
            AuthError::Missing => "missing",
            AuthError::Malformed => "malformed",
            AuthError::InvalidToken(_) => "invalid_token",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::UnknownKey => "unknown_key",
            AuthError::Revoked => "revoked",
            AuthError::AppKeyAsBearer => "app_key_as_bearer",
            AuthError::NotAnAppKey => "not_an_app_key",
            AuthError::TenantNotBound => "tenant_not_bound",
            AuthError::Store(_) => "store",
        }
    }
}

/// Why authentication could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("auth.app_tokens: {0}")]
    AppTokens(#[source] KeyError),
    #[error("identity provider '{name}': {source}")]
    Provider { name: String, source: KeyError },
    #[error("looking for API keys (auth.local_dev = \"auto\"): {0}")]
    Store(#[source] StoreError),
}

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("this gateway has no signing key for app tokens (auth.app_tokens)")]
    NoSigningKey,
    #[error("signing failed: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
}

/// Why a key could not be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{what}: {source}")]
    Parse { what: String, source: jsonwebtoken::errors::Error },
    #[error("{0}")]
    Invalid(String),
}
