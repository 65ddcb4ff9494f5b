//! Who is calling (SPEC §2.1, §8). A request's [`Caller`] (the principal, defined in
//! [`crate::caller`]) is established from its `Authorization` header before the body is read: a
//! gateway-signed app token or an identity provider's token (a person), or a tenant API key (no
//! person). [`Auth`] holds the verifiers, counts refused credentials per tenant for the audit
//! trail, and watches for revoked keys so open streams of a revoked key end.
//!
//! In local development mode anonymous loopback callers act as the local person `local`, who
//! may do everything: safe on a developer's machine, never on the internet. Under
//! `auth.local_dev = "auto"` it is on only while nothing says the gateway is meant to be
//! protected: no token verifier is configured, the store holds no API key and `listen` is a
//! loopback address ([`Auth::start`]); a key created while serving turns it off.
//!
//! The HTTP extractors that turn this into permissions live in `http::permissions`.

mod access;
mod error;
pub mod jwt;
pub mod keys;
pub mod providers;
mod state;
pub mod time;
mod watchers;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::Config;
use crate::store::{AuditEntry, KeyKind, Store, StoreError};
use jwt::{AppClaims, AppTokens};
use providers::Provider;
use watchers::{holds_api_keys, spawn_failure_reporter, spawn_revocation_watcher};

pub use access::{AccessEnd, ThreadSight};
pub use error::{AuthError, AuthSetupError, MintError};
pub use state::Auth;
use state::{Failures, Inner};

pub use crate::caller::{Caller, KeyCaller, Person, Scopes, LOCAL_PERSON};

/// A caller and the tenant its credential belongs to (`None`: the local person, any tenant).
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub caller: Caller,
    pub tenant: Option<String>,
}

/// A registered app's key, presented to the token exchange.
#[derive(Debug, Clone)]
pub struct AppKey {
    pub id: String,
    pub name: String,
    pub tenant: String,
    pub scopes: Scopes,
}

/// A person verified from an identity provider's token (for the token exchange).
#[derive(Debug, Clone)]
pub struct IdentityToken {
    pub person: Person,
    pub tenant: String,
    pub provider: String,
    pub expires_at: u64,
}

/// What a minted app token says.
pub struct MintRequest<'a> {
    pub tenant: &'a str,
    pub person: &'a Person,
    pub ttl_secs: u64,
    /// The token never outlives this (the exchanged subject token's `exp`).
    pub not_after: Option<u64>,
}

impl Auth {
    /// Loads the keys, fetches the identity providers' JWKS, and starts the revocation watcher
    /// and the failure reporter.
    /// JWKS URLs are fetched over `tls` when they are `https://`.
    pub async fn start(
        config: &Config,
        store: Arc<dyn Store>,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Result<Auth, AuthSetupError> {
        Auth::start_with_clock(config, store, tls, crate::clock::system()).await
    }

    /// [`Auth::start`] reading the time from `clock`.
    pub async fn start_with_clock(
        config: &Config,
        store: Arc<dyn Store>,
        tls: &Arc<rustls::ClientConfig>,
        clock: Arc<dyn Clock>,
    ) -> Result<Auth, AuthSetupError> {
        let app = AppTokens::from_config(&config.auth.app_tokens).map_err(AuthSetupError::AppTokens)?;
        let mut providers = Vec::new();
        for provider in &config.auth.identity_providers {
            let started = Provider::start(provider.clone(), tls)
                .await
                .map_err(|source| AuthSetupError::Provider { name: provider.name.clone(), source })?;
            providers.push(started);
        }
        let local_dev = match config.auth.local_dev.as_str() {
            "on" => true,
            "off" => false,
            _ => {
                let loopback = config.listen_addr().is_ok_and(|address| address.ip().is_loopback());
                // Asked last: a configured verifier or a public address settles it without a query.
                !config.auth.verifies_tokens() && loopback && !holds_api_keys(store.as_ref()).await?
            }
        };
        let (revoked, _) = watch::channel(Arc::new(HashSet::new()));
        let (deleted_threads, _) = watch::channel(Arc::new(HashMap::new()));
        let auth = Auth {
            inner: Arc::new(Inner {
                local_dev: AtomicBool::new(local_dev),
                config: config.auth.clone(),
                tenants: config.tenants.iter().map(|t| t.name.clone()).collect(),
                store,
                app,
                providers,
                failures: Mutex::new(Failures { pending_since_ms: clock.now_ms(), ..Failures::default() }),
                revoked,
                deleted_threads,
                clock,
            }),
        };
        spawn_revocation_watcher(Arc::downgrade(&auth.inner));
        spawn_failure_reporter(Arc::downgrade(&auth.inner));
        Ok(auth)
    }

    /// True when anonymous loopback callers act as the local person (development only).
    pub fn local_dev(&self) -> bool {
        self.inner.local_dev.load(Ordering::Acquire)
    }

    /// Authenticates a request from its `Authorization` header (absent: `None`) and its peer.
    pub async fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        peer: Option<SocketAddr>,
    ) -> Result<Authenticated, AuthError> {
        let Some(header) = authorization else {
            let local_dev = self.local_dev();
            return match peer {
                Some(address) if local_dev && address.ip().is_loopback() => {
                    Ok(Authenticated { caller: Caller::local(), tenant: None })
                }
                _ if local_dev => Err(AuthError::NotLoopback),
                _ => Err(AuthError::Missing),
            };
        };
        let credential = bearer(header)?;
        if credential.starts_with(keys::KEY_PREFIX) {
            let key = self.find_key(credential).await?;
            if key.kind == KeyKind::App {
                return Err(AuthError::AppKeyAsBearer);
            }
            let caller = Caller::TenantKey(KeyCaller {
                id: key.id.clone(),
                name: key.name.clone(),
                scopes: Scopes::parse(&key.scopes),
            });
            return Ok(Authenticated { caller, tenant: Some(key.tenant) });
        }
        self.verify_token(credential).await
    }

