//! Training tasks (SkeletonHunter §5.1): CRUD for operators and schedulers, readiness
//! registration for endpoints, and throughput uploads from agents.

use crate::state::ControllerState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use rocemesh_httpd::{ApiJson, ApiPath, HttpError};
use rocemesh_proto::api::{ErrorBody, TaskInfo, TaskSpec, ThroughputUpload, UploadAck};
use serde::Deserialize;

/// `POST /tasks`: 201 with the new task.
#[utoipa::path(post, path = "/api/v1/tasks", operation_id = "createTask", tag = "tasks", request_body = TaskSpec,
    responses((status = 201, body = TaskInfo), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(super) async fn create(
    State(state): State<ControllerState>,
    ApiJson(spec): ApiJson<TaskSpec>,
) -> Result<(StatusCode, Json<TaskInfo>), HttpError> {
    Ok((StatusCode::CREATED, Json(state.create_task(spec).await?)))
}

/// `GET /tasks`.
#[utoipa::path(get, path = "/api/v1/tasks", operation_id = "listTasks", tag = "tasks", responses((status = 200, body = Vec<TaskInfo>)))]
pub(super) async fn list(State(state): State<ControllerState>) -> Json<Vec<TaskInfo>> {
    Json(state.tasks())
}

/// `GET /tasks/{id}`.
#[utoipa::path(get, path = "/api/v1/tasks/{id}", operation_id = "getTask", tag = "tasks", params(("id" = u32, Path, description = "Task id")),
    responses((status = 200, body = TaskInfo), (status = 404, body = ErrorBody)))]
pub(super) async fn get(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
) -> Result<Json<TaskInfo>, HttpError> {
    state
        .task(id)
        .map(Json)
        .ok_or_else(|| HttpError::not_found(format!("unknown task {id}")))
}

/// `PUT /tasks/{id}`: replace name and endpoints (back to preload).
#[utoipa::path(put, path = "/api/v1/tasks/{id}", operation_id = "replaceTask", tag = "tasks", params(("id" = u32, Path, description = "Task id")), request_body = TaskSpec,
    responses((status = 200, body = TaskInfo), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(super) async fn replace(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
    ApiJson(spec): ApiJson<TaskSpec>,
) -> Result<Json<TaskInfo>, HttpError> {
    Ok(Json(state.replace_task(id, spec).await?))
}

/// `DELETE /tasks/{id}`: 204 when done.
#[utoipa::path(delete, path = "/api/v1/tasks/{id}", operation_id = "deleteTask", tag = "tasks", params(("id" = u32, Path, description = "Task id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub(super) async fn delete(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
) -> Result<StatusCode, HttpError> {
    if state.delete_task(id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(HttpError::not_found(format!("unknown task {id}")))
    }
}

/// Body of `POST /tasks/{id}/ready`: the endpoint that is ready to be probed.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadyRequest {
    /// Host name of the endpoint.
    host: String,
    /// RNIC name (registered `ifname`) of the endpoint.
    rnic: String,
}

/// `POST /tasks/{id}/ready`: incremental activation of one endpoint.
#[utoipa::path(post, path = "/api/v1/tasks/{id}/ready", operation_id = "markTaskEndpointReady", tag = "tasks", params(("id" = u32, Path, description = "Task id")), request_body = ReadyRequest,
    responses((status = 200, body = TaskInfo), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn ready(
    State(state): State<ControllerState>,
    ApiPath(id): ApiPath<u32>,
    ApiJson(req): ApiJson<ReadyRequest>,
) -> Result<Json<TaskInfo>, HttpError> {
    Ok(Json(state.task_ready(id, &req.host, &req.rnic).await?))
}

/// `POST /throughput`: per-RNIC byte counters from an agent.
#[utoipa::path(post, path = "/api/v1/throughput", operation_id = "uploadThroughput", tag = "tasks", request_body = ThroughputUpload,
    responses((status = 200, body = UploadAck), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub(super) async fn throughput(
    State(state): State<ControllerState>,
    ApiJson(upload): ApiJson<ThroughputUpload>,
) -> Result<Json<UploadAck>, HttpError> {
    Ok(Json(state.ingest_throughput(&upload)?))
}
