//! What agents call: registration at start, and pinglist polls (ETag / 304).

use crate::state::{ControllerState, PinglistError};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use rocemesh_httpd::{AgentHosts, ApiJson, ApiPath, ApiQuery, HttpError};
use rocemesh_proto::api::{API_PREFIX, ErrorBody, Pinglist, RegisterRequest, RegisterResponse};
use serde::Deserialize;

/// `POST /agents/register`; an agent token limited to some hosts may register only those.
#[utoipa::path(post, path = "/api/v1/agents/register", operation_id = "registerAgent", tag = "agents", request_body = RegisterRequest,
    responses((status = 200, body = RegisterResponse), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(super) async fn register(
    State(state): State<ControllerState>,
    token_hosts: Option<Extension<AgentHosts>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> Result<Response, HttpError> {
    if let Some(Extension(hosts)) = token_hosts
        && !hosts.may_register(&req.host)
    {
        return Err(HttpError::forbidden(format!(
            "this agent token may not register host {:?}",
            req.host
        )));
    }
    if let Some(leader) = state.forward_to() {
        let body = serde_json::to_vec(&req).map_err(|e| HttpError::internal(e.into()))?;
        let path = format!("{API_PREFIX}/agents/register");
        return super::forward::to_leader(leader, "POST", path, &headers, body).await;
    }
    Ok(Json(state.register(req).await?).into_response())
}

/// Query of a pinglist poll.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct PinglistQuery {
    /// The polling agent's epoch; a mismatch means the controller has a newer registration.
    epoch: Option<u32>,
}

/// `GET /pinglists/{host_id}[?epoch=N]`; every answer is counted for `/metrics`.
#[utoipa::path(get, path = "/api/v1/pinglists/{host_id}", operation_id = "getPinglist", tag = "agents",
    params(("host_id" = u32, Path, description = "Host id from registration"), PinglistQuery,
        ("If-None-Match" = Option<String>, Header, description = "ETag of the pinglist the agent has")),
    responses(
        (status = 200, body = Pinglist, headers(("ETag" = String, description = "Pinglist version"))),
        (status = 304, description = "The agent's pinglist is current"),
        (status = 404, body = ErrorBody, description = "Unknown host: register again"),
        (status = 409, body = ErrorBody, description = "Stale epoch: register again")))]
pub(super) async fn pinglist(
    State(state): State<ControllerState>,
    ApiPath(host_id): ApiPath<u32>,
    ApiQuery(query): ApiQuery<PinglistQuery>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    if let Some(leader) = state.forward_to() {
        let epoch = query
            .epoch
            .map(|e| format!("?epoch={e}"))
            .unwrap_or_default();
        let path = format!("{API_PREFIX}/pinglists/{host_id}{epoch}");
        return super::forward::to_leader(leader, "GET", path, &headers, Vec::new()).await;
    }
    // A poll after a registry change rebuilds every host's lists (0.1 s at 10k RNICs,
    // 0.6 s at 50k) and serializes a large body: off the async workers, so a registration
    // storm does not stall the other requests (uploads) the runtime serves.
    let blocking = state.clone();
    let mut answer =
        tokio::task::spawn_blocking(move || pinglist_answer(&blocking, host_id, query, &headers))
            .await
            .map_err(|e| HttpError::internal(e.into()))?;
    // Under scale-out, every answer names the analyzer owning the agent's shard now.
    if let (Ok(r), Some(url)) = (&mut answer, state.analyzer_of_host(host_id))
        && let Ok(v) = HeaderValue::from_str(&url)
    {
        r.headers_mut()
            .insert(rocemesh_proto::api::ANALYZER_HEADER, v);
    }
    let status = match &answer {
        Ok(r) => r.status(),
        Err(e) => e.status(),
    };
    state.poll_counters().count(status.as_u16());
    answer
}

fn pinglist_answer(
    state: &ControllerState,
    host_id: u32,
    query: PinglistQuery,
    headers: &HeaderMap,
) -> Result<Response, HttpError> {
    let list = state.pinglist(host_id, query.epoch).map_err(|e| match e {
        PinglistError::UnknownHost => HttpError::not_found(format!("unknown host {host_id}")),
        PinglistError::StaleEpoch { current } => HttpError::conflict(format!(
            "epoch {} is not the registered epoch {current}: register again",
            query.epoch.unwrap_or_default()
        )),
    })?;
    // The probe keys ride along: a rotation changes the version, so every agent fetches them.
    let auth = state.probe_auth();
    let version = crate::probe_keys::versioned(&list.version, &auth);
    let etag = format!("\"{version}\"");
    let etag_value = HeaderValue::from_str(&etag).map_err(|e| HttpError::internal(e.into()))?;
    if if_none_match(headers, &etag) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag_value)]).into_response());
    }
    let body = Pinglist {
        version,
        probe_auth: Some(auth),
        ..(*list).clone()
    };
    Ok(([(header::ETAG, etag_value)], Json(body)).into_response())
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
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"v0\", W/\"v1\""),
        );
        assert!(if_none_match(&h, "\"v1\""));
        assert!(!if_none_match(&h, "\"v2\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(if_none_match(&h, "\"v2\""));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("v2"));
        assert!(
            !if_none_match(&h, "\"v2\""),
            "unquoted tags are not our ETag"
        );
    }
}