    /// Authenticates the app key of a token exchange.
    pub async fn authenticate_app(&self, authorization: Option<&[u8]>) -> Result<AppKey, AuthError> {
        let credential = bearer(authorization.ok_or(AuthError::Missing)?)?;
        if !credential.starts_with(keys::KEY_PREFIX) {
            return Err(AuthError::NotAnAppKey);
        }
        let key = self.find_key(credential).await?;
        if key.kind != KeyKind::App {
            return Err(AuthError::NotAnAppKey);
        }
        Ok(AppKey { id: key.id, name: key.name, tenant: key.tenant, scopes: Scopes::parse(&key.scopes) })
    }

    async fn find_key(&self, credential: &str) -> Result<crate::store::ApiKeyRow, AuthError> {
        let presented = keys::parse(credential).ok_or(AuthError::UnknownKey)?;
        let row = self.inner.store.key_for_credential(presented.id).await.map_err(AuthError::Store)?;
        let row = row.ok_or(AuthError::UnknownKey)?;
        if !keys::same_hash(&row.secret_sha256, &keys::hash_secret(presented.secret)) {
            return Err(AuthError::UnknownKey);
        }
        if row.revoked_at_ms.is_some() {
            return Err(AuthError::Revoked);
        }
        Ok(row)
    }

    /// A JWT: the gateway's own app token, or a configured identity provider's, chosen by `iss`.
    async fn verify_token(&self, token: &str) -> Result<Authenticated, AuthError> {
        let inner = &self.inner;
        let leeway = inner.config.leeway_secs;
        let issuer = jwt::peek_issuer(token).ok_or(AuthError::InvalidToken("the token is malformed or has no iss"))?;
        if inner.app.verifies() && issuer == inner.app.issuer {
            let claims = inner.app.verify(token, leeway, inner.clock.now_secs())?;
            let scopes = own_token_scopes(&claims);
            let (person, tenant) = person_from(&claims, "tenant", "roles", "clearance", scopes, true)?;
            if let Some(app_key) = &person.app_key {
                // An exchanged token lives only as long as the app key that exchanged it.
                let key = inner.store.find_api_key(&tenant, app_key).await.map_err(AuthError::Store)?;
                if !key.is_some_and(|k| k.revoked_at_ms.is_none() && k.kind == KeyKind::App) {
                    return Err(AuthError::Revoked);
                }
            }
            return Ok(Authenticated { caller: Caller::Person(person), tenant: Some(tenant) });
        }
        let identity = self.verify_identity_token_as(token, &issuer)?;
        Ok(Authenticated { caller: Caller::Person(identity.person), tenant: Some(identity.tenant) })
    }

