//! Reading a request body, the one way every route does: never more than its limit (413
//! `payload_too_large`, refused as soon as the body grows past it, never buffered whole) and
//! never for longer than `limits.body_read_timeout_secs` (408 `request_timeout`), so a client
//! trickling a body a byte at a time cannot hold a request open.
//!
//! A JSON body is looked over before it is parsed ([`check_json`]), in one pass over its bytes
//! that allocates nothing: its count of values is bounded (`limits.max_json_values`: a parsed
//! value costs tens of bytes, a one-member object hundreds, however short its text), and text
//! PostgreSQL cannot store — the NUL character, which JSON can only write as `\u0000` — is
//! refused with a 400 naming the field, on either store, rather than failing in the database.

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;
use super::state::AppState;

/// The body within `limits.max_body_bytes` and `limits.body_read_timeout_secs`.
pub async fn read_body(state: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let limits = &state.config.limits;
    read_limited(body, limits.max_body_bytes, body_timeout(state)).await
}

/// `limits.body_read_timeout_secs`.
pub fn body_timeout(state: &AppState) -> Duration {
    Duration::from_secs(state.config.limits.body_read_timeout_secs)
}

/// The whole body, at most `limit` bytes, arrived within `timeout`.
pub async fn read_limited(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(ApiError::RequestTimeout { secs: timeout.as_secs() }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::PayloadTooLarge { limit })
        }
        Ok(Err(error)) => Err(ApiError::bad_request("body", format!("could not be read: {error}"))),
    }
}

/// The body as [`read_body`] reads it, looked over by [`check_json`].
pub async fn read_json_body(state: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let bytes = read_body(state, body).await?;
    check_json(&bytes, state.config.limits.max_json_values)?;
    Ok(bytes)
}

/// Refuses a body of more than `max_values` JSON values, or with a NUL character in any string
/// (naming the field). Malformed JSON passes: the parser that follows names what is wrong.
pub fn check_json(bytes: &[u8], max_values: usize) -> Result<(), ApiError> {
    let shape = scan(bytes);
    if shape.values > max_values {
        return Err(ApiError::bad_request(
            "body",
            format!("holds more than {max_values} JSON values (limits.max_json_values)"),
        ));
    }
    if shape.nul {
        // Rare: the body is parsed once more only to name the field.
        if let Some(path) = serde_json::from_slice::<serde_json::Value>(bytes).ok().and_then(|v| nul_path(&v, "")) {
            return Err(nul_refusal(&path));
        }
    }
    Ok(())
}

/// Refuses `text` when it holds a NUL character, naming `field`.
pub fn check_text(field: &str, text: &str) -> Result<(), ApiError> {
    match text.contains('\0') {
        true => Err(nul_refusal(field)),
        false => Ok(()),
    }
}

fn nul_refusal(field: &str) -> ApiError {
    ApiError::bad_request(field, "holds a NUL character (\\u0000), which the gateway does not store")
}

/// What one pass over a JSON text tells: how many values it holds (objects, arrays, strings —
/// keys included —, numbers, literals) and whether a string escapes a NUL.
#[derive(Debug, Default, PartialEq)]
struct Shape {
    values: usize,
    nul: bool,
}

fn scan(bytes: &[u8]) -> Shape {
    let mut shape = Shape::default();
    // The last byte outside strings and whitespace: a scalar starts a value only after one of
    // these (or at the start).
    let mut previous = b'[';
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        match byte {
            b'"' => {
                shape.values += 1;
                index += 1;
                while index < bytes.len() && bytes[index] != b'"' {
                    if bytes[index] == b'\\' {
                        if bytes.get(index + 1) == Some(&b'u') && bytes.get(index + 2..index + 6) == Some(b"0000") {
                            shape.nul = true;
                        }
                        index += 1;
                    }
                    index += 1;
                }
                previous = b'"';
            }
            b'{' | b'[' => {
                shape.values += 1;
                previous = byte;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                if matches!(previous, b'[' | b',' | b':') {
                    shape.values += 1;
                }
                previous = byte;
            }
            _ => previous = byte,
        }
        index += 1;
    }
    shape
}

/// The path (`messages[0].content`) of the first string or key holding a NUL.
fn nul_path(value: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(text) if text.contains('\0') => Some(if path.is_empty() { "body".into() } else { path.into() }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| nul_path(item, &format!("{path}[{i}]"))),
        Value::Object(members) => members.iter().find_map(|(key, member)| {
            let inner = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            match key.contains('\0') {
                true => Some(inner),
                false => nul_path(member, &inner),
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    #[tokio::test]
    async fn a_body_past_its_limit_or_its_time_is_refused() {
        let read = read_limited(Body::from("12345"), 5, Duration::from_secs(1)).await.expect("fits");
        assert_eq!(&read[..], b"12345");

        let refused = read_limited(Body::from("123456"), 5, Duration::from_secs(1)).await.expect_err("too large");
        assert_eq!(refused.into_response().status(), StatusCode::PAYLOAD_TOO_LARGE);

        // A body that never ends.
        let stalled = Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
        let refused = read_limited(stalled, 5, Duration::from_millis(50)).await.expect_err("too slow");
        assert_eq!(refused.into_response().status(), StatusCode::REQUEST_TIMEOUT);
    }

    #[test]
    fn the_scan_counts_values_and_finds_escaped_nuls() {
        assert_eq!(scan(br#"{"a":[1,-2,true,null,"x"],"b":{}}"#), Shape { values: 10, nul: false });
        assert_eq!(scan(br#"[1e5, 2.5, false]"#).values, 4);
        assert!(scan(br#"{"a":"x\u0000y"}"#).nul);
        // An escaped backslash followed by the letters: no NUL.
        assert!(!scan(br#"{"a":"x\\u0000y"}"#).nul);
        assert!(!scan(br#"{"a":"\"u0000"}"#).nul);
    }

    #[test]
    fn a_nul_is_refused_naming_its_field() {
        let body = br#"{"threadId":"t","messages":[{"id":"u","content":"a\u0000b"}]}"#;
        let refused = check_json(body, 1000).expect_err("refused").to_string();
        assert!(refused.starts_with("messages[0].content: holds a NUL"), "{refused}");
        let refused = check_json(br#"{"state":{"k\u0000":1}}"#, 1000).expect_err("refused").to_string();
        assert!(refused.starts_with("state.k\u{0}"), "{refused}");
        assert!(check_json(br#"{"a":"fine"}"#, 1000).is_ok());
    }

    #[test]
    fn too_many_values_are_refused() {
        // The array and its 100 numbers.
        let body = format!("[{}0]", "0,".repeat(99));
        assert!(check_json(body.as_bytes(), 101).is_ok());
        let refused = check_json(body.as_bytes(), 100).expect_err("refused").to_string();
        assert!(refused.contains("limits.max_json_values"), "{refused}");
    }
}
