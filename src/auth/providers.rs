//! Identity providers: their tokens are persons. Keys come from a PEM file, a JWKS file or a
//! JWKS URL; JWKS sources are read at start and again every `refresh_secs`, and a read that
//! fails keeps the last good keys (an identity provider's outage never locks everyone out). A
//! JWKS URL that redirects is an error: redirects are not followed.

use std::str::FromStr;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use super::error::{AuthError, KeyError};
use super::jwt::{self, Rules, VerifyKey};
use crate::config::IdentityProviderConfig;

const DEFAULT_ALGORITHMS: [Algorithm; 3] = [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

pub struct Provider {
    pub config: IdentityProviderConfig,
    allowed: Vec<Algorithm>,
    keys: RwLock<Arc<Vec<VerifyKey>>>,
    http: reqwest::Client,
}

impl Provider {
    /// Loads the provider's keys. A JWKS URL that does not answer at start is not fatal: the
    /// provider starts with no keys (its tokens fail) and the refresh keeps trying.
    pub async fn start(
        config: IdentityProviderConfig,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Arc<Provider>, KeyError> {
        let allowed: Vec<Algorithm> = if config.algorithms.is_empty() {
            DEFAULT_ALGORITHMS.to_vec()
        } else {
            config
                .algorithms
                .iter()
                .map(|a| Algorithm::from_str(a).map_err(|_| KeyError::Invalid(format!("unknown algorithm {a}"))))
                .collect::<Result<_, _>>()?
        };
        // A redirect is never followed: the keys come from the configured URL or not at all.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .tls_backend_preconfigured(rustls::ClientConfig::clone(tls))
            .build()
            .map_err(|e| KeyError::Invalid(format!("HTTP client: {e}")))?;
        let provider = Arc::new(Provider { config, allowed, keys: RwLock::new(Arc::new(Vec::new())), http });
        if !provider.config.public_key_file.is_empty() {
            let algorithm = provider.allowed[0];
            let key = jwt::decoding_key_from_pem(&provider.config.public_key_file, algorithm)?;
            provider.set_keys(vec![VerifyKey { kid: None, algorithm, key }]);
            return Ok(provider);
        }
        match provider.fetch_jwks().await {
            Ok(keys) => provider.set_keys(keys),
            Err(error) if !provider.config.jwks_url.is_empty() => tracing::warn!(
                provider = %provider.config.name,
                %error,
                "the identity provider's JWKS could not be fetched at start; its tokens fail until a refresh succeeds"
            ),
            Err(error) => return Err(error),
        }
        spawn_refresh(Arc::downgrade(&provider), Duration::from_secs(provider.config.refresh_secs));
        Ok(provider)
    }

    fn set_keys(&self, keys: Vec<VerifyKey>) {
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
    }

    fn current_keys(&self) -> Arc<Vec<VerifyKey>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the JWKS from its file or URL.
    async fn fetch_jwks(&self) -> Result<Vec<VerifyKey>, KeyError> {
        let document = if !self.config.jwks_file.is_empty() {
            tokio::fs::read_to_string(&self.config.jwks_file)
                .await
                .map_err(|source| KeyError::Read { path: self.config.jwks_file.clone(), source })?
        } else {
            let response = self
                .http
                .get(&self.config.jwks_url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(|e| KeyError::Invalid(format!("fetching the JWKS: {}", unreachable_reason(e))))?;
            if !response.status().is_success() {
                return Err(KeyError::Invalid(format!(
                    "fetching the JWKS: the URL answered {} (redirects are not followed)",
                    response.status()
                )));
            }
            response.text().await.map_err(|e| KeyError::Invalid(format!("reading the JWKS: {e}")))?
        };
        let keys = jwt::keys_from_jwks(&document, &self.allowed)?;
        if keys.is_empty() {
            return Err(KeyError::Invalid("the JWKS holds no key with an accepted algorithm".into()));
        }
        Ok(keys)
    }

    /// Verifies a token of this provider, its lifetime judged at `now_secs`, and returns its
    /// claims.
    pub fn verify(&self, token: &str, leeway_secs: u64, now_secs: u64) -> Result<Map<String, Value>, AuthError> {
        let keys = self.current_keys();
        let rules = Rules { issuer: &self.config.issuer, audience: &self.config.audience, leeway_secs, now_secs };
        jwt::verify(token, &keys, &rules)
    }
}

/// Why a JWKS request failed: a TLS failure in words naming the certificate problem and host,
/// anything else as the client says it, with the URL (the operator's own) its secrets masked.
fn unreachable_reason(error: reqwest::Error) -> String {
    let host = error.url().and_then(|url| url.host_str()).unwrap_or("?").to_string();
    if let Some(tls) = crate::tls::describe_failure(&error, &host) {
        return tls;
    }
    let url = error.url().map(|url| crate::redact::redact_url(url.as_str()));
    let why = error.without_url().to_string();
    match url {
        Some(url) => format!("{why} ({url})"),
        None => why,
    }
}

/// Re-reads the JWKS every `every` while the provider lives; a failure keeps the last keys.
fn spawn_refresh(provider: Weak<Provider>, every: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(provider) = provider.upgrade() else { return };
            match provider.fetch_jwks().await {
                Ok(keys) => provider.set_keys(keys),
                Err(error) => tracing::warn!(
                    provider = %provider.config.name,
                    %error,
                    "refreshing the identity provider's JWKS failed; keeping the last good keys"
                ),
            }
        }
    });
}