    /// Verifies an identity provider's token (never an app token): the subject of a token
    /// exchange.
    pub fn verify_identity_token(&self, token: &str) -> Result<IdentityToken, AuthError> {
        let issuer = jwt::peek_issuer(token).ok_or(AuthError::InvalidToken("the token is malformed or has no iss"))?;
        self.verify_identity_token_as(token, &issuer)
    }

    fn verify_identity_token_as(&self, token: &str, issuer: &str) -> Result<IdentityToken, AuthError> {
        let provider = self
            .inner
            .providers
            .iter()
            .find(|p| p.config.issuer == issuer)
            .ok_or(AuthError::InvalidToken("the token's issuer is not accepted"))?;
        let claims = provider.verify(token, self.inner.config.leeway_secs, self.inner.clock.now_secs())?;
        let config = &provider.config;
        let scopes = identity_token_scopes(&claims, &config.default_scopes);
        let (person, tenant) =
            person_from(&claims, &config.tenant_claim, &config.roles_claim, &config.clearance_claim, scopes, false)?;
        if !config.tenants.is_empty() && !config.tenants.contains(&tenant) {
            // One tenant's identity provider never asserts another tenant's people.
            return Err(AuthError::TenantNotBound);
        }
        let expires_at = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        Ok(IdentityToken { person, tenant, provider: config.name.clone(), expires_at })
    }

    /// The clock tokens are minted by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Signs an app token acting as `person` (`token mint`, the token exchange).
    pub fn mint(&self, request: &MintRequest<'_>) -> Result<(String, u64), MintError> {
        let now = self.inner.clock.now_secs();
        let mut expires_at = now + request.ttl_secs;
        if let Some(limit) = request.not_after {
            expires_at = expires_at.min(limit);
        }
        let person = request.person;
        let claims = AppClaims {
            tenant: request.tenant,
            sub: &person.id,
            roles: &person.roles,
            scopes: &person.scopes,
            clearance: &person.clearance,
            via: person.via.as_deref(),
            app_key: person.app_key.as_deref(),
            expires_at,
        };
        let token = self.inner.app.sign(&claims, now).ok_or(MintError::NoSigningKey)??;
        Ok((token, expires_at))
    }

    pub fn exchange_ttl_secs(&self) -> u64 {
        self.inner.app.exchange_ttl_secs
    }

    pub fn mint_ttl_secs(&self) -> u64 {
        self.inner.app.mint_ttl_secs
    }

    /// Counts a refused credential against the tenant the request named (unknown tenants are
    /// not counted: their names are the caller's to choose).
    pub fn record_failure(&self, tenant: &str, reason: &'static str) {
        if !self.inner.tenants.contains(tenant) {
            return;
        }
        let mut failures = self.inner.failures.lock().unwrap_or_else(|p| p.into_inner());
        *failures.pending.entry(tenant.to_string()).or_default().entry(reason).or_default() += 1;
        *failures.total.entry(tenant.to_string()).or_default() += 1;
    }

    /// Refused credentials counted for the tenant since start.
    pub fn failure_count(&self, tenant: &str) -> u64 {
        self.inner.failures.lock().unwrap_or_else(|p| p.into_inner()).total.get(tenant).copied().unwrap_or(0)
    }

    /// Writes the counts gathered since the last report as `auth.failures` audit rows.
    pub async fn report_failures(&self) -> Result<(), StoreError> {
        self.inner.report_failures().await
    }

    /// An audit row written by a request.
    pub async fn audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        self.inner.store.append_audit(&entry).await
    }
}

/// The credential of `Authorization: Bearer <credential>`.
fn bearer(header: &[u8]) -> Result<&str, AuthError> {
    let text = std::str::from_utf8(header).map_err(|_| AuthError::Malformed)?;
    let (scheme, credential) = text.trim().split_once(' ').ok_or(AuthError::Malformed)?;
    let credential = credential.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || credential.is_empty() || credential.contains(char::is_whitespace) {
        return Err(AuthError::Malformed);
    }
    Ok(credential)
}

