//! The controller's REST API under `/api/v1`: agent registration and pinglists, the
//! read-only inventory (RNICs, hosts, topology) plus host decommissioning, and training
//! tasks with their throughput uploads.

mod agents;
mod forward;
mod inventory;
mod tasks;

use crate::state::{ControllerState, StateError};
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use rocemesh_httpd::Access::{Admin, Agent, AgentRead, Read};
use rocemesh_httpd::{HttpError, Routes};

/// Largest request body accepted; larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Largest task spec: 100 000 endpoints of up to ~160 bytes of JSON each.
pub const MAX_TASK_BODY_BYTES: usize = 16 << 20;
/// Largest throughput upload: 64 RNICs x 1200 samples x 2 counters of up to 20 digits.
pub const MAX_THROUGHPUT_BODY_BYTES: usize = 4 << 20;

/// All controller routes under `/api/v1`, each with who may call it.
pub fn routes() -> Routes<ControllerState> {
    let task_limit = DefaultBodyLimit::max(MAX_TASK_BODY_BYTES);
    let api = Routes::new()
        .route(Method::POST, "/agents/register", Agent, agents::register)
        .route(Method::GET, "/pinglists/{host_id}", Agent, agents::pinglist)
        .route(Method::GET, "/rnics", Read, inventory::rnics)
        .route(Method::GET, "/rnics/{id}", Read, inventory::rnic)
        .route(
            Method::GET,
            "/rnics/by-ip/{ip}",
            AgentRead,
            inventory::rnic_by_ip,
        )
        .route(Method::GET, "/hosts", Read, inventory::hosts)
        .route(Method::GET, "/hosts/{id}", Read, inventory::host)
        .route(Method::DELETE, "/hosts/{id}", Admin, inventory::delete_host)
        .route(Method::GET, "/topology", Read, inventory::topology)
        .route(
            Method::POST,
            "/tasks",
            Admin,
            tasks::create.layer(task_limit),
        )
        .route(Method::GET, "/tasks", Read, tasks::list)
        .route(
            Method::PUT,
            "/tasks/{id}",
            Admin,
            tasks::replace.layer(task_limit),
        )
        .route(Method::GET, "/tasks/{id}", Read, tasks::get)
        .route(Method::DELETE, "/tasks/{id}", Admin, tasks::delete)
        .route(Method::POST, "/tasks/{id}/ready", Agent, tasks::ready)
        .route(
            Method::POST,
            "/throughput",
            Agent,
            tasks::throughput.layer(DefaultBodyLimit::max(MAX_THROUGHPUT_BODY_BYTES)),
        )
        .map_router(|r| {
            r.fallback(not_found)
                .method_not_allowed_fallback(method_not_allowed)
                .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        });
    Routes::new().nest(rocemesh_proto::api::API_PREFIX, api)
}

/// All controller routes with their state, without the token check (tests, simulations).
pub fn router(state: ControllerState) -> axum::Router {
    routes().with_state(state).into_router()
}

/// Each refusal of the state answers with its status.
impl From<StateError> for HttpError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::Invalid(m) => Self::bad_request(m),
            StateError::NotFound(m) => Self::not_found(m),
            StateError::Conflict(m) => Self::conflict(m),
            StateError::Failed(e) => Self::internal(e),
        }
    }
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

async fn not_found(uri: axum::http::Uri) -> HttpError {
    HttpError::not_found(format!("no route {uri}"))
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {uri}"),
    )
}
