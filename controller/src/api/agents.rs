//! What agents call: registration at start, and pinglist polls (ETag / 304).

use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::{ControllerState, PinglistError};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rocemesh_proto::api::{RegisterRequest, RegisterResponse};
use serde::Deserialize;

/// `POST /agents/register`.
pub(super) async fn register(State(state): State<ControllerState>, ApiJson(req): ApiJson<RegisterRequest>) -> Result<Json<RegisterResponse>, ApiError> {
    Ok(Json(state.register(req).await?))
}

/// Query of a pinglist poll.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PinglistQuery {
    /// The polling agent's epoch; a mismatch means the controller has a newer registration.
    epoch: Option<u32>,
}

/// `GET /pinglists/{host_id}[?epoch=N]`.
pub(super) async fn pinglist(
    State(state): State<ControllerState>,
    ApiPath(host_id): ApiPath<u32>,
    ApiQuery(query): ApiQuery<PinglistQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let list = state.pinglist(host_id, query.epoch).map_err(|e| match e {
        PinglistError::UnknownHost => ApiError::not_found(format!("unknown host {host_id}")),
        PinglistError::StaleEpoch { current } => ApiError::new(
            StatusCode::CONFLICT,
            format!("epoch {} is not the registered epoch {current}: register again", query.epoch.unwrap_or_default()),
        ),
    })?;
    let etag = format!("\"{}\"", list.version);
    let etag_value = HeaderValue::from_str(&etag).map_err(|e| ApiError::internal(e.into()))?;
    if if_none_match(&headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag_value)]).into_response());
    }
    Ok(([(header::ETAG, etag_value)], Json(&*list)).into_response())
}

/// Whether `If-None-Match` lists `etag` (or `*`); weak validators compare equal too.
fn if_none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_forms() {
        let mut h = HeaderMap::new();
        assert!(!if_none_match(&h, "\"v1\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"v0\", W/\"v1\""));
        assert!(if_none_match(&h, "\"v1\""));
        assert!(!if_none_match(&h, "\"v2\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(if_none_match(&h, "\"v2\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("v2"));
        assert!(!if_none_match(&h, "\"v2\""), "unquoted tags are not our ETag");
    }
}
