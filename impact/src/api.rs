//! REST routes: task metric samples, objectives and verdicts under `/api/v1/tasks/{id}`.

use crate::assess::Impact;
use crate::model::{MetricSample, Objective, ObjectiveSpec, Verdict};
use crate::{samples, verdict};
use axum::Json;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode};
use rocemesh_httpd::Access::{Admin, Read};
use rocemesh_httpd::{ApiJson, ApiPath, ApiQuery, HttpError, Routes};
use rocemesh_proto::api::ErrorBody;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::{IntoParams, OpenApi};

/// Largest request body of these routes (a sample or an objective is tiny).
const MAX_BODY: usize = 16 * 1024;
/// Interval a verdict covers when `from` is not given, ms before `to`.
const DEFAULT_INTERVAL_MS: i64 = 3_600_000;

/// A body that could not be read as JSON: 413 when it was too large, else 400 (axum's
/// 415 and 422 included: this API answers 400 for every body its client must fix).
fn unreadable(e: HttpError) -> HttpError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        e
    } else {
        HttpError::bad_request(e.message())
    }
}

async fn existing_task(
    impact: &Impact,
    id: Result<ApiPath<u32>, HttpError>,
) -> Result<u32, HttpError> {
    let ApiPath(id) = id?;
    if impact
        .db()
        .inventory()
        .task_exists(id)
        .await
        .map_err(HttpError::internal)?
    {
        Ok(id)
    } else {
        Err(HttpError::not_found(format!("no task {id}")))
    }
}

/// The impact routes, each with who may call it: schedulers report samples and set
/// objectives (admin), operators read them and the verdicts.
pub fn routes() -> Routes<Arc<Impact>> {
    Routes::new()
        .route(
            Method::POST,
            "/api/v1/tasks/{id}/metrics",
            Admin,
            post_metric,
        )
        .route(Method::GET, "/api/v1/tasks/{id}/metrics", Read, get_metrics)
        .route(
            Method::GET,
            "/api/v1/tasks/{id}/objective",
            Read,
            get_objective,
        )
        .route(
            Method::PUT,
            "/api/v1/tasks/{id}/objective",
            Admin,
            put_objective,
        )
        .route(Method::GET, "/api/v1/tasks/{id}/verdict", Read, get_verdict)
        .map_router(|r| r.layer(DefaultBodyLimit::max(MAX_BODY)))
}

/// The impact routes with their state, without the token check (tests).
pub fn router(impact: Arc<Impact>) -> axum::Router {
    routes().with_state(impact).into_router()
}

/// Stores one performance sample of a task.
#[utoipa::path(
    post,
    path = "/api/v1/tasks/{id}/metrics",
    operation_id = "recordTaskMetric",
    tag = "impact",
    params(("id" = u32, Path, description = "Task id")),
    request_body = MetricSample,
    responses(
        (status = 201, description = "Stored (with its time filled in)", body = MetricSample),
        (status = 400, description = "Invalid sample", body = ErrorBody),
        (status = 413, description = "Body larger than 16 KiB", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    )
)]
async fn post_metric(
    State(impact): State<Arc<Impact>>,
    id: Result<ApiPath<u32>, HttpError>,
    body: Result<ApiJson<MetricSample>, HttpError>,
) -> Result<(StatusCode, Json<MetricSample>), HttpError> {
    let ApiJson(sample) = body.map_err(unreadable)?;
    let id = existing_task(&impact, id).await?;
    let at = sample
        .validate(rocemesh_proto::now_unix_ms())
        .map_err(HttpError::bad_request)?;
    samples::insert(impact.db(), id, &sample.name, at, sample.value)
        .await
        .map_err(HttpError::internal)?;
    Ok((
        StatusCode::CREATED,
        Json(MetricSample {
            at_ms: Some(at),
            ..sample
        }),
    ))
}

/// Samples a metrics list returns when it names no `limit`.
const DEFAULT_SAMPLES: u32 = 1_000;
/// Largest `limit` of a metrics list.
const MAX_SAMPLES: u32 = 10_000;

/// `GET .../metrics` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct MetricsQuery {
    /// Metric name (default: the objective's metric).
    name: Option<String>,
    /// Start, ms since the Unix epoch (default 0).
    from: Option<i64>,
    /// End (default: now).
    to: Option<i64>,
    /// Most samples, the newest of the interval (default 1,000, at most 10,000).
    limit: Option<u32>,
}

