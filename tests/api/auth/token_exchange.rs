//! Token exchange (RFC 8693, SPEC §2.2): an app acts for a person until its key is revoked; the
//! exchanged token holds only the scopes both sides hold; a token stating no scope reaches
//! nothing.

use super::*;

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
    assert!(keys::revoke(app.store.as_ref(), app.auth.clock().as_ref(), "acme", &app_key_id, "cli")
        .await
        .expect("revoke"));
    let events = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("ended in 5 s").expect("reader");
    assert_eq!(events.last().map(|e| e.data["code"].clone()), Some(json!("revoked")));
    let after = post(&app, "demo", "acme", &first_run("th-erin-3", "r-1", "hi"), Some(&bearer(&token)), &[]).await;
    assert_eq!(status_and_code(after).await, (401, "unauthenticated".to_string()));
}
on_both_stores!(an_app_exchanges_a_persons_token_and_acts_for_them_until_its_key_is_revoked);

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
