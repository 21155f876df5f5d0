//! REST API of the alerts service: receivers (list, add, remove) and the outbox.

use crate::Alerts;
use crate::outbox::{self, ListError, ListQuery, OutboxEntry};
use crate::receiver::{ReceiverSpec, ReceiverView};
use crate::receiver_store::{self, ChangeError};
use axum::extract::{DefaultBodyLimit, State};
use axum::handler::Handler;
use axum::http::{Method, StatusCode};
use axum::{Extension, Json};
use rocemesh_httpd::Access::{Admin, Read};
use rocemesh_httpd::{ApiJson, ApiPath, ApiQuery, HttpError, Role, Routes};
use rocemesh_proto::api::{API_PREFIX, ErrorBody};
use std::sync::Arc;
use utoipa::OpenApi;

/// Largest receiver body accepted.
const MAX_BODY: usize = 64 * 1024;

fn change_error(e: ChangeError) -> HttpError {
    match &e {
        ChangeError::ReadOnly(_) | ChangeError::Exists(_) => HttpError::conflict(e.to_string()),
        ChangeError::NotFound(_) => HttpError::not_found(e.to_string()),
        ChangeError::Db(_) => HttpError::unavailable(e.to_string()),
    }
}

/// The alerts routes under `/api/v1/alerts`, each with who may call it.
pub fn routes() -> Routes<Arc<Alerts>> {
    let at = |path: &str| format!("{API_PREFIX}/alerts{path}");
    Routes::new()
        .route(Method::GET, &at("/receivers"), Read, get_receivers)
        .route(
            Method::POST,
            &at("/receivers"),
            Admin,
            post_receiver.layer(DefaultBodyLimit::max(MAX_BODY)),
        )
        .route(
            Method::DELETE,
            &at("/receivers/{name}"),
            Admin,
            delete_receiver,
        )
        .route(Method::GET, &at("/outbox"), Read, get_outbox)
}

/// The alerts routes with their state, without the token check (tests).
pub fn router(alerts: Arc<Alerts>) -> axum::Router {
    routes().with_state(alerts).into_router()
}

#[derive(OpenApi)]
#[openapi(
    paths(get_receivers, post_receiver, delete_receiver, get_outbox),
    components(schemas(ReceiverView, ReceiverSpec, OutboxEntry, ErrorBody))
)]
struct Doc;

/// The OpenAPI document of the alerts routes (merged into the server's).
pub fn openapi() -> utoipa::openapi::OpenApi {
    Doc::openapi()
}

/// Every receiver (config-file and API ones); secrets are never shown, and a `read` token
/// sees each URL's scheme and host only.
#[utoipa::path(get, path = "/api/v1/alerts/receivers", operation_id = "listAlertReceivers", tag = "alerts",
    responses((status = 200, description = "Receivers in force", body = [ReceiverView]),
              (status = 503, description = "Database unavailable", body = ErrorBody)))]
async fn get_receivers(
    State(a): State<Arc<Alerts>>,
    caller: Option<Extension<Role>>,
) -> Result<Json<Vec<ReceiverView>>, HttpError> {
    let rs = a
        .receivers()
        .await
        .map_err(|e| HttpError::unavailable(format!("{e:#}")))?;
    let view = |r: &crate::receiver::Receiver| match caller {
        Some(Extension(Role::Read)) => r.view().without_url_path(),
        _ => r.view(),
    };
    Ok(Json(rs.iter().map(view).collect()))
}

/// Adds a receiver (admin). Names are unique across config and API receivers.
#[utoipa::path(post, path = "/api/v1/alerts/receivers", operation_id = "createAlertReceiver", tag = "alerts", request_body = ReceiverSpec,
    responses((status = 201, description = "Added", body = ReceiverView),
              (status = 400, description = "Invalid body", body = ErrorBody),
              (status = 409, description = "Name taken (or a config receiver)", body = ErrorBody)))]
async fn post_receiver(
    State(a): State<Arc<Alerts>>,
    ApiJson(spec): ApiJson<ReceiverSpec>,
) -> Result<(StatusCode, Json<ReceiverView>), HttpError> {
    let r = spec
        .into_receiver()
        .map_err(|e| HttpError::bad_request(format!("{e:#}")))?;
    receiver_store::add(&a.db, &a.config_receivers, &r)
        .await
        .map_err(change_error)?;
    tracing::info!(receiver = %r.name, url = %r.url, signed = r.secret.is_some(), "alert receiver added");
    Ok((StatusCode::CREATED, Json(r.view())))
}

/// Removes an API receiver (admin); its undelivered notifications are given up.
#[utoipa::path(delete, path = "/api/v1/alerts/receivers/{name}", operation_id = "deleteAlertReceiver", tag = "alerts",
    params(("name" = String, Path, description = "Receiver name")),
    responses((status = 204, description = "Removed"),
              (status = 404, description = "No such receiver", body = ErrorBody),
              (status = 409, description = "A config receiver (read-only)", body = ErrorBody)))]
async fn delete_receiver(
    State(a): State<Arc<Alerts>>,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, HttpError> {
    receiver_store::remove(&a.db, &a.config_receivers, &name)
        .await
        .map_err(change_error)?;
    tracing::info!(receiver = %name, "alert receiver removed");
    Ok(StatusCode::NO_CONTENT)
}

/// Outbox rows, newest first: what was sent to whom, what is pending and why.
#[utoipa::path(get, path = "/api/v1/alerts/outbox", operation_id = "listAlertOutbox", tag = "alerts", params(ListQuery),
    responses((status = 200, description = "Outbox rows", body = [OutboxEntry]),
              (status = 400, description = "Bad filter", body = ErrorBody)))]
async fn get_outbox(
    State(a): State<Arc<Alerts>>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<Vec<OutboxEntry>>, HttpError> {
    outbox::list(&a.db, &q)
        .await
        .map(Json)
        .map_err(|e| match e {
            ListError::Bad(m) => HttpError::bad_request(m),
            ListError::Db(e) => HttpError::unavailable(format!("{e:#}")),
        })
}
