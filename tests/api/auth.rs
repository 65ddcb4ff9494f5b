//! Callers, tenants and permissions (SPEC §2.1–2.2, §5.3.1, §8): the security matrix, the
//! body that is never read, JWKS rotation, token exchange, revocation of an open stream, CORS,
//! the audit trail, the CLI, and logs that hold no secret.

use std::sync::{Arc, Mutex, OnceLock};
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
    let made = keys::create(app.store.as_ref(), request).await.expect("key created");
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

/// One row of the security matrix.
struct Case {
    name: &'static str,
    agent: &'static str,
    tenant: &'static str,
    authorization: Option<String>,
    body: Value,
    last_event_id: Option<String>,
    status: u16,
    code: &'static str,
}

async fn every_refused_caller_gets_its_status_and_code_and_writes_nothing(backend: Backend) {
    let (app, _db) = secured(backend).await;
    // Arrange: alice's thread in acme, keys of every kind, one of them revoked.
    let alice = app_token(&claims("acme", "alice"));
    let bob = app_token(&claims("acme", "bob"));
    let alice_run = first_run("th-alice", "r-alice", "alice's private question");
    let response = post(&app, "demo", "acme", &alice_run, Some(&bearer(&alice)), &[]).await;
    assert_eq!(response.status(), 200);
    let events = read_events(response, None).await;
    let alice_event_id = events[3].id.clone().expect("event id");
    let (demo_key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (revoked_key, revoked_id) = new_key(&app, "acme", &["*"], KeyKind::Tenant).await;
    assert!(keys::revoke(app.store.as_ref(), "acme", &revoked_id, "test").await.expect("revoke"));
    let (other_tenant_key, _) = new_key(&app, "default", &["*"], KeyKind::Tenant).await;
    let (app_key, _) = new_key(&app, "acme", &["*"], KeyKind::App).await;

    let mut tampered = alice.split('.').map(str::to_string).collect::<Vec<_>>();
    tampered[1] = URL_SAFE_NO_PAD.encode(claims("acme", "mallory").to_string());
    let tampered = tampered.join(".");
    let alg_none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("acme", "alice").to_string())
    );
    let rsa_public_pem = std::fs::read(fixture("idp-rsa.pub.pem")).expect("fixture");
    let hs_with_rsa_public = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &idp_claims("acme", "alice"),
        &EncodingKey::from_secret(&rsa_public_pem),
    )
    .expect("sign");
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("acme", "alice");
        f(&mut c);
        app_token(&c)
    };
    let expired = with(&|c| c["exp"] = json!(now() - 3600));
    let not_yet = with(&|c| c["nbf"] = json!(now() + 3600));
    let wrong_iss = with(&|c| c["iss"] = json!("https://evil.test/"));
    let wrong_aud = with(&|c| c["aud"] = json!("another-service"));
    let no_sub = with(&|c| {
        c.as_object_mut().expect("object").remove("sub");
    });
    let other_tenant_token = app_token(&claims("default", "alice"));
    let mut resume = first_run("th-key-resume", "r-1", "hello");
    resume["resume"] = json!([{ "interruptId": "i-1", "status": "resolved", "payload": { "approved": true } }]);
    let fresh = |thread: &str| first_run(thread, "r-1", "a question that must never be stored");

    let case = |name, agent, tenant, authorization: Option<String>, body, status, code| Case {
        name,
        agent,
        tenant,
        authorization,
        body,
        last_event_id: None,
        status,
        code,
    };
    let cases = vec![
        case("missing header", "demo", "acme", None, fresh("th-1"), 401, "unauthenticated"),
        case("malformed header", "demo", "acme", Some(format!("Token {alice}")), fresh("th-2"), 401, "unauthenticated"),
        case("alg none", "demo", "acme", Some(bearer(&alg_none)), fresh("th-3"), 401, "unauthenticated"),
        case(
            "HS256 signed with the RSA public key",
            "demo",
            "acme",
            Some(bearer(&hs_with_rsa_public)),
            fresh("th-4"),
            401,
            "unauthenticated",
        ),
        case("tampered signature", "demo", "acme", Some(bearer(&tampered)), fresh("th-5"), 401, "unauthenticated"),
        case("expired", "demo", "acme", Some(bearer(&expired)), fresh("th-6"), 401, "unauthenticated"),
        case("not yet valid", "demo", "acme", Some(bearer(&not_yet)), fresh("th-7"), 401, "unauthenticated"),
        case("wrong iss", "demo", "acme", Some(bearer(&wrong_iss)), fresh("th-8"), 401, "unauthenticated"),
        case("wrong aud", "demo", "acme", Some(bearer(&wrong_aud)), fresh("th-9"), 401, "unauthenticated"),
        case("no sub", "demo", "acme", Some(bearer(&no_sub)), fresh("th-10"), 401, "unauthenticated"),
        case(
            "tenant claim differs from ?tenant=",
            "demo",
            "acme",
            Some(bearer(&other_tenant_token)),
            fresh("th-11"),
            403,
            "permission_denied",
        ),
        case("revoked key", "demo", "acme", Some(bearer(&revoked_key)), fresh("th-12"), 401, "unauthenticated"),
        case(
            "key without the agent's scope",
            "slow",
            "acme",
            Some(bearer(&demo_key)),
            fresh("th-13"),
            403,
            "permission_denied",
        ),
        case(
            "another person's thread",
            "demo",
            "acme",
            Some(bearer(&bob)),
            first_run("th-alice", "r-bob", "let me in"),
            403,
            "permission_denied",
        ),
        Case {
            last_event_id: Some(alice_event_id.clone()),
            ..case(
                "another person's runId and Last-Event-ID",
                "demo",
                "acme",
                Some(bearer(&bob)),
                alice_run.clone(),
                403,
                "permission_denied",
            )
        },
        case(
            "another tenant's thread (same threadId)",
            "demo",
            "acme",
            Some(bearer(&other_tenant_key)),
            first_run("th-alice", "r-x", "let me in"),
            403,
            "permission_denied",
        ),
        case("API key trying to resume", "demo", "acme", Some(bearer(&demo_key)), resume, 403, "permission_denied"),
        case(
            "app key as a bearer token",
            "demo",
            "acme",
            Some(bearer(&app_key)),
            fresh("th-14"),
            401,
            "unauthenticated",
        ),
    ];

    let before = app.counts().await;
    for case in cases {
        let failures_before = app.auth.failure_count(case.tenant);
        let mut extra = Vec::new();
        if let Some(id) = &case.last_event_id {
            extra.push(("last-event-id", id.as_str()));
        }
        let response = post(&app, case.agent, case.tenant, &case.body, case.authorization.as_deref(), &extra).await;
        let (status, code) = status_and_code(response).await;
        assert_eq!((status, code.as_str()), (case.status, case.code), "{}", case.name);
        assert_eq!(app.counts().await, before, "{}: nothing is written, not even an audit row", case.name);
        if status == 401 {
            assert_eq!(app.auth.failure_count(case.tenant), failures_before + 1, "{}: counted", case.name);
        }
    }
    // The refusals are counted per tenant, and reported to the audit trail without a secret.
    app.auth.report_failures().await.expect("report");
    let rows = audit(&app, "acme").await;
    let report = rows.iter().find(|r| r.entry.action == "auth.failures").expect("failures reported");
    let counted = detail(report);
    assert!(counted["count"].as_u64().expect("count") >= 10, "{counted}");
    assert!(counted["reasons"]["expired"].as_u64() == Some(1), "{counted}");
    assert!(!report.entry.detail.contains(&alice) && !report.entry.detail.contains(&demo_key));
}
on_both_stores!(every_refused_caller_gets_its_status_and_code_and_writes_nothing);

