//! Read-only views of the registry (for operators, the analyzer and service tracing)
//! and host decommissioning.

use crate::state::ControllerState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use rocemesh_httpd::{ApiPath, HttpError};
use rocemesh_proto::api::{ErrorBody, HostInfo, RnicInfo, TopologyInfo};
use std::net::IpAddr;

/// `GET /rnics`.
#[utoipa::path(get, path = "/api/v1/rnics", operation_id = "listRnics", tag = "inventory", responses((status = 200, body = Vec<RnicInfo>)))]
pub(super) async fn rnics(State(state): State<ControllerState>) -> Json<Vec<RnicInfo>> {
    Json(state.rnics())
}

/// `GET /rnics/{id}`.
#[utoipa::path(get, path = "/api/v1/rnics/{id}", operation_id = "getRnic", tag = "inventory", params(("id" = u32, Path, description = "RNIC id")),
    responses((status = 200, body = RnicInfo), (status = 404, body = ErrorBody)))]
pub(super) async fn rnic(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
) -> Result<Json<RnicInfo>, HttpError> {
    state
        .rnic(id)
        .map(Json)
        .ok_or_else(|| HttpError::not_found(format!("unknown RNIC {id}")))
}

/// `GET /rnics/by-ip/{ip}`: the current comm info (QPN, port) of the RNIC owning an IP.
#[utoipa::path(get, path = "/api/v1/rnics/by-ip/{ip}", operation_id = "getRnicByIp", tag = "inventory", params(("ip" = String, Path, description = "IP address")),
    responses((status = 200, body = RnicInfo), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn rnic_by_ip(
    State(state): State<ControllerState>,
    ApiPath(ip): ApiPath<String>,
) -> Result<Json<RnicInfo>, HttpError> {
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| HttpError::bad_request(format!("{ip:?} is not an IP address")))?;
    state
        .rnic_by_ip(ip)
        .map(Json)
        .ok_or_else(|| HttpError::not_found(format!("no RNIC has ip {ip}")))
}

/// `GET /hosts`.
#[utoipa::path(get, path = "/api/v1/hosts", operation_id = "listHosts", tag = "inventory", responses((status = 200, body = Vec<HostInfo>)))]
pub(super) async fn hosts(State(state): State<ControllerState>) -> Json<Vec<HostInfo>> {
    Json(state.hosts())
}

/// `GET /hosts/{id}`.
#[utoipa::path(get, path = "/api/v1/hosts/{id}", operation_id = "getHost", tag = "inventory", params(("id" = u32, Path, description = "Host id")),
    responses((status = 200, body = HostInfo), (status = 404, body = ErrorBody)))]
pub(super) async fn host(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
) -> Result<Json<HostInfo>, HttpError> {
    state
        .host(id)
        .map(Json)
        .ok_or_else(|| HttpError::not_found(format!("unknown host {id}")))
}

/// `DELETE /hosts/{id}`: decommission; 204 when done.
#[utoipa::path(delete, path = "/api/v1/hosts/{id}", operation_id = "deleteHost", tag = "inventory", params(("id" = u32, Path, description = "Host id")),
    responses((status = 204, description = "Decommissioned"), (status = 404, body = ErrorBody)))]
pub(super) async fn delete_host(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
) -> Result<StatusCode, HttpError> {
    if state.delete_host(id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(HttpError::not_found(format!("unknown host {id}")))
    }
}

/// `GET /topology`.
#[utoipa::path(get, path = "/api/v1/topology", operation_id = "getTopology", tag = "inventory", responses((status = 200, body = TopologyInfo)))]
pub(super) async fn topology(State(state): State<ControllerState>) -> Json<TopologyInfo> {
    Json(state.topology())
}
