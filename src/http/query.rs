//! A route's query string, read the one way every route reads it: into the route's own type,
//! or `400 bad_request` naming `query` with what was off (the extractor's text, in the JSON
//! error body), rather than axum's plain-text rejection.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::Uri;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The query string as `T`; as an extractor, it refuses after the extractors before it (the
/// permission) and before the handler runs.
pub struct ApiQuery<T>(pub T);

/// The query string of `uri` as `T`, or 400 naming `query`.
pub(super) fn parse_query<T: DeserializeOwned>(uri: &Uri) -> Result<T, ApiError> {
    let Query(query) = Query::try_from_uri(uri).map_err(|error| ApiError::bad_request("query", error.body_text()))?;
    Ok(query)
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(&parts.uri).map(ApiQuery)
    }
}
