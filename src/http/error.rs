//! [`ApiError`]: every error that ends a request before its stream opens, mapped in this one
//! place to an HTTP status and an [`ErrorCode`], and answered with the one body
//! [`ErrorBody`], `{"error": {"code", "message"}}` (§2.4), which `GET /openapi.json` documents.
//! The lower layers' errors (engine, store, auth, minting) convert with `From`, so handlers use
//! `?`; a 500 keeps its cause, which is logged with its whole chain of sources and never shown.

use std::collections::BTreeMap;

use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::openapi::{Content, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoResponses, ToSchema};

use crate::auth::{AuthError, MintError};
use crate::engine::EngineError;
use crate::store::StoreError;

/// Every error before a stream opens (§2.4): a stable `code` for programs, a `message` for
/// people.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// For people; may change.
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorBody {
        ErrorBody { error: ErrorDetail { code, message: message.into() } }
    }
}

pub use crate::protocol::ErrorCode;

/// A refusal as OpenAPI documents it: its status and what it means; its body is [`ErrorBody`].
pub(crate) type Refusal = (u16, &'static str);

// The refusals more than one route answers, each worded once.
pub(crate) const UNAUTHENTICATED: Refusal = (401, "no valid credential (`unauthenticated`)");
pub(crate) const UNKNOWN_TENANT: Refusal = (404, "unknown tenant (`not_found`)");
pub(crate) const UNKNOWN_AGENT: Refusal = (404, "unknown tenant or agent (`not_found`)");
pub(crate) const INTERNAL: Refusal = (500, "internal error (`internal`); the cause is logged");
pub(crate) const BODY_TIMEOUT: Refusal =
    (408, "the body did not arrive within `limits.body_read_timeout_secs` (`request_timeout`)");
pub(crate) const TOO_MANY_STREAMS: Refusal = (429, "too many open streams (`too_many_streams`)");
pub(crate) const BAD_THREAD_ID: Refusal = (400, "the thread id is malformed (`bad_request`)");
pub(crate) const NOT_THEIRS: Refusal =
    (403, "the caller may not do this, or the thread is not theirs (`permission_denied`)");

/// The responses a route's OpenAPI operation lists, by status.
pub(crate) type Responses = BTreeMap<String, RefOr<utoipa::openapi::Response>>;

/// The responses of a set of refusals, each with the error body: what a route's
/// `responses(…)` lists by the name of a set ([`TenantRefusals`], …), so one refusal is worded
/// once for every route that answers it.
pub(crate) fn documented(refusals: &[Refusal]) -> Responses {
    let body = Content::new(Some(Ref::from_schema_name(ErrorBody::name())));
    let response =
        |description: &str| ResponseBuilder::new().description(description).content("application/json", body.clone());
    refusals.iter().map(|(status, description)| (status.to_string(), response(description).build().into())).collect()
}

/// The refusals every tenant route answers: a route lists them with `TenantRefusals` beside
/// its own.
pub(crate) struct TenantRefusals;

impl IntoResponses for TenantRefusals {
    fn responses() -> Responses {
        documented(&[UNAUTHENTICATED, UNKNOWN_TENANT, INTERNAL])
    }
}

/// The refusals of a tenant route open to whoever may read threads (`threads:read`).
pub(crate) struct ReadRefusals;

impl IntoResponses for ReadRefusals {
    fn responses() -> Responses {
        let may_not_read = (403, "the caller may not read threads (`permission_denied`)");
        documented(&[UNAUTHENTICATED, may_not_read, UNKNOWN_TENANT, INTERNAL])
    }
}

/// What a route of one thread refuses: a malformed thread id, no valid credential, `forbidden`
/// (the caller may not, or the thread is not theirs, answered alike), an unknown tenant, and an
/// internal error.
pub(crate) fn thread_refusals(forbidden: Refusal) -> Responses {
    documented(&[BAD_THREAD_ID, UNAUTHENTICATED, forbidden, UNKNOWN_TENANT, INTERNAL])
}

/// The refusals every route of one thread answers: [`TenantRefusals`], a malformed thread id,
/// and a thread the caller may not see (answered as one that does not exist would be).
pub(crate) struct ThreadRefusals;

impl IntoResponses for ThreadRefusals {
    fn responses() -> Responses {
        thread_refusals(NOT_THEIRS)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400, with a code: `bad_request` (naming the field), `unsupported_content`,
    /// `tool_not_admitted`, `bad_last_event_id`.
    #[error("{message}")]
    BadRequest { code: ErrorCode, message: String },
    /// 401 `unauthenticated`.
    #[error(transparent)]
    Unauthenticated(AuthError),
    /// 403 `permission_denied`: says nothing about whether the thing exists.
    #[error("permission denied")]
    PermissionDenied,
    /// 403 `permission_denied` with a reason that reveals nothing (only a person decides).
    #[error("{0}")]
    Forbidden(String),
    /// A decision the checks of §5.3 refused: 403 for `not_a_decider`, else 409, with the code.
    #[error("{message}")]
    DecisionRefused { code: ErrorCode, message: String },
    /// 400 with an RFC 6749 code (`invalid_request`, `unsupported_grant_type`, `invalid_grant`):
    /// the token exchange's own errors.
    #[error("{message}")]
    Grant { code: ErrorCode, message: String },
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 405 `method_not_allowed`.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 406 `not_acceptable`: the answer is `text/event-stream` or the AG-UI binary transport.
    #[error(
        "this route answers text/event-stream or application/vnd.ag-ui.event+proto; the Accept header names neither"
    )]
    NotAcceptable,
    /// 409, with a code (`not_running`, `turn_in_progress`).
    #[error("{message}")]
    Conflict { code: ErrorCode, message: String },
    /// 408 `request_timeout`: the body did not arrive within `limits.body_read_timeout_secs`.
    #[error("the request body did not arrive within {secs} s")]
    RequestTimeout { secs: u64 },
    /// 413 `payload_too_large`.
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// 413 `payload_too_large`: content parts of a user message past `limits.max_content_part_bytes`
    /// or `limits.max_content_bytes` (the message names the part).
    #[error("{0}")]
    ContentTooLarge(String),
    /// 415 `unsupported_media_type`.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 429, with a code (`too_many_streams`).
    #[error("{message}")]
    TooMany { code: ErrorCode, message: String },
    /// 503 `unavailable`.
    #[error("{0}")]
    Unavailable(String),
    /// 500 `internal`: the cause is logged, the client sees an opaque message.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    pub fn bad_request(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest { code: ErrorCode::BadRequest, message: format!("{field}: {message}") }
    }

    fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match *self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated),
            ApiError::PermissionDenied | ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::PermissionDenied),
            ApiError::DecisionRefused { code: ErrorCode::NotADecider, .. } => {
                (StatusCode::FORBIDDEN, ErrorCode::NotADecider)
            }
            ApiError::DecisionRefused { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::Grant { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed),
            ApiError::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, ErrorCode::NotAcceptable),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::RequestTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, ErrorCode::RequestTimeout),
            ApiError::PayloadTooLarge { .. } | ApiError::ContentTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, ErrorCode::UnsupportedMediaType),
            ApiError::TooMany { code, .. } => (StatusCode::TOO_MANY_REQUESTS, code),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> ApiError {
        match error {
            EngineError::PermissionDenied => ApiError::PermissionDenied,
            EngineError::BadLastEventId(_) => {
                ApiError::BadRequest { code: ErrorCode::BadLastEventId, message: error.to_string() }
            }
            EngineError::BadRequest { .. } | EngineError::BadState { .. } => {
                ApiError::BadRequest { code: ErrorCode::BadRequest, message: error.to_string() }
            }
            EngineError::NotFound(message) => ApiError::NotFound(message),
            EngineError::NotRunning(message) => ApiError::Conflict { code: ErrorCode::NotRunning, message },
            EngineError::TurnInProgress(message) => ApiError::Conflict { code: ErrorCode::TurnInProgress, message },
            EngineError::PersonOnly(_) => ApiError::Forbidden(error.to_string()),
            EngineError::DecisionRefused(refusal) => {
                ApiError::DecisionRefused { code: refusal.code, message: refusal.message }
            }
            EngineError::Store(error) => ApiError::from(error),
            EngineError::Bus(error) => ApiError::Internal(Box::new(error)),
            error @ (EngineError::Unreadable { .. } | EngineError::Encoding { .. }) => {
                ApiError::Internal(Box::new(error))
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        ApiError::Internal(Box::new(error))
    }
}

/// A credential refused is a 401; one that could not be checked (the database failed) a 500.
impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> ApiError {
        match error {
            AuthError::Store(cause) => ApiError::from(cause),
            refused => ApiError::Unauthenticated(refused),
        }
    }
}

