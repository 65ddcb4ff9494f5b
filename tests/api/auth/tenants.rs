//! Tenants kept apart: an identity provider speaks only for the tenants it names, the OpenAPI
//! document names tenants and agents only to a caller and only its own, and another tenant's
//! interrupt can be neither decided nor found.

use super::*;

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

// One store: the document comes from the configuration and the caller.
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
