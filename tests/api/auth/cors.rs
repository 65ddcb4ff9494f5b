//! CORS (SPEC §8): what a browser does — a preflight passes only from a listed origin, for its
//! own tenant, and nothing is exposed.

use super::*;

/// §8: what a browser does. The preflight from a listed origin is allowed with the three
/// headers; from any other origin, or for another tenant, it is not; nothing is exposed.
// One store: CORS is answered before any store is read.
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
