//! REST routes: task metric samples, objectives and verdicts under `/api/v1/tasks/{id}`.

use crate::assess::Impact;
use crate::model::{MetricSample, Objective, ObjectiveSpec, Verdict};
use crate::{samples, verdict};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rocemesh_proto::api::ErrorBody;
use serde::Deserialize;
use std::sync::Arc;
use utoipa::{IntoParams, OpenApi};

/// Largest request body of these routes (a sample or an objective is tiny).
const MAX_BODY: usize = 16 * 1024;
/// Interval a verdict covers when `from` is not given, ms before `to`.
const DEFAULT_INTERVAL_MS: i64 = 3_600_000;

type ApiError = (StatusCode, Json<ErrorBody>);

fn error(status: StatusCode, msg: impl Into<String>) -> ApiError {
    (status, Json(ErrorBody { error: msg.into() }))
}

fn internal(e: anyhow::Error) -> ApiError {
    tracing::error!("impact request failed: {e:#}");
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
}

fn bad<E: std::fmt::Display>(e: E) -> ApiError {
    error(StatusCode::BAD_REQUEST, e.to_string())
}

/// A body that could not be read as JSON: 413 when it was too large, else 400.
fn unreadable(e: &JsonRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {MAX_BODY} bytes"),
        )
    } else {
        bad(e.body_text())
    }
}

async fn existing_task(
    impact: &Impact,
    id: Result<Path<u32>, PathRejection>,
) -> Result<u32, ApiError> {
    let Path(id) = id.map_err(|e| bad(e.body_text()))?;
    if impact
        .db()
        .inventory()
        .task_exists(id)
        .await
        .map_err(internal)?
    {
        Ok(id)
    } else {
        Err(error(StatusCode::NOT_FOUND, format!("no task {id}")))
    }
}

/// The impact routes; state is the shared [`Impact`].
pub fn router(impact: Arc<Impact>) -> Router {
    Router::new()
        .route(
            "/api/v1/tasks/{id}/metrics",
            post(post_metric).get(get_metrics),
        )
        .route(
            "/api/v1/tasks/{id}/objective",
            get(get_objective).put(put_objective),
        )
        .route("/api/v1/tasks/{id}/verdict", get(get_verdict))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(impact)
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
    id: Result<Path<u32>, PathRejection>,
    body: Result<Json<MetricSample>, JsonRejection>,
) -> Result<(StatusCode, Json<MetricSample>), ApiError> {
    let Json(sample) = body.map_err(|e| unreadable(&e))?;
    let id = existing_task(&impact, id).await?;
    let at = sample
        .validate(rocemesh_proto::now_unix_ms())
        .map_err(bad)?;
    samples::insert(impact.db(), id, &sample.name, at, sample.value)
        .await
        .map_err(internal)?;
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
    id: Result<Path<u32>, PathRejection>,
    q: Result<Query<MetricsQuery>, QueryRejection>,
) -> Result<Json<Vec<MetricSample>>, ApiError> {
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let id = existing_task(&impact, id).await?;
    let limit = q.limit.unwrap_or(DEFAULT_SAMPLES);
    if !(1..=MAX_SAMPLES).contains(&limit) {
        return Err(bad(format!(
            "limit must be between 1 and {MAX_SAMPLES}, got {limit}"
        )));
    }
    let name = match q.name {
        Some(n) => n,
        None => samples::objective_of(impact.db(), id)
            .await
            .map_err(internal)?
            .map(|o| o.spec.metric)
            .ok_or_else(|| bad(format!("task {id} has no objective: name the metric")))?,
    };
    let to = q.to.unwrap_or_else(rocemesh_proto::now_unix_ms);
    let series = samples::series(impact.db(), id, &name, q.from.unwrap_or(0), to, limit)
        .await
        .map_err(internal)?;
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
    id: Result<Path<u32>, PathRejection>,
    body: Result<Json<ObjectiveSpec>, JsonRejection>,
) -> Result<Json<Objective>, ApiError> {
    let Json(spec) = body.map_err(|e| unreadable(&e))?;
    let id = existing_task(&impact, id).await?;
    spec.validate().map_err(bad)?;
    samples::set_objective(impact.db(), id, &spec, rocemesh_proto::now_unix_ms())
        .await
        .map(Json)
        .map_err(internal)
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
    id: Result<Path<u32>, PathRejection>,
) -> Result<Json<Objective>, ApiError> {
    let id = existing_task(&impact, id).await?;
    match samples::objective_of(impact.db(), id)
        .await
        .map_err(internal)?
    {
        Some(o) => Ok(Json(o)),
        None => Err(error(
            StatusCode::NOT_FOUND,
            format!("task {id} has no objective"),
        )),
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
    id: Result<Path<u32>, PathRejection>,
    q: Result<Query<VerdictQuery>, QueryRejection>,
) -> Result<Json<Verdict>, ApiError> {
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let Path(id) = id.map_err(|e| bad(e.body_text()))?;
    let now = rocemesh_proto::now_unix_ms();
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or(to.saturating_sub(DEFAULT_INTERVAL_MS));
    if from < 0 || to < from {
        return Err(bad(format!(
            "need 0 <= from <= to, got from={from} to={to}"
        )));
    }
    match verdict::verdict(&impact, id, from, to, now)
        .await
        .map_err(internal)?
    {
        Some(v) => Ok(Json(v)),
        None => Err(error(StatusCode::NOT_FOUND, format!("no task {id}"))),
    }
}

#[derive(OpenApi)]
#[openapi(paths(post_metric, get_metrics, put_objective, get_objective, get_verdict))]
struct ImpactApi;

/// The OpenAPI description of these routes (merged into the server's document).
pub fn openapi() -> utoipa::openapi::OpenApi {
    ImpactApi::openapi()
}
