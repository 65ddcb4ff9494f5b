//! API and app keys and their revocations: [`KeyStore`]. Only a key's SHA-256 is stored.

use async_trait::async_trait;

use super::audit::insert_audit;
use super::backend::Backend;
use super::error::StoreError;
use super::rows::audit::AuditEntry;
use super::sql::{Record, SqlDb, Stmt};

/// What kind of credential an API key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A tenant API key: a bearer credential with no person behind it.
    Tenant,
    /// A registered app's key: accepted only by the token exchange.
    App,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Tenant => "tenant",
            KeyKind::App => "app",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreError> {
        match value {
            "tenant" => Ok(KeyKind::Tenant),
            "app" => Ok(KeyKind::App),
            other => Err(StoreError::Corrupt(format!("key kind '{other}'"))),
        }
    }
}

/// An API key as stored: never its secret, only the secret's SHA-256.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRow {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub kind: KeyKind,
    /// Space-separated gateway scopes.
    pub scopes: String,
    pub secret_sha256: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores a new key and its `key.create` audit row in one transaction.
    async fn create_api_key(&self, key: &ApiKeyRow, audit: &AuditEntry) -> Result<(), StoreError>;
    /// The key a presented credential names, in whichever tenant holds it: the only lookup of
    /// a key without a tenant, because the credential is what establishes the tenant (its
    /// secret is then checked against the row, and the request's `?tenant=` compared with the
    /// row's: another tenant's key is 403, not 401).
    async fn key_for_credential(&self, id: &str) -> Result<Option<ApiKeyRow>, StoreError>;
    /// The tenant's key with this id: none when the id is another tenant's.
    async fn find_api_key(&self, tenant: &str, id: &str) -> Result<Option<ApiKeyRow>, StoreError>;
    /// The tenant's keys (every tenant's with `None`), oldest first.
    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRow>, StoreError>;
    /// Revokes a key of the tenant and appends the `key.revoke` audit row, in one transaction;
    /// false when the tenant has no such key or it was revoked already.
    async fn revoke_api_key(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError>;
    /// Ids of keys revoked at or after `since_ms`, of every tenant (the revocation watcher's
    /// one query per interval, shared by all open streams).
    async fn revoked_keys_since(&self, since_ms: i64) -> Result<Vec<String>, StoreError>;
}

const INSERT_API_KEY: &str = "INSERT INTO api_keys (id, tenant, name, kind, scopes, secret_sha256, \
     created_by, created_at_ms, revoked_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const KEY_BY_ID: &str = "SELECT * FROM api_keys WHERE id = $1";
const TENANT_API_KEY: &str = "SELECT * FROM api_keys WHERE tenant = $1 AND id = $2";
const TENANT_API_KEYS: &str = "SELECT * FROM api_keys WHERE tenant = $1 ORDER BY created_at_ms, id";
const ALL_API_KEYS: &str = "SELECT * FROM api_keys ORDER BY tenant, created_at_ms, id";
const REVOKE_API_KEY: &str = "UPDATE api_keys SET revoked_at_ms = $1 \
     WHERE tenant = $2 AND id = $3 AND revoked_at_ms IS NULL";
const REVOKED_SINCE: &str = "SELECT id FROM api_keys WHERE revoked_at_ms >= $1";

fn api_key_row<DB: SqlDb>(row: &Record<DB>) -> Result<ApiKeyRow, StoreError> {
    Ok(ApiKeyRow {
        id: row.get("id")?,
        tenant: row.get("tenant")?,
        name: row.get("name")?,
        kind: KeyKind::parse(&row.get::<String>("kind")?)?,
        scopes: row.get("scopes")?,
        secret_sha256: row.get("secret_sha256")?,
        created_by: row.get("created_by")?,
        created_at_ms: row.get("created_at_ms")?,
        revoked_at_ms: row.get("revoked_at_ms")?,
    })
}

#[async_trait]
impl<B: Backend> KeyStore for B {
    async fn create_api_key(&self, key: &ApiKeyRow, audit: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.write_pool().begin().await?;
        Stmt::new(INSERT_API_KEY)
            .bind(&key.id)
            .bind(&key.tenant)
            .bind(&key.name)
            .bind(key.kind.as_str())
            .bind(&key.scopes)
            .bind(&key.secret_sha256)
            .bind(&key.created_by)
            .bind(key.created_at_ms)
            .bind(key.revoked_at_ms)
            .execute(&mut tx)
            .await?;
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn key_for_credential(&self, id: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        Stmt::new(KEY_BY_ID).bind(id).fetch_optional_as(self.read_pool(), api_key_row).await
    }

    async fn find_api_key(&self, tenant: &str, id: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        Stmt::new(TENANT_API_KEY).bind(tenant).bind(id).fetch_optional_as(self.read_pool(), api_key_row).await
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKeyRow>, StoreError> {
        let listed = match tenant {
            Some(tenant) => Stmt::new(TENANT_API_KEYS).bind(tenant),
            None => Stmt::new(ALL_API_KEYS),
        };
        listed.fetch_all_as(self.read_pool(), api_key_row).await
    }

    async fn revoke_api_key(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let mut tx = self.write_pool().begin().await?;
        let revoked = Stmt::new(REVOKE_API_KEY).bind(audit.at_ms).bind(tenant).bind(id).execute(&mut tx).await?;
        if revoked == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn revoked_keys_since(&self, since_ms: i64) -> Result<Vec<String>, StoreError> {
        let found = Stmt::new(REVOKED_SINCE).bind(since_ms).fetch_all(self.read_pool()).await?;
        found.iter().map(|row| row.get("id")).collect()
    }
}