/// A task's reported samples of one metric, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/tasks/{id}/metrics",
    operation_id = "listTaskMetrics",
    tag = "impact",
    params(("id" = u32, Path, description = "Task id"), MetricsQuery),
    responses(
        (status = 200, description = "Samples, oldest first", body = Vec<MetricSample>),
        (status = 400, description = "Invalid query, or no name and no objective", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    )
)]
async fn get_metrics(
    State(impact): State<Arc<Impact>>,
    id: Result<ApiPath<u32>, HttpError>,
    q: Result<ApiQuery<MetricsQuery>, HttpError>,
) -> Result<Json<Vec<MetricSample>>, HttpError> {
    let ApiQuery(q) = q?;
    let id = existing_task(&impact, id).await?;
    let limit = q.limit.unwrap_or(DEFAULT_SAMPLES);
    if !(1..=MAX_SAMPLES).contains(&limit) {
        return Err(HttpError::bad_request(format!(
            "limit must be between 1 and {MAX_SAMPLES}, got {limit}"
        )));
    }
    let name = match q.name {
        Some(n) => n,
        None => samples::objective_of(impact.db(), id)
            .await
            .map_err(HttpError::internal)?
            .map(|o| o.spec.metric)
            .ok_or_else(|| {
                HttpError::bad_request(format!("task {id} has no objective: name the metric"))
            })?,
    };
    let to = q.to.unwrap_or_else(rocemesh_proto::now_unix_ms);
    let series = samples::series(impact.db(), id, &name, q.from.unwrap_or(0), to, limit)
        .await
        .map_err(HttpError::internal)?;
    Ok(Json(
        series
            .into_iter()
            .map(|(at, value)| MetricSample {
                name: name.clone(),
                value,
                at_ms: Some(at),
            })
            .collect(),
    ))
}

/// Sets what a task's performance is judged against.
#[utoipa::path(
    put,
    path = "/api/v1/tasks/{id}/objective",
    operation_id = "setTaskObjective",
    tag = "impact",
    params(("id" = u32, Path, description = "Task id")),
    request_body = ObjectiveSpec,
    responses(
        (status = 200, description = "Stored", body = Objective),
        (status = 400, description = "Invalid objective", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    )
)]
async fn put_objective(
    State(impact): State<Arc<Impact>>,
    id: Result<ApiPath<u32>, HttpError>,
    body: Result<ApiJson<ObjectiveSpec>, HttpError>,
) -> Result<Json<Objective>, HttpError> {
    let ApiJson(spec) = body.map_err(unreadable)?;
    let id = existing_task(&impact, id).await?;
    spec.validate().map_err(HttpError::bad_request)?;
    samples::set_objective(impact.db(), id, &spec, rocemesh_proto::now_unix_ms())
        .await
        .map(Json)
        .map_err(HttpError::internal)
}

/// A task's objective (with the learned baseline, once learned).
#[utoipa::path(
    get,
    path = "/api/v1/tasks/{id}/objective",
    operation_id = "getTaskObjective",
    tag = "impact",
    params(("id" = u32, Path, description = "Task id")),
    responses(
        (status = 200, description = "The objective", body = Objective),
        (status = 404, description = "No such task, or no objective set", body = ErrorBody),
    )
)]
async fn get_objective(
    State(impact): State<Arc<Impact>>,
    id: Result<ApiPath<u32>, HttpError>,
) -> Result<Json<Objective>, HttpError> {
    let id = existing_task(&impact, id).await?;
    match samples::objective_of(impact.db(), id)
        .await
        .map_err(HttpError::internal)?
    {
        Some(o) => Ok(Json(o)),
        None => Err(HttpError::not_found(format!("task {id} has no objective"))),
    }
}

/// `GET .../verdict` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct VerdictQuery {
    /// Start of the interval, ms since the Unix epoch (default: one hour before `to`).
    from: Option<i64>,
    /// End of the interval (default: now).
    to: Option<i64>,
}

/// Is the network to blame for the task's performance in an interval?
#[utoipa::path(
    get,
    path = "/api/v1/tasks/{id}/verdict",
    operation_id = "getTaskVerdict",
    tag = "impact",
    params(("id" = u32, Path, description = "Task id"), VerdictQuery),
    responses(
        (status = 200, description = "The verdict with its evidence", body = Verdict),
        (status = 400, description = "Invalid interval", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    )
)]
async fn get_verdict(
    State(impact): State<Arc<Impact>>,
    id: Result<ApiPath<u32>, HttpError>,
    q: Result<ApiQuery<VerdictQuery>, HttpError>,
) -> Result<Json<Verdict>, HttpError> {
    let ApiQuery(q) = q?;
    let ApiPath(id) = id?;
    let now = rocemesh_proto::now_unix_ms();
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or(to.saturating_sub(DEFAULT_INTERVAL_MS));
    if from < 0 || to < from {
        return Err(HttpError::bad_request(format!(
            "need 0 <= from <= to, got from={from} to={to}"
        )));
    }
    match verdict::verdict(&impact, id, from, to, now)
        .await
        .map_err(HttpError::internal)?
    {
        Some(v) => Ok(Json(v)),
        None => Err(HttpError::not_found(format!("no task {id}"))),
    }
}

#[derive(OpenApi)]
#[openapi(paths(post_metric, get_metrics, put_objective, get_objective, get_verdict))]
struct ImpactApi;

/// The OpenAPI description of these routes (merged into the server's document).
pub fn openapi() -> utoipa::openapi::OpenApi {
    ImpactApi::openapi()
}