async fn every_kind_of_credential_starts_a_run_and_the_audit_trail_names_it(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let alice = app_token(&claims("acme", "alice"));
    let carol = idp_token(&idp_claims("acme", "carol"));
    let (key, key_id) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    for (thread, credential) in [("th-app", &alice), ("th-idp", &carol), ("th-key", &key)] {
        let response =
            post(&app, "demo", "acme", &first_run(thread, "r-1", "hi"), Some(&bearer(credential)), &[]).await;
        assert_eq!(response.status(), 200, "{thread}");
        let events = read_events(response, None).await;
        assert_eq!(events.last().map(SseEvent::kind), Some("RUN_FINISHED"), "{thread}");
    }
    let starts: Vec<AuditRow> =
        audit(&app, "acme").await.into_iter().filter(|r| r.entry.action == "run.start").collect();
    let actors: Vec<&str> = starts.iter().map(|r| r.entry.actor.as_str()).collect();
    assert_eq!(actors, ["person:alice", "person:carol", &format!("key:{key_id}")]);
    let first = detail(&starts[0]);
    assert_eq!(first["thread"], "th-app");
    assert_eq!(first["agent"], "demo");
    assert_eq!(first["door"], "agui");
    assert_eq!(first["via"], "direct");
    assert!(first["turn"].as_str().is_some_and(|t| t.starts_with('t')), "{first}");
    assert_eq!(starts[0].entry.tenant, "acme");

    // A key's thread is the tenant's; a person's is theirs alone.
    let (other_key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let read = |thread: &str, credential: &str| {
        app.client
            .get(app.url(&format!("/v1/threads/{thread}?tenant=acme")))
            .header("authorization", bearer(credential))
            .send()
    };
    assert_eq!(read("th-key", &other_key).await.expect("sent").status(), 200);
    assert_eq!(read("th-app", &other_key).await.expect("sent").status(), 403);
    assert_eq!(read("th-app", &alice).await.expect("sent").status(), 200);
    assert_eq!(read("th-nonexistent", &alice).await.expect("sent").status(), 403);

    // The agents a key lists are the agents it may start.
    let listed = listed_agents(&app, "acme", &key).await;
    let names: Vec<&str> =
        listed["agents"].as_array().expect("agents").iter().filter_map(|a| a["name"].as_str()).collect();
    assert_eq!(names, ["demo"]);
}
on_both_stores!(every_kind_of_credential_starts_a_run_and_the_audit_trail_names_it);

async fn the_same_thread_id_in_two_tenants_names_two_threads(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let acme = app_token(&claims("acme", "alice"));
    let default = app_token(&claims("default", "alice"));
    for (tenant, token) in [("acme", &acme), ("default", &default)] {
        let response =
            post(&app, "demo", tenant, &first_run("shared-id", "r-1", "hi"), Some(&bearer(token)), &[]).await;
        assert_eq!(response.status(), 200, "{tenant}");
        read_events(response, None).await;
    }
    assert_eq!(app.counts().await.threads, 2, "one thread per tenant");
}
on_both_stores!(the_same_thread_id_in_two_tenants_names_two_threads);

/// §2.1: a bad or missing credential costs the server no body read. The client declares a
/// large body, sends its first kilobyte and then nothing more until it is answered: a server
/// that waited for the body would never answer.
#[tokio::test]
async fn an_unauthenticated_request_is_answered_before_its_body_is_read() {
    let (app, _db) = secured(Backend::Sqlite).await;
    let mut stream = tokio::net::TcpStream::connect(app.address).await.expect("connect");
    let total: usize = 60_000;
    let head = format!(
        "POST /v1/agui/agents/demo?tenant=acme HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nAuthorization: Bearer not-a-token\r\nContent-Length: {total}\r\n\r\n",
        app.address
    );
    stream.write_all(head.as_bytes()).await.expect("head sent");
    let sent = 1000;
    stream.write_all(&vec![b' '; sent]).await.expect("first kilobyte sent");
    let started = Instant::now();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered before the body was sent")
        .expect("read");
    let elapsed = started.elapsed();
    let answer = String::from_utf8_lossy(&answer[..read]).to_string();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("unauthenticated"), "{answer}");
    eprintln!("401 after {elapsed:?}, with {sent} of {total} body bytes sent");
}

