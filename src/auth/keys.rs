//! Tenant API keys and app keys: `agk_<id>_<secret>`, 256 random bits of secret, stored only as
//! the secret's SHA-256 (a random 256-bit secret needs no slow hash: nothing to guess).
//! Created, listed and revoked by `agui-gateway keys`; each change is an audit row.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::json;

use crate::caller::Scopes;
use crate::clock::Clock;
use crate::store::{ApiKeyRow, AuditEntry, KeyKind, Store, StoreError};

/// Every key starts with this, so a key is recognisable (and findable by secret scanners).
pub const KEY_PREFIX: &str = "agk_";
const ID_HEX_LEN: usize = 16;
const SECRET_BYTES: usize = 32;

/// A key as the caller presents it, split into its public id and its secret.
pub struct PresentedKey<'a> {
    pub id: &'a str,
    pub secret: &'a str,
}

/// Splits `agk_<id>_<secret>`; `None` for anything else.
pub fn parse(key: &str) -> Option<PresentedKey<'_>> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let id_ok = id.len() == ID_HEX_LEN && id.bytes().all(|b| b.is_ascii_hexdigit());
    let secret_ok = secret.len() == 43 && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (id_ok && secret_ok).then_some(PresentedKey { id, secret })
}

/// Hex SHA-256 of a key's secret.
pub fn hash_secret(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two hashes without stopping at the first difference.
pub fn same_hash(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    SystemRandom::new().fill(&mut bytes).expect("the operating system's random source works");
    bytes
}

/// A key just made: the full key (shown once) and its stored row.
pub struct NewKey {
    pub key: String,
    pub row: ApiKeyRow,
}

/// What `keys create` is asked for.
pub struct KeyRequest<'a> {
    pub tenant: &'a str,
    pub name: &'a str,
    pub kind: KeyKind,
    /// Agents the key may start (`*` for all of the tenant's).
    pub agents: &'a [String],
    /// Who made it, for the audit trail (`cli`).
    pub actor: &'a str,
}

/// Makes a key and stores it with its `key.create` audit row, made at `clock`'s time.
pub async fn create(store: &dyn Store, clock: &dyn Clock, request: KeyRequest<'_>) -> Result<NewKey, StoreError> {
    let id: String = random_bytes::<{ ID_HEX_LEN / 2 }>().iter().map(|b| format!("{b:02x}")).collect();
    let secret = URL_SAFE_NO_PAD.encode(random_bytes::<SECRET_BYTES>());
    let key = format!("{KEY_PREFIX}{id}_{secret}");
    let scopes = Scopes::for_key(request.agents);
    let at_ms = clock.now_ms();
    let row = ApiKeyRow {
        id: id.clone(),
        tenant: request.tenant.to_string(),
        name: request.name.to_string(),
        kind: request.kind,
        scopes: scopes.to_string(),
        secret_sha256: hash_secret(&secret),
        created_by: request.actor.to_string(),
        created_at_ms: at_ms,
        revoked_at_ms: None,
    };
    let audit = AuditEntry {
        tenant: row.tenant.clone(),
        action: "key.create".into(),
        actor: request.actor.to_string(),
        via: None,
        detail: json!({ "key": id, "name": row.name, "kind": row.kind.as_str(), "scopes": row.scopes }).to_string(),
        at_ms,
    };
    store.create_api_key(&row, &audit).await?;
    Ok(NewKey { key, row })
}

/// Revokes a key of the tenant at `clock`'s time; false when there is no such live key.
pub async fn revoke(
    store: &dyn Store,
    clock: &dyn Clock,
    tenant: &str,
    id: &str,
    actor: &str,
) -> Result<bool, StoreError> {
    let audit = AuditEntry {
        tenant: tenant.to_string(),
        action: "key.revoke".into(),
        actor: actor.to_string(),
        via: None,
        detail: json!({ "key": id }).to_string(),
        at_ms: clock.now_ms(),
    };
    store.revoke_api_key(tenant, id, &audit).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_only_in_their_own_shape() {
        let secret = URL_SAFE_NO_PAD.encode([7u8; 32]);
        let key = format!("agk_0123456789abcdef_{secret}");
        let parsed = parse(&key).expect("parses");
        assert_eq!(parsed.id, "0123456789abcdef");
        assert_eq!(parsed.secret, secret);
        for bad in ["", "agk_", "agk_0123_abc", "xyz_0123456789abcdef_abc", &key[..key.len() - 1]] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn hashes_compare_whole() {
        let a = hash_secret("one");
        assert!(same_hash(&a, &hash_secret("one")));
        assert!(!same_hash(&a, &hash_secret("two")));
        assert_eq!(a.len(), 64);
    }
}
