//! The controller's REST API under `/api/v1`: agent registration and pinglists, and the
//! read-only inventory (RNICs, hosts, topology) plus host decommissioning.

mod agents;
pub mod error;
mod extract;
mod inventory;

use crate::state::ControllerState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use error::ApiError;

/// Largest request body accepted; larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// All controller routes, already under `/api/v1`.
pub fn router(state: ControllerState) -> Router {
    let api = Router::new()
        .route("/agents/register", post(agents::register))
        .route("/pinglists/{host_id}", get(agents::pinglist))
        .route("/rnics", get(inventory::rnics))
        .route("/rnics/{id}", get(inventory::rnic))
        .route("/rnics/by-ip/{ip}", get(inventory::rnic_by_ip))
        .route("/hosts", get(inventory::hosts))
        .route("/hosts/{id}", get(inventory::host).delete(inventory::delete_host))
        .route("/topology", get(inventory::topology))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state);
    Router::new().nest(rocemesh_proto::api::API_PREFIX, api)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {uri}"))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not allowed on {uri}"))
}
