//! Callers, tenants and permissions (SPEC §2.1–2.2, §5.3.1, §8), one feature a file: the
//! security matrix ([`matrix`]), JWKS rotation ([`jwks`]), revocation of an open stream
//! ([`revocation`]), token exchange ([`token_exchange`]), a token's lifetime on the gateway's
//! clock ([`lifetime`]), CORS ([`cors`]), logs that hold no
//! secret ([`secret_logs`]), the CLI ([`cli`]), local development mode ([`local_dev`]) and
//! tenants kept apart ([`tenants`]). This module holds what they share: the configuration with
//! authentication on, tokens and keys, and requests with a credential.

mod cli;
mod cors;
mod jwks;
mod lifetime;
mod local_dev;
mod matrix;
mod revocation;
mod secret_logs;
mod tenants;
mod token_exchange;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agui_gateway::auth::keys::{self, KeyRequest};
use agui_gateway::config::Config;
use agui_gateway::store::{AuditRow, KeyKind};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;
use crate::on_both_stores;

const SECRET: &str = "an-app-token-secret-for-the-tests-0123456789";
pub(crate) const IDP_ISSUER: &str = "https://idp.test/";
const ACME_ORIGIN: &str = "https://app.acme.test";

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/auth/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The test configuration with authentication on: app tokens (HS256), the given identity
/// providers, revocations looked up every 200 ms, and a CORS origin for `acme`.
pub(crate) fn auth_config(database_url: &str, identity_providers: &str) -> Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    let text = format!(
        "{TEST_CONFIG}\n[auth]\nrevocation_check_ms = 200\n\n[auth.app_tokens]\nsecret = \"{SECRET}\"\n\n\
         {identity_providers}"
    );
    std::fs::write(&path, text).expect("write config");
    let mut config = Config::load(Some(&path), std::iter::empty()).expect("auth test config loads");
    config.database.url = database_url.to_string();
    for tenant in &mut config.tenants {
        if tenant.name == "acme" {
            tenant.cors_origins = vec![ACME_ORIGIN.to_string()];
        }
    }
    config
}

pub(crate) fn rsa_provider() -> String {
    format!(
        "[[auth.identity_providers]]\nname = \"corp\"\nissuer = \"{IDP_ISSUER}\"\naudience = [\"agui-gateway\"]\n\
         public_key_file = \"{}\"\nalgorithms = [\"RS256\"]\ntenants = [\"acme\", \"default\"]\n",
        fixture("idp-rsa.pub.pem")
    )
}

async fn secured(backend: Backend) -> (TestApp, TestDatabase) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &rsa_provider())).await;
    (app, db)
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Good claims of a gateway app token.
pub(crate) fn claims(tenant: &str, sub: &str) -> Value {
    json!({ "iss": "agui-gateway", "aud": "agui-gateway", "sub": sub, "tenant": tenant, "iat": now(), "exp": now() + 600 })
}

pub(crate) fn idp_claims(tenant: &str, sub: &str) -> Value {
    json!({ "iss": IDP_ISSUER, "aud": "agui-gateway", "sub": sub, "tenant": tenant, "iat": now(), "exp": now() + 600,
            "scope": "openid profile", "roles": ["analyst"] })
}

/// An app token acting as `sub` of `tenant`, holding `roles`.
pub(crate) fn person_token(tenant: &str, sub: &str, roles: &[&str]) -> String {
    let mut claims = claims(tenant, sub);
    claims["roles"] = json!(roles);
    app_token(&claims)
}

/// An app token acting as `sub` of `tenant`, holding `scope` (space-separated).
pub(crate) fn scoped_token(tenant: &str, sub: &str, scope: &str) -> String {
    let mut claims = claims(tenant, sub);
    claims["scope"] = json!(scope);
    app_token(&claims)
}

pub(crate) fn app_token(claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(SECRET.as_bytes()))
        .expect("sign")
}

fn idp_token(claims: &Value) -> String {
    let pem = std::fs::read(fixture("idp-rsa.pem")).expect("fixture");
    let key = EncodingKey::from_rsa_pem(&pem).expect("RSA key");
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key).expect("sign")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

pub(crate) async fn new_key(app: &TestApp, tenant: &str, agents: &[&str], kind: KeyKind) -> (String, String) {
    let agents: Vec<String> = agents.iter().map(|a| a.to_string()).collect();
    let request = KeyRequest { tenant, name: "test key", kind, agents: &agents, actor: "test" };
    let made = keys::create(app.store.as_ref(), app.auth.clock().as_ref(), request).await.expect("key created");
    (made.key, made.row.id)
}

/// Posts a run as the official client would, with an optional `Authorization`.
async fn post(
    app: &TestApp,
    agent: &str,
    tenant: &str,
    body: &Value,
    authorization: Option<&str>,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/v1/agui/agents/{agent}?tenant={tenant}")))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body.to_string());
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.send().await.expect("request sent")
}

async fn status_and_code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["error"]["code"].as_str().unwrap_or("").to_string())
}

async fn audit(app: &TestApp, tenant: &str) -> Vec<AuditRow> {
    app.store.audit_rows(Some(tenant), 0, 10_000).await.expect("audit rows")
}

fn detail(row: &AuditRow) -> Value {
    serde_json::from_str(&row.entry.detail).expect("audit detail is JSON")
}

async fn exchange(app: &TestApp, app_key: &str, form: &[(&str, &str)]) -> reqwest::Response {
    app.client
        .post(app.url("/v1/auth/token?tenant=acme"))
        .header("authorization", bearer(app_key))
        .form(form)
        .send()
        .await
        .expect("sent")
}

const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT: &str = "urn:ietf:params:oauth:token-type:jwt";

/// `GET /v1/agents` of `tenant` as `credential` sees it, as JSON.
async fn listed_agents(app: &TestApp, tenant: &str, credential: &str) -> Value {
    let url = app.url(&format!("/v1/agents?tenant={tenant}"));
    let response = app.client.get(url).header("authorization", bearer(credential)).send().await.expect("sent");
    response.json().await.expect("JSON")
}

/// A token exchange's form for `subject`.
async fn exchange_subject(app: &TestApp, app_key: &str, subject: &str) -> reqwest::Response {
    exchange(app, app_key, &[("grant_type", GRANT), ("subject_token", subject), ("subject_token_type", JWT)]).await
}

async fn status_code_and_message(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let text = |name: &str| body["error"][name].as_str().unwrap_or("").to_string();
    (status, text("code"), text("message"))
}
