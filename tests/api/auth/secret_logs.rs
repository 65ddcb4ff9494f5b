//! Logs that hold no secret (SPEC §8): over a full run with each credential, refused
//! credentials and a token exchange, nothing logged at info level holds a token, a key or
//! message text.

use super::*;

/// §8: logs never contain a token, a key or message text at info level — over a full run
/// with each credential, refused credentials, and a token exchange.
// One store: the log lines are the process's.
#[tokio::test]
async fn the_logs_of_a_full_run_hold_no_token_key_or_message_text() {
    let logs = crate::test_log::captured();
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

    let text = String::from_utf8_lossy(&logs.lock().unwrap_or_else(|p| p.into_inner())).to_string();
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
