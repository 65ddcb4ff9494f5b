//! [`ApiError`]: every error that ends a request before its stream opens, mapped in this one
//! place to an HTTP status and the body `{"error": {"code", "message"}}` (§2.4).

use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::AuthError;
use crate::engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400, with a code: `bad_request` (naming the field), `unsupported_content`,
    /// `tool_not_admitted`, `bad_last_event_id`.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// 401 `unauthenticated`.
    #[error(transparent)]
    Unauthenticated(#[from] AuthError),
    /// 403 `permission_denied`: says nothing about whether the thing exists.
    #[error("permission denied")]
    PermissionDenied,
    /// 403 `permission_denied` with a reason that reveals nothing (only a person decides).
    #[error("{0}")]
    Forbidden(String),
    /// A decision the checks of §5.3 refused: 403 for `not_a_decider`, else 409, with the code.
    #[error("{message}")]
    DecisionRefused { code: &'static str, message: String },
    /// 400 with an RFC 6749 code (`invalid_request`, `unsupported_grant_type`, `invalid_grant`):
    /// the token exchange's own errors.
    #[error("{message}")]
    Grant { code: &'static str, message: String },
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 405 `method_not_allowed`.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 406 `not_acceptable`: the answer is always `text/event-stream`.
    #[error("this route answers only text/event-stream; the Accept header rules it out")]
    NotAcceptable,
    /// 409, with a code (`not_running`).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// 413 `payload_too_large`.
    #[error("the request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// 415 `unsupported_media_type`.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 429, with a code (`too_many_streams`).
    #[error("{message}")]
    TooMany { code: &'static str, message: String },
    /// 503 `unavailable`.
    #[error("{0}")]
    Unavailable(String),
    /// 500 `internal`: the cause is logged, the client sees an opaque message.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    pub fn bad_request(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest { code: "bad_request", message: format!("{field}: {message}") }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::PermissionDenied | ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "permission_denied"),
            ApiError::DecisionRefused { code: "not_a_decider", .. } => (StatusCode::FORBIDDEN, "not_a_decider"),
            ApiError::DecisionRefused { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::Grant { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, "not_acceptable"),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::TooMany { code, .. } => (StatusCode::TOO_MANY_REQUESTS, code),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> ApiError {
        match error {
            EngineError::PermissionDenied => ApiError::PermissionDenied,
            EngineError::BadLastEventId(_) => {
                ApiError::BadRequest { code: "bad_last_event_id", message: error.to_string() }
            }
            EngineError::BadRequest { .. } => ApiError::BadRequest { code: "bad_request", message: error.to_string() },
            EngineError::NotFound(message) => ApiError::NotFound(message),
            EngineError::NotRunning(message) => ApiError::Conflict { code: "not_running", message },
            EngineError::PersonOnly(_) => ApiError::Forbidden(error.to_string()),
            EngineError::DecisionRefused(refusal) => {
                ApiError::DecisionRefused { code: refusal.code.as_str(), message: refusal.message }
            }
            EngineError::Store(error) => ApiError::Internal(Box::new(error)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(cause) = &self {
            tracing::error!(error = %cause, "request failed");
        }
        let mut response =
            (status, Json(json!({ "error": { "code": code, "message": self.to_string() } }))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
