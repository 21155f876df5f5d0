//! REST API of the alerts service: receivers (list, add, remove) and the outbox.

use crate::Alerts;
use crate::outbox::{self, ListError, ListQuery, OutboxEntry};
use crate::receiver::{ReceiverSpec, ReceiverView};
use crate::receiver_store::{self, ChangeError};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use rocemesh_proto::api::{API_PREFIX, CallerRole, ErrorBody};
use std::sync::Arc;
use utoipa::OpenApi;

/// Largest receiver body accepted.
const MAX_BODY: usize = 64 * 1024;

type ApiError = (StatusCode, Json<ErrorBody>);

fn error(status: StatusCode, msg: impl Into<String>) -> ApiError {
    (status, Json(ErrorBody { error: msg.into() }))
}

fn change_error(e: ChangeError) -> ApiError {
    let status = match &e {
        ChangeError::ReadOnly(_) | ChangeError::Exists(_) => StatusCode::CONFLICT,
        ChangeError::NotFound(_) => StatusCode::NOT_FOUND,
        ChangeError::Db(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// The alerts routes under `/api/v1/alerts`.
pub fn router(alerts: Arc<Alerts>) -> Router {
    Router::new()
        .route(
            &format!("{API_PREFIX}/alerts/receivers"),
            get(get_receivers)
                .post(post_receiver)
                .layer(DefaultBodyLimit::max(MAX_BODY)),
        )
        .route(
            &format!("{API_PREFIX}/alerts/receivers/{{name}}"),
            delete(delete_receiver),
        )
        .route(&format!("{API_PREFIX}/alerts/outbox"), get(get_outbox))
        .with_state(alerts)
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
    caller: Option<Extension<CallerRole>>,
) -> Result<Json<Vec<ReceiverView>>, ApiError> {
    let rs = a
        .receivers()
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")))?;
    let view = |r: &crate::receiver::Receiver| match caller {
        Some(Extension(CallerRole::Read)) => r.view().without_url_path(),
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
    body: Result<Json<ReceiverSpec>, JsonRejection>,
) -> Result<(StatusCode, Json<ReceiverView>), ApiError> {
    let Json(spec) = body.map_err(|e| error(e.status(), e.body_text()))?;
    let r = spec
        .into_receiver()
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("{e:#}")))?;
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
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
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
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<OutboxEntry>>, ApiError> {
    let Query(q) = q.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    outbox::list(&a.db, &q)
        .await
        .map(Json)
        .map_err(|e| match e {
            ListError::Bad(m) => error(StatusCode::BAD_REQUEST, m),
            ListError::Db(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")),
        })
}
