//! An identity provider's keys (JWKS) over real HTTP: rotation picked up on refresh, a failed
//! refresh keeping the last good keys, and a JWKS URL that redirects not followed.

use super::*;

/// An identity provider's JWKS served over real HTTP, rotated: after the refresh, tokens of the
/// old key fail and tokens of the new key pass; a failed refresh keeps the last good keys.
// One store: the JWKS is the identity provider's.
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

/// The JWKS is read from the configured URL only: a redirect elsewhere is not followed.
// One store: the JWKS is the identity provider's.
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
