//! Who is let in (SPEC §2.1–2.2): the security matrix of refused callers (each with its status
//! and code, none writing anything), every kind of credential starting a run and named in the
//! audit trail, one thread id in two tenants, and a refused request answered before its body
//! is read.

use super::*;

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
    assert!(keys::revoke(app.store.as_ref(), app.auth.clock().as_ref(), "acme", &revoked_id, "test")
        .await
        .expect("revoke"));
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
    // Signed well with the app token secret, but its header names an extension it must be
    // understood by (RFC 7515 §4.1.11): the gateway understands none.
    let critical = {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","crit":["exp-ext"],"exp-ext":true}"#),
            URL_SAFE_NO_PAD.encode(claims("acme", "alice").to_string())
        );
        let key = EncodingKey::from_secret(SECRET.as_bytes());
        let signature = jsonwebtoken::crypto::sign(signed.as_bytes(), &key, Algorithm::HS256).expect("sign");
        format!("{signed}.{signature}")
    };
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
            "an unknown critical extension",
            "demo",
            "acme",
            Some(bearer(&critical)),
            fresh("th-3c"),
            401,
            "unauthenticated",
        ),
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
// One store: refused before any store is read.
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
