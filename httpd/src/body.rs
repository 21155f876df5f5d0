//! Request size limits of a whole server: a hard ceiling on every body (whatever the
//! handler does with it), a default for routes that set no limit of their own, and 413
//! answers as JSON [`HttpError`]s like every other API error.

use crate::HttpError;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::limit::RequestBodyLimitLayer;

/// Hard ceiling of any request body: the largest per-route limit (task specs, 16 MiB).
pub const MAX_REQUEST_BYTES: usize = 16 << 20;
// The largest well-formed result batch (records and path section) fits under the ceiling.
const _: () = assert!(rocemesh_proto::batch::MAX_BATCH_BYTES <= MAX_REQUEST_BYTES);

/// Limit of routes that set none themselves.
pub const DEFAULT_BODY_BYTES: usize = 1 << 20;

/// Applies the limits to every route of `router` (per-route limits set inside still win
/// below the ceiling).
pub fn limit_bodies(router: Router) -> Router {
    router
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_REQUEST_BYTES))
        .layer(middleware::from_fn(json_413))
}

/// Turns a 413 without a JSON body (the ceiling's own answer, or a plain-text extractor
/// rejection) into an `ErrorBody`.
async fn json_413(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status() != StatusCode::PAYLOAD_TOO_LARGE || is_json {
        return resp;
    }
    HttpError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body too large (this route takes at most its limit, the server at most {MAX_REQUEST_BYTES} bytes)"),
    )
    .into_response()
}
