//! The one set of error codes, for programs: the `code` of an HTTP error body (§2.4) and of a
//! stream's `RUN_ERROR`, the same words for the same refusal on either. The status each stands
//! for is chosen in `http/error.rs` only; the engine names its refusals and a turn's end by them.

use serde::Serialize;
use utoipa::ToSchema;

/// A stable error code; its spelling on the wire is the variant's name in snake_case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: a bad body, id or parameter (the message names the field).
    BadRequest,
    /// 400: a message content part the agent cannot take.
    UnsupportedContent,
    /// 400: a client tool the agent does not admit.
    ToolNotAdmitted,
    /// 400: a `Last-Event-ID` that names no place in the run.
    BadLastEventId,
    /// 400, the token exchange (RFC 6749 §5.2): a malformed request.
    InvalidRequest,
    /// 400, the token exchange: a grant type other than token exchange.
    UnsupportedGrantType,
    /// 400, the token exchange: the subject token is refused.
    InvalidGrant,
    /// 401.
    Unauthenticated,
    /// 403: says nothing about whether the thing exists.
    PermissionDenied,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 406: the answer is `text/event-stream` or the AG-UI binary transport.
    NotAcceptable,
    /// 408.
    RequestTimeout,
    /// 409: the turn is not running (cancel).
    NotRunning,
    /// 413.
    PayloadTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 429: the caller's or the thread's stream slots are taken.
    TooManyStreams,
    /// 429 from a layer that refused before a handler ran.
    TooManyRequests,
    /// 503.
    Unavailable,
    /// 500: the cause is logged, never shown.
    Internal,
    /// A stream's `RUN_ERROR` only: the caller's right to read ended while it was open (a
    /// revoked key, an expired token, the thread erased; §2.1).
    Revoked,
    // A run or a decision the checks refused (§4, §5.3, §8), or how a turn failed: the same
    // code as a RUN_ERROR and, on the decision route, as a body (403 for `not_a_decider`, 409
    // for the others).
    HistoryMismatch,
    TurnInProgress,
    InterruptsPending,
    TurnWaiting,
    InvalidResume,
    InterruptChanged,
    InterruptExpired,
    NotADecider,
    InterruptsOpen,
    ConcurrencyLimit,
    QuotaExceeded,
    /// A person's action on generative UI the conversation never showed (§3).
    UnknownSurface,
    /// An MCP App's request (§9.2) naming a server the agent does not configure.
    UnknownMcpServer,
    /// An MCP App's request of a method the gateway does not answer for Apps.
    McpMethodNotAllowed,
    /// An MCP App's `tools/call` of a tool the agent does not list from that server.
    ToolNotListed,
    /// An MCP App's `tools/call` whose arguments the tool's input schema refuses.
    InvalidArguments,
    Failed,
    TimedOut,
}

impl ErrorCode {
    /// Every code, for the tests that check a property of each.
    #[cfg(test)]
    pub(crate) const EVERY: [ErrorCode; 39] = [
        ErrorCode::BadRequest,
        ErrorCode::UnsupportedContent,
        ErrorCode::ToolNotAdmitted,
        ErrorCode::BadLastEventId,
        ErrorCode::InvalidRequest,
        ErrorCode::UnsupportedGrantType,
        ErrorCode::InvalidGrant,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::NotAcceptable,
        ErrorCode::RequestTimeout,
        ErrorCode::NotRunning,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::TooManyStreams,
        ErrorCode::TooManyRequests,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
        ErrorCode::Revoked,
        ErrorCode::HistoryMismatch,
        ErrorCode::TurnInProgress,
        ErrorCode::InterruptsPending,
        ErrorCode::TurnWaiting,
        ErrorCode::InvalidResume,
        ErrorCode::InterruptChanged,
        ErrorCode::InterruptExpired,
        ErrorCode::NotADecider,
        ErrorCode::InterruptsOpen,
        ErrorCode::ConcurrencyLimit,
        ErrorCode::QuotaExceeded,
        ErrorCode::UnknownSurface,
        ErrorCode::UnknownMcpServer,
        ErrorCode::McpMethodNotAllowed,
        ErrorCode::ToolNotListed,
        ErrorCode::InvalidArguments,
        ErrorCode::Failed,
        ErrorCode::TimedOut,
    ];

    /// The code as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnsupportedContent => "unsupported_content",
            ErrorCode::ToolNotAdmitted => "tool_not_admitted",
            ErrorCode::BadLastEventId => "bad_last_event_id",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnsupportedGrantType => "unsupported_grant_type",
            ErrorCode::InvalidGrant => "invalid_grant",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::NotAcceptable => "not_acceptable",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::NotRunning => "not_running",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::Revoked => "revoked",
            ErrorCode::HistoryMismatch => "history_mismatch",
            ErrorCode::TurnInProgress => "turn_in_progress",
            ErrorCode::InterruptsPending => "interrupts_pending",
            ErrorCode::TurnWaiting => "turn_waiting",
            ErrorCode::InvalidResume => "invalid_resume",
            ErrorCode::InterruptChanged => "interrupt_changed",
            ErrorCode::InterruptExpired => "interrupt_expired",
            ErrorCode::NotADecider => "not_a_decider",
            ErrorCode::InterruptsOpen => "interrupts_open",
            ErrorCode::ConcurrencyLimit => "concurrency_limit",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::UnknownSurface => "unknown_surface",
            ErrorCode::UnknownMcpServer => "unknown_mcp_server",
            ErrorCode::McpMethodNotAllowed => "mcp_method_not_allowed",
            ErrorCode::ToolNotListed => "tool_not_listed",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::Failed => "failed",
            ErrorCode::TimedOut => "timed_out",
        }
    }

    /// The code as the wire spells it, owned.
    pub fn spelled(self) -> String {
        self.as_str().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_is_spelled_as_serde_spells_it() {
        for code in ErrorCode::EVERY {
            assert_eq!(serde_json::to_value(code).expect("JSON"), code.as_str());
        }
    }
}
