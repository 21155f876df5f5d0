//! The controller's REST API under `/api/v1`: agent registration and pinglists, the
//! read-only inventory (RNICs, hosts, topology) plus host decommissioning, and training
//! tasks with their throughput uploads.

mod agents;
pub mod error;
mod extract;
mod forward;
mod inventory;
mod tasks;

use crate::state::ControllerState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use error::ApiError;

/// Largest request body accepted; larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest task spec: 100 000 endpoints of up to ~160 bytes of JSON each.
pub const MAX_TASK_BODY_BYTES: usize = 16 << 20;
/// Largest throughput upload: 64 RNICs x 1200 samples x 2 counters of up to 20 digits.
pub const MAX_THROUGHPUT_BODY_BYTES: usize = 4 << 20;

/// All controller routes, already under `/api/v1`.
pub fn router(state: ControllerState) -> Router {
    let api = Router::new()
        .route("/agents/register", post(agents::register))
        .route("/pinglists/{host_id}", get(agents::pinglist))
        .route("/rnics", get(inventory::rnics))
        .route("/rnics/{id}", get(inventory::rnic))
        .route("/rnics/by-ip/{ip}", get(inventory::rnic_by_ip))
        .route("/hosts", get(inventory::hosts))
        .route(
            "/hosts/{id}",
            get(inventory::host).delete(inventory::delete_host),
        )
        .route("/topology", get(inventory::topology))
        .route(
            "/tasks",
            post(tasks::create)
                .layer(DefaultBodyLimit::max(MAX_TASK_BODY_BYTES))
                .get(tasks::list),
        )
        .route(
            "/tasks/{id}",
            put(tasks::replace)
                .layer(DefaultBodyLimit::max(MAX_TASK_BODY_BYTES))
                .get(tasks::get)
                .delete(tasks::delete),
        )
        .route("/tasks/{id}/ready", post(tasks::ready))
        .route(
            "/throughput",
            post(tasks::throughput).layer(DefaultBodyLimit::max(MAX_THROUGHPUT_BODY_BYTES)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state);
    Router::new().nest(rocemesh_proto::api::API_PREFIX, api)
}

/// The controller's part of the served OpenAPI document, from the handlers' annotations.
pub fn openapi() -> utoipa::openapi::OpenApi {
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(
        agents::register,
        agents::pinglist,
        inventory::rnics,
        inventory::rnic,
        inventory::rnic_by_ip,
        inventory::hosts,
        inventory::host,
        inventory::delete_host,
        inventory::topology,
        tasks::create,
        tasks::list,
        tasks::get,
        tasks::replace,
        tasks::delete,
        tasks::ready,
        tasks::throughput,
    ))]
    struct Doc;
    <Doc as utoipa::OpenApi>::openapi()
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {uri}"))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {uri}"),
    )
}
