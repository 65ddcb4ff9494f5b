//! The console (`/console/`, docs/console.md): a small web page, built into the binary, where a
//! person sees what waits for them to decide and decides it, and reads their threads. It is
//! static: it holds no data and needs no caller, and everything it shows it reads from the
//! gateway's public API with the person's own credential, so it never shows more than the API
//! would give that person.
//!
//! Served with a strict Content-Security-Policy (its own script and style only, no inline code,
//! no other origin; it may connect to this origin alone), and revalidated on every load
//! (`no-cache` with an `ETag`), so a new binary's console is picked up at once and an unchanged
//! one costs a `304`. `console = false` serves none of it.

use std::sync::OnceLock;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION, REFERRER_POLICY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::state::AppState;

/// The page's files: path under `/console/`, media type, contents.
const ASSETS: &[(&str, &str, &str)] = &[
    ("", "text/html; charset=utf-8", include_str!("console/index.html")),
    ("console.js", "text/javascript; charset=utf-8", include_str!("console/console.js")),
    ("console.css", "text/css; charset=utf-8", include_str!("console/console.css")),
];

/// Nothing but the page's own files; no inline script or style, no frame, no form target, and
/// requests to this origin only (the API it reads).
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The console's routes, when the configuration serves it.
pub fn router(enabled: bool) -> Router<AppState> {
    if !enabled {
        return Router::new();
    }
    let mut router = Router::new().route("/console", get(to_the_console));
    for (index, (name, _, _)) in ASSETS.iter().enumerate() {
        router = router.route(&format!("/console/{name}"), get(move |headers: HeaderMap| serve(index, headers)));
    }
    router
}

/// `/console` → `/console/`, so the page's relative paths resolve under it.
async fn to_the_console() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(LOCATION, HeaderValue::from_static("/console/"))]).into_response()
}

async fn serve(index: usize, headers: HeaderMap) -> Response {
    let Some((_, media_type, body)) = ASSETS.get(index) else { return StatusCode::NOT_FOUND.into_response() };
    let etag = &etags()[index];
    let mut response = match headers.get(IF_NONE_MATCH).is_some_and(|tags| matches(tags, etag)) {
        true => StatusCode::NOT_MODIFIED.into_response(),
        false => ([(CONTENT_TYPE, HeaderValue::from_static(media_type))], *body).into_response(),
    };
    let answer = response.headers_mut();
    answer.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        answer.insert(ETAG, value);
    }
    answer.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE));
    answer.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answer.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    answer.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// Whether an `If-None-Match` names this tag (or `*`).
fn matches(tags: &HeaderValue, etag: &str) -> bool {
    let Ok(tags) = tags.to_str() else { return false };
    tags.split(',').map(str::trim).any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

/// Each file's strong `ETag`: a digest of its contents, computed once.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| ASSETS.iter().map(|(_, _, body)| format!("\"{:016x}\"", fnv1a(body.as_bytes()))).collect())
}

/// FNV-1a, 64 bits: enough to tell one build's file from another's (not a security measure).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_matches_itself_weak_or_listed_and_not_another() {
        let tag = "\"00000000000000ab\"";
        assert!(matches(&HeaderValue::from_static("\"00000000000000ab\""), tag));
        assert!(matches(&HeaderValue::from_static("W/\"00000000000000ab\""), tag));
        assert!(matches(&HeaderValue::from_static("\"x\", \"00000000000000ab\""), tag));
        assert!(matches(&HeaderValue::from_static("*"), tag));
        assert!(!matches(&HeaderValue::from_static("\"00000000000000ac\""), tag));
    }

    #[test]
    fn the_page_loads_its_own_script_and_style_and_nothing_inline() {
        let (_, _, html) = ASSETS[0];
        assert!(html.contains("src=\"console.js\""), "the script");
        assert!(html.contains("href=\"console.css\""), "the style");
        assert!(!html.contains("<script>") && !html.contains("style="), "nothing inline (the CSP refuses it)");
        assert!(!html.contains("http://") && !html.contains("https://"), "no other origin");
    }
}
