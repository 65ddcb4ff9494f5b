//! The live thread list's grants: what `POST {base}/threads/subscribe` answers as `joinToken`,
//! and what its WebSocket presents instead of the `Authorization` header a browser's socket
//! cannot send. A grant is kept in the database ([`crate::store::LiveGrantStore`]), so the
//! socket opens on whichever instance a balancer sends it to, affinity or not.
//!
//! Only the token's SHA-256 is stored, with the tenant and the caller as the gateway rebuilds it
//! on the other side: its scopes, its credential's expiry and, for a token an app exchanged,
//! the app key, so that the open socket still ends when that access does
//! ([`crate::auth::Auth::access_ends`]). A grant ends a day after it was minted, or when the
//! caller's credential does if that is sooner, both on the gateway's clock; a key revoked since
//! is refused when the socket opens, on every instance, because the key's row is read then.

use std::time::Duration;

use ring::rand::{SecureRandom, SystemRandom};

use crate::auth::{AuthError, Caller};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::store::{LiveGrantRow, StoreError};

/// How long a grant opens sockets; each socket still ends when the caller's access does.
const GRANT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A caller's right to open the live list's sockets of one tenant.
#[derive(Clone)]
pub(super) struct Grant {
    pub caller: Caller,
    pub tenant: String,
}

/// Mints a grant of `caller` on `tenant` and answers its token (64 hex digits), which is
/// never stored.
pub(super) async fn mint(state: &AppState, caller: &Caller, tenant: &str) -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).map_err(|_| ApiError::Internal("no random source".into()))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let now_ms = state.auth.clock().now_ms();
    let ttl_ms = i64::try_from(GRANT_TTL.as_millis()).unwrap_or(i64::MAX);
    let mut expires_at_ms = now_ms.saturating_add(ttl_ms);
    if let Some(exp) = caller.expires_at() {
        // Past this the credential is refused (its leeway included): so is the grant.
        let ends_ms = exp.saturating_add(state.config.auth.leeway_secs).saturating_mul(1000);
        expires_at_ms = expires_at_ms.min(i64::try_from(ends_ms).unwrap_or(i64::MAX));
    }
    let caller_json = serde_json::to_string(caller).map_err(|error| ApiError::Internal(Box::new(error)))?;
    let row = LiveGrantRow {
        token_sha256: hash(&token),
        tenant: tenant.to_string(),
        caller_label: caller.label(),
        caller: caller_json,
        created_at_ms: now_ms,
        expires_at_ms,
    };
    state.engine.store().insert_live_grant(&row).await?;
    Ok(token)
}

/// The grant `token` names on `tenant`: refused `401` when the token is malformed, unknown,
/// ended, of another tenant, or its caller's key has been revoked since.
pub(super) async fn find(state: &AppState, token: &str, tenant: &str) -> Result<Grant, ApiError> {
    let unknown = || ApiError::Unauthenticated(AuthError::InvalidToken("the join token is unknown or has ended"));
    // Not one the gateway minted: no need to ask the database.
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(unknown());
    }
    let store = state.engine.store();
    let now_ms = state.auth.clock().now_ms();
    let row = store.live_grant(&hash(token), now_ms).await?.ok_or_else(unknown)?;
    if row.tenant != tenant {
        return Err(unknown());
    }
    let caller: Caller = serde_json::from_str(&row.caller)
        .map_err(|error| StoreError::Corrupt(format!("a live list grant's caller: {error}")))?;
    for key in caller.revocable_keys() {
        let standing = store.find_api_key(&row.tenant, &key).await?.is_some_and(|k| k.revoked_at_ms.is_none());
        if !standing {
            return Err(ApiError::Unauthenticated(AuthError::Revoked));
        }
    }
    Ok(Grant { caller, tenant: row.tenant })
}

/// Hex SHA-256 of a join token: what the database keys a grant by.
fn hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_stored_as_its_hash_only() {
        let token = "ab".repeat(32);
        let stored = hash(&token);
        assert_eq!(stored.len(), 64);
        assert_ne!(stored, token);
        assert_eq!(stored, hash(&token));
    }
}