impl From<MintError> for ApiError {
    fn from(error: MintError) -> ApiError {
        match error {
            MintError::NoSigningKey => ApiError::Unavailable("this gateway has no signing key for app tokens".into()),
            MintError::Sign(_) => ApiError::Internal(Box::new(error)),
        }
    }
}

pub(crate) use crate::telemetry::error_chain;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(cause) = &self {
            let cause: &(dyn std::error::Error + 'static) = cause.as_ref();
            tracing::error!(error = %cause, chain = %error_chain(cause), "request failed");
        }
        let mut response = (status, Json(ErrorBody::new(code, self.to_string()))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Every refusal carries the JSON error body (§2.4), those made outside [`ApiError`] too (an
/// extractor's or a layer's plain-text rejection): a refusal that is not JSON is rewritten with
/// the code its status stands for and its text as the message. Its other headers stay.
pub(crate) async fn json_refusals(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Rejection texts are a line; anything longer is cut rather than held.
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let message = match text {
        Ok(text) if !text.is_empty() => text,
        _ => status.canonical_reason().unwrap_or("refused").to_string(),
    };
    let code = match status {
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::REQUEST_TIMEOUT => ErrorCode::RequestTimeout,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::TooManyRequests,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        status if status.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
    };
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Serialising a code and a string cannot fail; were it to, the body would still be JSON.
    let body = serde_json::to_vec(&ErrorBody::new(code, message))
        .unwrap_or_else(|_| br#"{"error":{"code":"internal","message":"internal error"}}"#.to_vec());
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("the disk is full")]
    struct DiskFull;

    #[derive(Debug, thiserror::Error)]
    #[error("writing the log failed")]
    struct WriteFailed(#[source] DiskFull);

    #[test]
    fn the_chain_names_every_source_once() {
        assert_eq!(error_chain(&WriteFailed(DiskFull)), "writing the log failed: the disk is full");
        // `#[error("database error: {0}")]` already shows its source: it is not repeated.
        let store = StoreError::Database(sqlx::Error::PoolTimedOut);
        assert_eq!(error_chain(&store), store.to_string());
    }

    #[tokio::test]
    async fn a_plain_text_refusal_is_given_the_json_error_body() {
        let plain = (StatusCode::PAYLOAD_TOO_LARGE, "Failed to buffer the request body").into_response();
        let rewritten = json_refusals(plain).await;
        assert_eq!(rewritten.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(rewritten.headers()[CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(rewritten.into_body(), 4096).await.expect("body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["error"]["code"], "payload_too_large");
        assert_eq!(body["error"]["message"], "Failed to buffer the request body");

        let ok = json_refusals((StatusCode::OK, "fine").into_response()).await;
        assert_eq!(ok.headers()[CONTENT_TYPE], "text/plain; charset=utf-8", "a success is left alone");
    }

    #[test]
    fn lower_layers_errors_map_to_their_statuses() {
        let internal = ApiError::from(AuthError::Store(StoreError::Corrupt("a bad row".into())));
        assert_eq!(internal.status_and_code(), (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal));
        let ApiError::Internal(cause) = &internal else { panic!("{internal:?}") };
        assert_eq!(error_chain(cause.as_ref()), "stored data is inconsistent: a bad row", "the cause is kept");
        assert_eq!(internal.to_string(), "internal error", "the client sees no cause");

        let refused = ApiError::from(AuthError::UnknownKey);
        assert_eq!(refused.status_and_code(), (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated));
        let engine = ApiError::from(EngineError::Store(StoreError::Corrupt("x".into())));
        assert_eq!(engine.status_and_code(), (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal));
        let unsigned = ApiError::from(MintError::NoSigningKey);
        assert_eq!(unsigned.status_and_code(), (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable));
    }

    #[test]
    fn the_error_body_is_the_code_and_the_message() {
        let body =
            serde_json::to_string(&ErrorBody::new(ErrorCode::BadLastEventId, "Last-Event-ID: \"x\"")).expect("JSON");
        assert_eq!(body, r#"{"error":{"code":"bad_last_event_id","message":"Last-Event-ID: \"x\""}}"#);
        for (code, spelled) in [
            (ErrorCode::TooManyStreams, "too_many_streams"),
            (ErrorCode::UnsupportedGrantType, "unsupported_grant_type"),
            (ErrorCode::NotADecider, "not_a_decider"),
        ] {
            assert_eq!(serde_json::to_value(code).expect("JSON"), spelled);
        }
    }

    #[test]
    fn a_refused_decision_has_the_status_of_its_code() {
        for code in ErrorCode::EVERY {
            let refused = ApiError::DecisionRefused { code, message: String::new() };
            let status = if code == ErrorCode::NotADecider { StatusCode::FORBIDDEN } else { StatusCode::CONFLICT };
            assert_eq!(refused.status_and_code(), (status, code));
        }
    }
}