/// The person and tenant a verified token states, with the `scopes` its issuer's rules give it.
/// `via` and `akid` are honoured only in the gateway's own tokens.
fn person_from(
    claims: &Map<String, Value>,
    tenant_claim: &str,
    roles_claim: &str,
    clearance_claim: &str,
    scopes: Scopes,
    own_token: bool,
) -> Result<(Person, String), AuthError> {
    let sub = claims.get("sub").and_then(Value::as_str).unwrap_or_default();
    let tenant = claims
        .get(tenant_claim)
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(AuthError::InvalidToken("the token names no tenant"))?;
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_string);
    let person = Person {
        id: sub.to_string(),
        roles: jwt::string_list(claims, roles_claim),
        scopes,
        clearance: jwt::string_list(claims, clearance_claim),
        via: if own_token { text("via") } else { None },
        app_key: if own_token { text("akid") } else { None },
        expires_at: claims.get("exp").and_then(Value::as_u64),
    };
    Ok((person, tenant.to_string()))
}

/// The scopes of one of the gateway's own tokens: exactly the ones it states, an empty list
/// being none (the gateway always signs its list). Only a token with no scope claim at all that
/// no app exchanged (one signed by hand with the app token key) gets everything; an exchanged
/// token (`akid`, `via`) without one gets nothing.
fn own_token_scopes(claims: &Map<String, Value>) -> Scopes {
    let states_scopes = ["scope", "scp", "scopes"].iter().any(|name| claims.contains_key(*name));
    let exchanged = claims.contains_key("akid") || claims.contains_key("via");
    if states_scopes {
        Scopes::gateway(jwt::token_scopes(claims).iter().map(String::as_str))
    } else if exchanged {
        Scopes::default()
    } else {
        Scopes::all()
    }
}

/// The scopes of an identity provider's token: the gateway's among those it states, or the
/// provider's `default_scopes` when it states none of them (an empty list: none).
fn identity_token_scopes(claims: &Map<String, Value>, default_scopes: &[String]) -> Scopes {
    let stated = Scopes::gateway(jwt::token_scopes(claims).iter().map(String::as_str));
    if stated.is_empty() {
        Scopes::gateway(default_scopes.iter().map(String::as_str))
    } else {
        stated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bearer_credentials_are_the_only_accepted_form() {
        assert_eq!(bearer(b"Bearer abc").expect("ok"), "abc");
        assert_eq!(bearer(b"bearer  abc ").expect("ok"), "abc");
        for bad in [&b"Basic abc"[..], b"Bearer", b"Bearer ", b"Bearer a b", b"abc", b"\xff\xfe"] {
            assert!(bearer(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scopes_name_agents_and_exchanged_tokens_hold_only_what_both_sides_hold() {
        let key = Scopes::for_key(&["demo".into()]);
        assert!(key.may_read_threads() && key.may_read_content());
        assert!(key.may_start("demo") && !key.may_start("other"));
        let person = Scopes::all();
        assert!(person.may_start("anything"));
        let exchanged = person.shared_with(&key);
        assert_eq!(exchanged.to_string(), "threads:read threads:content agent:demo");
        let narrow = Scopes::parse("threads:read agent:other openid");
        assert_eq!(narrow.to_string(), "threads:read agent:other");
        assert_eq!(narrow.shared_with(&key).to_string(), "threads:read");
        assert!(!narrow.shared_with(&key).may_start_any(["demo", "other"]));
        // Only an agent: neither reading nor the app's agents come with it.
        assert!(Scopes::parse("agent:payroll").shared_with(&key).is_empty());
        let everything = Scopes::for_key(&["*".into()]);
        assert_eq!(Scopes::parse("agent:payroll").shared_with(&everything).to_string(), "agent:payroll");
        assert!(everything.shared_with(&Scopes::all()).may_start("anything"));
        assert!(Scopes::parse("threads:read threads:content agent:x").may_start_any(["x"]));
    }

    #[test]
    fn an_explicit_empty_scope_is_none_and_only_an_unexchanged_token_without_one_is_everything() {
        let claims = |body: Value| body.as_object().cloned().expect("object");
        assert!(own_token_scopes(&claims(json!({ "scope": "" }))).is_empty());
        assert!(own_token_scopes(&claims(json!({ "scope": "openid" }))).is_empty());
        assert!(own_token_scopes(&claims(json!({ "akid": "k", "via": "app:x" }))).is_empty());
        assert_eq!(own_token_scopes(&claims(json!({}))), Scopes::all());
        assert!(identity_token_scopes(&claims(json!({ "scope": "openid" })), &[]).is_empty());
        let defaults = vec!["threads:read".to_string()];
        assert_eq!(identity_token_scopes(&claims(json!({})), &defaults).to_string(), "threads:read");
    }
}