/// An identity provider's JWKS served over real HTTP, rotated: after the refresh, tokens of the
/// old key fail and tokens of the new key pass; a failed refresh keeps the last good keys.
#[tokio::test]
async fn jwks_rotation_is_picked_up_on_refresh_and_a_failed_refresh_keeps_the_keys() {
    use axum::http::StatusCode;
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let make_key = |kid: &str| {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
        let jwk = json!({ "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": kid,
                          "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()) });
        (EncodingKey::from_ed_der(pkcs8.as_ref()), jwk)
    };
    let (old_key, old_jwk) = make_key("old");
    let (new_key, new_jwk) = make_key("new");
    let served: Arc<Mutex<Option<String>>> =
        Arc::new(Mutex::new(Some(json!({ "keys": [old_jwk.clone()] }).to_string())));
    let jwks = served.clone();
    let failures = Arc::new(Mutex::new(0usize));
    let failed = failures.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let jwks_address = listener.local_addr().expect("address");
    let idp = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let document = jwks.lock().expect("lock").clone();
                if document.is_none() {
                    *failed.lock().expect("lock") += 1;
                }
                async move {
                    match document {
                        Some(body) => (StatusCode::OK, body),
                        None => (StatusCode::INTERNAL_SERVER_ERROR, "down".to_string()),
                    }
                }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let provider = format!(
        "[[auth.identity_providers]]\nname = \"rotating\"\nissuer = \"{IDP_ISSUER}\"\naudience = [\"agui-gateway\"]\n\
         jwks_url = \"http://{jwks_address}/jwks.json\"\nallow_insecure_http = true\nalgorithms = [\"EdDSA\"]\nrefresh_secs = 1\n\
         tenants = [\"acme\"]\n"
    );
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start_with(auth_config(&db.url, &provider)).await;
    let token = |key: &EncodingKey, kid: &str| {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, &idp_claims("acme", "dana"), key).expect("sign")
    };
    let status = |token: String| {
        let request = app.client.get(app.url("/v1/agents?tenant=acme")).header("authorization", bearer(&token)).send();
        async move { request.await.expect("sent").status().as_u16() }
    };
    assert_eq!(status(token(&old_key, "old")).await, 200, "the old key is served at start");
    assert_eq!(status(token(&new_key, "new")).await, 401, "the new key is not published yet");

    *served.lock().expect("lock") = Some(json!({ "keys": [new_jwk.clone()] }).to_string());
    wait_until(Duration::from_secs(5), "the rotated key to be picked up", || {
        let answered = status(token(&new_key, "new"));
        async move { answered.await == 200 }
    })
    .await;
    assert_eq!(status(token(&old_key, "old")).await, 401, "the old key is gone after the refresh");

    // The key server fails from now on; wait until the gateway's refresh has met it twice.
    let failed_before = *failures.lock().expect("lock");
    *served.lock().expect("lock") = None;
    wait_until(Duration::from_secs(10), "two failed JWKS refreshes", || {
        let failed = *failures.lock().expect("lock") - failed_before;
        async move { failed >= 2 }
    })
    .await;
    assert_eq!(status(token(&new_key, "new")).await, 200, "a failed refresh keeps the last good keys");
    idp.abort();
}

async fn a_revoked_key_ends_its_open_stream_within_seconds_and_the_turn_runs_on(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let (key, key_id) = new_key(&app, "acme", &["waiter"], KeyKind::Tenant).await;
    let response = post(&app, "waiter", "acme", &first_run("th-w", "r-1", "wait"), Some(&bearer(&key)), &[]).await;
    assert_eq!(response.status(), 200);
    // Read until the turn has said its word and waits, then revoke the key as `keys revoke` does.
    let mut stream = EventStream::new(response);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let reader = tokio::spawn(stream.rest());
    let events_before = app.counts().await.events;
    let revoked_at = Instant::now();
    assert!(keys::revoke(app.store.as_ref(), "acme", &key_id, "cli").await.expect("revoke"));
    let events = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the stream ended within 5 s of the revocation")
        .expect("reader");
    let took = revoked_at.elapsed();
    let last = events.last().expect("events");
    assert_eq!(last.kind(), "RUN_ERROR", "{events:?}");
    assert_eq!(last.data["code"], "revoked");
    assert_eq!(events.iter().filter(|e| e.kind() == "RUN_ERROR").count(), 1);
    eprintln!("a revoked key's stream ended {took:?} after the revocation");
    // The turn is untouched: still running, nothing appended to its log for the revocation.
    let thread = app.store.find_thread("acme", "th-w").await.expect("read").expect("thread");
    let turns = app.store.thread_turns(thread.pk).await.expect("turns");
    assert_eq!(turns[0].status.as_str(), "running");
    assert_eq!(app.counts().await.events, events_before);
    let refused = post(&app, "waiter", "acme", &first_run("th-w", "r-1", "wait"), Some(&bearer(&key)), &[]).await;
    assert_eq!(status_and_code(refused).await, (401, "unauthenticated".to_string()));
    let revocation = audit(&app, "acme").await.into_iter().find(|r| r.entry.action == "key.revoke").expect("audited");
    assert_eq!(detail(&revocation)["key"], key_id.as_str());
}
on_both_stores!(a_revoked_key_ends_its_open_stream_within_seconds_and_the_turn_runs_on);

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

async fn an_app_exchanges_a_persons_token_and_acts_for_them_until_its_key_is_revoked(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let (app_key, app_key_id) = new_key(&app, "acme", &["demo", "waiter"], KeyKind::App).await;
    let person = idp_token(&idp_claims("acme", "erin"));
    let response =
        exchange(&app, &app_key, &[("grant_type", GRANT), ("subject_token", &person), ("subject_token_type", JWT)])
            .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let issued: Value = response.json().await.expect("JSON");
    assert_eq!(issued["token_type"], "Bearer");
    assert_eq!(issued["issued_token_type"], JWT);
    assert!(issued["expires_in"].as_u64().is_some_and(|s| s > 0 && s <= 900), "{issued}");
    let token = issued["access_token"].as_str().expect("token").to_string();

    // The token acts as erin, via the app, and reaches only the app's agents.
    let run = post(&app, "demo", "acme", &first_run("th-erin", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(run.status(), 200);
    read_events(run, None).await;
    let slow = post(&app, "slow", "acme", &first_run("th-erin-2", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(status_and_code(slow).await, (403, "permission_denied".to_string()));
    let rows = audit(&app, "acme").await;
    let exchanged = rows.iter().find(|r| r.entry.action == "token.exchange").expect("exchange audited");
    assert_eq!(exchanged.entry.actor, "person:erin");
    assert_eq!(exchanged.entry.via.as_deref(), Some("app:test key"));
    assert!(!exchanged.entry.detail.contains(&token) && !exchanged.entry.detail.contains(&person));
    let start = rows.iter().find(|r| r.entry.action == "run.start").expect("run audited");
    assert_eq!(start.entry.actor, "person:erin");
    assert_eq!(start.entry.via.as_deref(), Some("app:test key"));
    assert_eq!(detail(start)["via"], "app:test key");

    // What the exchange refuses.
    let (tenant_key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let cases: Vec<(&str, String, Vec<(&str, String)>, u16, &str)> = vec![
        ("a tenant key", tenant_key.clone(), vec![("subject_token", person.clone())], 401, "unauthenticated"),
        ("no key", String::new(), vec![("subject_token", person.clone())], 401, "unauthenticated"),
        (
            "a gateway token as the subject",
            app_key.clone(),
            vec![("subject_token", app_token(&claims("acme", "erin")))],
            400,
            "invalid_grant",
        ),
        (
            "another tenant's person",
            app_key.clone(),
            vec![("subject_token", idp_token(&idp_claims("default", "erin")))],
            400,
            "invalid_grant",
        ),
        (
            "an expired subject",
            app_key.clone(),
            vec![(
                "subject_token",
                idp_token(&json!({ "iss": IDP_ISSUER, "aud": "agui-gateway", "sub": "erin",
                                                       "tenant": "acme", "exp": now() - 3600 })),
            )],
            400,
            "invalid_grant",
        ),
    ];
    for (name, key, fields, status, code) in cases {
        let mut form: Vec<(&str, &str)> = vec![("grant_type", GRANT), ("subject_token_type", JWT)];
        form.extend(fields.iter().map(|(k, v)| (*k, v.as_str())));
        let response = if key.is_empty() {
            app.client.post(app.url("/v1/auth/token?tenant=acme")).form(&form).send().await.expect("sent")
        } else {
            exchange(&app, &key, &form).await
        };
        assert_eq!(status_and_code(response).await, (status, code.to_string()), "{name}");
    }
    let bad_grant = exchange(&app, &app_key, &[("grant_type", "password"), ("subject_token", &person)]).await;
    assert_eq!(status_and_code(bad_grant).await, (400, "unsupported_grant_type".to_string()));

    // Revoking the app key withdraws the tokens it exchanged, open streams included.
    let waiting =
        post(&app, "waiter", "acme", &first_run("th-erin-w", "r-1", "wait"), Some(&bearer(&token)), &[]).await;
    assert_eq!(waiting.status(), 200);
    let mut stream = EventStream::new(waiting);
    stream.until_kind("TEXT_MESSAGE_END").await;
    let reader = tokio::spawn(stream.rest());
    assert!(keys::revoke(app.store.as_ref(), "acme", &app_key_id, "cli").await.expect("revoke"));
    let events = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("ended in 5 s").expect("reader");
    assert_eq!(events.last().map(|e| e.data["code"].clone()), Some(json!("revoked")));
    let after = post(&app, "demo", "acme", &first_run("th-erin-3", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(status_and_code(after).await, (401, "unauthenticated".to_string()));
}
on_both_stores!(an_app_exchanges_a_persons_token_and_acts_for_them_until_its_key_is_revoked);

/// §8: what a browser does. The preflight from a listed origin is allowed with the three
/// headers; from any other origin, or for another tenant, it is not; nothing is exposed.
#[tokio::test]
async fn a_browser_preflight_passes_only_from_a_listed_origin() {
    let (app, _db) = secured(Backend::Sqlite).await;
    let preflight = |origin: &str, tenant: &str| {
        app.client
            .request(reqwest::Method::OPTIONS, app.url(&format!("/v1/agui/agents/demo?tenant={tenant}")))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "authorization,content-type,last-event-id")
            .send()
    };
    let allowed = preflight(ACME_ORIGIN, "acme").await.expect("sent");
    assert!(allowed.status().is_success(), "{}", allowed.status());
    let headers = allowed.headers();
    assert_eq!(headers["access-control-allow-origin"], ACME_ORIGIN);
    let allowed_headers = headers["access-control-allow-headers"].to_str().expect("ASCII").to_ascii_lowercase();
    for header in ["authorization", "content-type", "last-event-id"] {
        assert!(allowed_headers.contains(header), "{allowed_headers}");
    }
    assert!(headers["access-control-allow-methods"].to_str().expect("ASCII").contains("POST"));
    assert!(headers.get("access-control-allow-credentials").is_none());

    for (origin, tenant) in
        [("https://evil.test", "acme"), (ACME_ORIGIN, "default"), ("https://app.acme.test.evil", "acme")]
    {
        let refused = preflight(origin, tenant).await.expect("sent");
        assert!(
            refused.headers().get("access-control-allow-origin").is_none(),
            "{origin} on {tenant} must not be allowed"
        );
    }

    // The actual request from the listed origin: readable, and nothing exposed.
    let token = app_token(&claims("acme", "alice"));
    let response = post(
        &app,
        "demo",
        "acme",
        &first_run("th-browser", "r-1", "hi"),
        Some(&bearer(&token)),
        &[("origin", ACME_ORIGIN)],
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], ACME_ORIGIN);
    assert!(response.headers().get("access-control-expose-headers").is_none());
    read_events(response, None).await;
}

/// Everything logged at info level by this test binary, from any thread.
fn captured_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_ansi(false)
            .with_writer(move || CaptureWriter(writer.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the log test installs the only subscriber");
        buffer
    })
}

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// §8: logs never contain a token, a key or message text at info level — over a full run
/// with each credential, refused credentials, and a token exchange.
#[tokio::test]
async fn the_logs_of_a_full_run_hold_no_token_key_or_message_text() {
    let logs = captured_logs();
    let (app, _db) = secured(Backend::Sqlite).await;
    let token = app_token(&claims("acme", "alice"));
    let (key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (app_key, _) = new_key(&app, "acme", &["demo"], KeyKind::App).await;
    let person = idp_token(&idp_claims("acme", "frank"));
    let words = "the-secret-words-of-a-user-message";
    for (thread, credential) in [("th-log-1", &token), ("th-log-2", &key), ("th-log-3", &person)] {
        let response =
            post(&app, "demo", "acme", &first_run(thread, "r-1", words), Some(&bearer(credential)), &[]).await;
        assert_eq!(response.status(), 200);
        read_events(response, None).await;
    }
    let exchanged =
        exchange(&app, &app_key, &[("grant_type", GRANT), ("subject_token", &person), ("subject_token_type", JWT)])
            .await;
    let exchanged: Value = exchanged.json().await.expect("JSON");
    let issued = exchanged["access_token"].as_str().expect("token").to_string();
    let bad = format!("{token}x");
    let refused = post(&app, "demo", "acme", &first_run("th-log-4", "r-1", words), Some(&bearer(&bad)), &[]).await;
    assert_eq!(refused.status(), 401);
    app.auth.report_failures().await.expect("report");

    let text = String::from_utf8_lossy(&logs.lock().expect("lock")).to_string();
    assert!(text.contains("th-log-1") && text.contains("person:alice"), "runs are logged, without secrets:\n{text}");
    for (what, secret) in [
        ("app token", token.as_str()),
        ("API key", key.as_str()),
        ("app key", app_key.as_str()),
        ("identity token", person.as_str()),
        ("exchanged token", issued.as_str()),
        ("refused token", bad.as_str()),
        ("message text", words),
    ] {
        assert!(!text.contains(secret), "the logs hold the {what}:\n{text}");
    }
    // Key secrets never appear even in part (the id is public; the secret is not).
    // `agk_<id>_<secret>`: the id is hex, the secret (URL-safe base64) may hold `_` itself.
    let key_secret =
        key.strip_prefix("agk_").and_then(|rest| rest.split_once('_')).map(|(_, secret)| secret).expect("secret");
    assert!(!text.contains(key_secret));
}

/// The commands an operator types: keys, a minted token, and the audit trail.
#[tokio::test]
async fn the_cli_creates_lists_and_revokes_keys_mints_tokens_and_prints_the_audit_trail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = format!("sqlite://{}", dir.path().join("cli.db").display());
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_agui-gateway"))
            .args(args)
            .env("AGUI_GATEWAY_DATABASE_URL", &database)
            .env("AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET", SECRET)
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(output.status.success(), "{args:?}: {}{stdout}", String::from_utf8_lossy(&output.stderr));
        stdout
    };
    let key = cli(&["keys", "create", "--tenant", "default", "--name", "ci", "--agents", "demo"]);
    let key = key.trim();
    assert!(key.starts_with("agk_"), "{key}");
    let id = key.split('_').nth(1).expect("id");
    let listed = cli(&["keys", "list", "--tenant", "default"]);
    assert!(listed.contains(id) && listed.contains("active") && !listed.contains(key), "{listed}");
    cli(&["keys", "revoke", "--tenant", "default", id]);
    assert!(cli(&["keys", "list"]).contains("revoked"));
    let trail = cli(&["audit", "--tenant", "default", "--since", "1h"]);
    assert!(trail.contains("key.create") && trail.contains("key.revoke"), "{trail}");
    assert!(cli(&["audit", "--since", "2999-01-01"]).is_empty());

    let token = cli(&["token", "mint", "--tenant", "default", "--sub", "gina", "--roles", "admin,reviewer"]);
    let token = token.trim();
    let mut validation = jsonwebtoken::Validation::new(Algorithm::HS256);
    validation.set_audience(&["agui-gateway"]);
    let decoded =
        jsonwebtoken::decode::<Value>(token, &jsonwebtoken::DecodingKey::from_secret(SECRET.as_bytes()), &validation)
            .expect("the minted token verifies");
    assert_eq!(decoded.claims["sub"], "gina");
    assert_eq!(decoded.claims["tenant"], "default");
    assert_eq!(decoded.claims["roles"], json!(["admin", "reviewer"]));
}

/// Without any verifier the gateway is in local development mode: loopback only, as `local`.
#[tokio::test]
async fn without_authentication_only_loopback_callers_are_served_and_a_key_still_counts() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start(&db.url).await;
    assert!(app.auth.local_dev());
    let response = app.post_run("demo", &first_run("th-local", "r-1", "hi")).await;
    assert_eq!(response.status(), 200);
    read_events(response, None).await;
    // A credential, when sent, is checked even here.
    let refused =
        post(&app, "demo", "default", &first_run("th-x", "r-1", "hi"), Some("Bearer agk_nonsense"), &[]).await;
    assert_eq!(status_and_code(refused).await, (401, "unauthenticated".to_string()));
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

async fn exchanges_audited(app: &TestApp) -> usize {
    audit(app, "acme").await.iter().filter(|r| r.entry.action == "token.exchange").count()
}

async fn an_exchange_holds_only_the_scopes_both_sides_hold_and_refuses_one_that_starts_nothing(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let (app_key, _) = new_key(&app, "acme", &["demo"], KeyKind::App).await;
    let person_with = |scope: &str| {
        let mut claims = idp_claims("acme", "hana");
        claims["scope"] = json!(scope);
        idp_token(&claims)
    };

    // The person may start demo and slow, the app demo only: the token starts demo only.
    let response =
        exchange_subject(&app, &app_key, &person_with("threads:read threads:content agent:demo agent:slow")).await;
    assert_eq!(response.status(), 200);
    let issued: Value = response.json().await.expect("JSON");
    assert_eq!(issued["scope"], "threads:read threads:content agent:demo");
    let token = issued["access_token"].as_str().expect("token").to_string();
    let run = post(&app, "demo", "acme", &first_run("th-hana", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(run.status(), 200);
    read_events(run, None).await;
    let slow = post(&app, "slow", "acme", &first_run("th-hana-2", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(status_and_code(slow).await, (403, "permission_denied".to_string()));

    // Shared scopes that start nothing are refused, never signed (an empty list once read back
    // as every scope: a person holding only `agent:slow` got a token starting demo and slow).
    let before = app.counts().await;
    let exchanged_before = exchanges_audited(&app).await;
    for (name, scope) in [
        ("only an agent the app may not start", "agent:slow"),
        ("reading but no agent", "threads:read threads:content"),
        ("reading and an agent the app may not start", "threads:read threads:content agent:slow"),
        ("the app's agent but no reading", "agent:demo"),
    ] {
        let failures_before = app.auth.failure_count("acme");
        let response = exchange_subject(&app, &app_key, &person_with(scope)).await;
        let (status, code, message) = status_code_and_message(response).await;
        assert_eq!((status, code.as_str()), (400, "invalid_grant"), "{name}: {message}");
        assert!(message.contains("share none that starts a turn"), "{name}: {message}");
        assert_eq!(app.auth.failure_count("acme"), failures_before + 1, "{name}: counted");
    }
    assert_eq!(app.counts().await, before, "a refused exchange writes nothing");
    assert_eq!(exchanges_audited(&app).await, exchanged_before, "no token.exchange row claims success");
}
on_both_stores!(an_exchange_holds_only_the_scopes_both_sides_hold_and_refuses_one_that_starts_nothing);

async fn a_gateway_token_stating_no_scope_or_exchanged_without_one_reaches_nothing(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let (_, app_key_id) = new_key(&app, "acme", &["demo"], KeyKind::App).await;
    let mut empty = claims("acme", "ivan");
    empty["scope"] = json!("");
    let mut exchanged = claims("acme", "ivan");
    exchanged["via"] = json!("app:test key");
    exchanged["akid"] = json!(app_key_id);
    let before = app.counts().await;
    for (name, claims) in [("an explicit empty scope", empty), ("an exchanged token without scope", exchanged)] {
        let token = app_token(&claims);
        let run = post(&app, "demo", "acme", &first_run("th-ivan", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
        assert_eq!(status_and_code(run).await, (403, "permission_denied".to_string()), "{name}");
        let listed = listed_agents(&app, "acme", &token).await;
        assert_eq!(listed["agents"], json!([]), "{name}");
    }
    assert_eq!(app.counts().await, before);
}
on_both_stores!(a_gateway_token_stating_no_scope_or_exchanged_without_one_reaches_nothing);

async fn an_identity_providers_empty_default_scopes_grant_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let provider = format!("{}default_scopes = []\n", rsa_provider());
    let app = TestApp::start_with(auth_config(&db.url, &provider)).await;
    let (app_key, _) = new_key(&app, "acme", &["*"], KeyKind::App).await;
    // The token states only scopes that are not the gateway's: the provider's defaults apply.
    let person = idp_token(&idp_claims("acme", "jill"));
    let before = app.counts().await;
    let run = post(&app, "demo", "acme", &first_run("th-jill", "r-1", "hi"), Some(&bearer(&person)), &[]).await;
    assert_eq!(status_and_code(run).await, (403, "permission_denied".to_string()));
    let (status, code, message) = status_code_and_message(exchange_subject(&app, &app_key, &person).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid_grant"), "{message}");
    assert!(message.contains("person's scopes (none)"), "{message}");
    assert_eq!(app.counts().await, before, "nothing is written, no token.exchange row");
}
on_both_stores!(an_identity_providers_empty_default_scopes_grant_nothing);

/// `auth.local_dev = "auto"`: each of its three conditions switches local mode off.
#[tokio::test]
async fn local_dev_auto_is_off_while_a_token_verifier_is_configured() {
    let (app, _db) = secured(Backend::Sqlite).await;
    assert!(!app.auth.local_dev());
    let before = app.counts().await;
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await, before);
}

async fn local_dev_auto_is_off_once_the_store_holds_an_api_key(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut config = test_config(&db.url);
    config.auth.revocation_check_ms = 100;
    let app = TestApp::start_with(config.clone()).await;
    assert!(app.auth.local_dev(), "no verifier, no key, loopback: local mode");
    // A key created beside the running gateway (as `keys create` does) ends local mode.
    new_key(&app, "default", &["demo"], KeyKind::Tenant).await;
    wait_until(Duration::from_secs(5), "local mode to end after a key was created", || {
        let local = app.auth.local_dev();
        async move { !local }
    })
    .await;
    let before = app.counts().await;
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await, before);
    app.shut_down().await;
    // And a start on a store that holds a key never turns it on.
    let restarted = TestApp::start_with(config).await;
    assert!(!restarted.auth.local_dev());
    let anonymous = restarted.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(restarted.counts().await, before);
}
on_both_stores!(local_dev_auto_is_off_once_the_store_holds_an_api_key);

#[tokio::test]
async fn local_dev_auto_is_off_when_listening_beyond_loopback() {
    let db = TestDatabase::new(Backend::Sqlite).await;
    let mut config = test_config(&db.url);
    config.listen = "0.0.0.0:8080".into();
    let app = TestApp::start_with(config).await;
    assert!(!app.auth.local_dev());
    let anonymous = app.post_run("demo", &first_run("th-anon", "r-1", "hi")).await;
    assert_eq!(status_and_code(anonymous).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await.audit, 0);
}

fn load_with(identity_providers: &str) -> Result<Config, agui_gateway::config::ConfigError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!("{TEST_CONFIG}\n{identity_providers}")).expect("write config");
    Config::load(Some(&path), std::iter::empty())
}

#[test]
fn with_two_tenants_an_identity_provider_must_name_the_tenants_it_speaks_for() {
    let unbound = rsa_provider().replace("tenants = [\"acme\", \"default\"]\n", "");
    let error = load_with(&unbound).expect_err("a provider without tenants is refused");
    let message = error.to_string();
    assert!(message.contains("identity provider 'corp'") && message.contains("tenants = ["), "{message}");
    let unknown = rsa_provider().replace("[\"acme\", \"default\"]", "[\"acme\", \"nowhere\"]");
    let error = load_with(&unknown).expect_err("an unknown tenant is refused");
    assert!(error.to_string().contains("'corp' names unknown tenant 'nowhere'"), "{error}");
    load_with(&rsa_provider()).expect("a bound provider loads");
}

const PARTNER_ISSUER: &str = "https://partner.test/";

/// `corp` speaks for acme, `partner` (an Ed25519 key) for default.
fn two_bound_providers() -> String {
    let corp = rsa_provider().replace("[\"acme\", \"default\"]", "[\"acme\"]");
    format!(
        "{corp}\n[[auth.identity_providers]]\nname = \"partner\"\nissuer = \"{PARTNER_ISSUER}\"\n\
         audience = [\"agui-gateway\"]\npublic_key_file = \"{}\"\nalgorithms = [\"EdDSA\"]\ntenants = [\"default\"]\n",
        fixture("app-ed25519.pub.pem")
    )
}

fn partner_token(tenant: &str, sub: &str) -> String {
    let mut claims = idp_claims(tenant, sub);
    claims["iss"] = json!(PARTNER_ISSUER);
    let pem = std::fs::read(fixture("app-ed25519.pem")).expect("fixture");
    let key = EncodingKey::from_ed_pem(&pem).expect("Ed25519 key");
    jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &key).expect("sign")
}

/// `GET /v1/agents` of `tenant` as `credential` sees it, as JSON.
async fn listed_agents(app: &TestApp, tenant: &str, credential: &str) -> Value {
    let url = app.url(&format!("/v1/agents?tenant={tenant}"));
    let response = app.client.get(url).header("authorization", bearer(credential)).send().await.expect("sent");
    response.json().await.expect("JSON")
}

async fn one_tenants_identity_provider_cannot_assert_another_tenants_people(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = TestApp::start_with(auth_config(&db.url, &two_bound_providers())).await;
    let agents = |tenant: &str, token: String| {
        let request = app
            .client
            .get(app.url(&format!("/v1/agents?tenant={tenant}")))
            .header("authorization", bearer(&token))
            .send();
        async move { status_and_code(request.await.expect("sent")).await }
    };
    assert_eq!(agents("default", partner_token("default", "kim")).await.0, 200, "partner speaks for default");
    assert_eq!(agents("acme", idp_token(&idp_claims("acme", "kim"))).await.0, 200, "corp speaks for acme");

    let (app_key, _) = new_key(&app, "acme", &["*"], KeyKind::App).await;
    let before = app.counts().await;
    let failures_before = app.auth.failure_count("acme");
    let forged = partner_token("acme", "ceo-of-acme");
    let run = post(&app, "demo", "acme", &first_run("th-forged", "r-1", "hi"), Some(&bearer(&forged)), &[]).await;
    assert_eq!(status_and_code(run).await, (401, "unauthenticated".to_string()), "partner asserting an acme person");
    assert_eq!(agents("acme", forged.clone()).await, (401, "unauthenticated".to_string()));
    let (status, code, message) = status_code_and_message(exchange_subject(&app, &app_key, &forged).await).await;
    assert_eq!((status, code.as_str()), (400, "invalid_grant"), "{message}");
    assert!(message.contains("does not speak for the tenant"), "{message}");
    assert_eq!(app.auth.failure_count("acme"), failures_before + 3);
    // corp is acme's only: its tokens naming default are refused as well.
    let corp_default = idp_token(&idp_claims("default", "kim"));
    assert_eq!(agents("default", corp_default).await, (401, "unauthenticated".to_string()));
    assert_eq!(app.counts().await, before, "nothing written, no token.exchange row");
}
on_both_stores!(one_tenants_identity_provider_cannot_assert_another_tenants_people);

/// The `tenant` and `agent` parameters' values in `GET /openapi.json`, as the caller sees them.
async fn documented_names(app: &TestApp, authorization: Option<&str>) -> (Value, Value, String) {
    let mut request = app.client.get(app.url("/openapi.json"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await.expect("sent");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("text");
    let document: Value = serde_json::from_str(&text).expect("JSON");
    let parameter = |path: &str, method: &str, name: &str| {
        document["paths"][path][method]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .map(|p| p["schema"]["enum"].clone())
            .unwrap_or(Value::Null)
    };
    let agents = parameter("/v1/agui/agents/{agent}", "post", "agent");
    let tenants = parameter("/v1/agents", "get", "tenant");
    (agents, tenants, text)
}

#[tokio::test]
async fn the_openapi_document_names_tenants_and_agents_only_to_a_caller_and_only_its_own() {
    let (app, _db) = secured(Backend::Sqlite).await;
    // Anonymous, or with a refused credential: no tenant, no agent.
    for authorization in [None, Some("Bearer not-a-token")] {
        let (agents, tenants, text) = documented_names(&app, authorization).await;
        assert_eq!((agents, tenants), (Value::Null, Value::Null), "{authorization:?}");
        assert!(!text.contains("acme") && !text.contains("approver"), "{authorization:?} learns names");
    }
    // A caller sees its own tenant and the agents it may start there.
    let alice = app_token(&claims("acme", "alice"));
    let (agents, tenants, _) = documented_names(&app, Some(&bearer(&alice))).await;
    assert_eq!(tenants, json!(["acme"]));
    assert!(agents.as_array().is_some_and(|a| a.contains(&json!("demo")) && a.contains(&json!("approver"))));
    let (key, _) = new_key(&app, "acme", &["demo"], KeyKind::Tenant).await;
    let (agents, tenants, _) = documented_names(&app, Some(&bearer(&key))).await;
    assert_eq!((agents, tenants), (json!(["demo"]), json!(["acme"])));

    // The local person of development mode sees everything.
    let db = TestDatabase::new(Backend::Sqlite).await;
    let local = TestApp::start(&db.url).await;
    let (_, tenants, _) = documented_names(&local, None).await;
    assert_eq!(tenants, json!(["default", "acme"]));
}

/// The JWKS is read from the configured URL only: a redirect elsewhere is not followed.
#[tokio::test]
async fn a_jwks_url_that_redirects_is_not_followed() {
    use axum::http::{header::LOCATION, StatusCode};
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
    let jwks = json!({ "keys": [{ "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA", "kid": "k",
                                  "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()) }] })
    .to_string();
    let signing = EncodingKey::from_ed_der(pkcs8.as_ref());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        let app = axum::Router::new()
            .route("/jwks.json", axum::routing::get(move || async move { jwks }))
            .route("/moved", axum::routing::get(|| async { (StatusCode::FOUND, [(LOCATION, "/jwks.json")]) }));
        let _ = axum::serve(listener, app).await;
    });
    let provider = |name: &str, issuer: &str, path: &str| {
        format!(
            "[[auth.identity_providers]]\nname = \"{name}\"\nissuer = \"{issuer}\"\naudience = [\"agui-gateway\"]\n\
             jwks_url = \"http://{address}{path}\"\nallow_insecure_http = true\nalgorithms = [\"EdDSA\"]\ntenants = [\"acme\"]\n"
        )
    };
    let providers = format!(
        "{}\n{}",
        provider("direct", "https://direct.test/", "/jwks.json"),
        provider("moved", "https://moved.test/", "/moved")
    );
    let db = TestDatabase::new(Backend::Sqlite).await;
    let app = TestApp::start_with(auth_config(&db.url, &providers)).await;
    let status = |issuer: &str| {
        let mut claims = idp_claims("acme", "lee");
        claims["iss"] = json!(issuer);
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("k".into());
        let token = jsonwebtoken::encode(&header, &claims, &signing).expect("sign");
        let request = app.client.get(app.url("/v1/agents?tenant=acme")).header("authorization", bearer(&token)).send();
        async move { request.await.expect("sent").status().as_u16() }
    };
    assert_eq!(status("https://direct.test/").await, 200, "the keys at the configured URL are used");
    assert_eq!(status("https://moved.test/").await, 401, "the keys behind a redirect are not");
    server.abort();
}

/// An interrupt id is found only within the caller's tenant: a person of another tenant who
/// learns the id can neither decide the interrupt nor learn that it exists, and it stays open
/// for its own tenant.
async fn another_tenants_interrupt_cannot_be_decided(backend: Backend) {
    let (app, _db) = secured(backend).await;
    let alice = bearer(&app_token(&claims("acme", "alice")));
    let response = post(&app, "approver", "acme", &first_run("th-int", "r-1", "please"), Some(&alice), &[]).await;
    assert_eq!(response.status(), 200);
    let events = EventStream::new(response).rest().await;
    let last = events.last().expect("events");
    assert_eq!(last.data["outcome"]["type"], "interrupt", "{}", last.data);
    let id = last.data["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt id").to_string();
    let decide = |tenant: &'static str, token: String| {
        app.client
            .post(app.url(&format!("/v1/interrupts/{id}/decision?tenant={tenant}")))
            .header("authorization", bearer(&token))
            .json(&json!({"status": "resolved", "payload": {"approved": true}}))
            .send()
    };
    let before = app.counts().await;
    let foreign = decide("default", app_token(&claims("default", "alice"))).await.expect("decision route");
    assert_eq!(status_and_code(foreign).await, (403, "permission_denied".to_string()));
    assert_eq!(app.counts().await, before, "nothing was recorded");
    let row = app.store.find_interrupt("acme", &id).await.expect("query").expect("the interrupt");
    assert_eq!(row.status.as_str(), "open");
    // Its own tenant decides it.
    let own = decide("acme", app_token(&claims("acme", "alice"))).await.expect("decision route");
    assert_eq!(own.status(), 200);
}
on_both_stores!(another_tenants_interrupt_cannot_be_decided);
