//! REST API of the analyzer under `/api/v1`.

use crate::Analyzer;
use crate::diagnosis::engine::BaselineVote;
use crate::diagnosis::store::{self as problems, StateFilter};
use crate::ingest::IngestStats;
use crate::sla::{self, SlaQuery};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use rocemesh_proto::api::{
    API_PREFIX, ErrorBody, Problem, ProblemState, SlaRow, SlaScope, UploadAck,
};
use rocemesh_proto::batch::{CONTENT_TYPE, MAX_BATCH_BYTES};
use serde::Deserialize;
use std::sync::Arc;

/// An error response: status plus a JSON [`ErrorBody`].
type ApiError = (StatusCode, Json<ErrorBody>);

fn error(status: StatusCode, msg: impl Into<String>) -> ApiError {
    (status, Json(ErrorBody { error: msg.into() }))
}

/// The analyzer's routes; state is the shared [`Analyzer`].
pub fn router(analyzer: Arc<Analyzer>) -> Router {
    Router::new()
        .route(
            &format!("{API_PREFIX}/results"),
            post(post_results).layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)),
        )
        .route(&format!("{API_PREFIX}/sla"), get(get_sla))
        .route(&format!("{API_PREFIX}/sla/latest"), get(get_latest))
        .route(&format!("{API_PREFIX}/ingest/stats"), get(get_stats))
        .route(&format!("{API_PREFIX}/problems"), get(get_problems))
        .route(&format!("{API_PREFIX}/problems/{{id}}"), get(get_problem))
        .route(
            &format!("{API_PREFIX}/diagnosis/baseline"),
            get(get_baseline),
        )
        .with_state(analyzer)
}

fn is_batch_content_type(headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = v.split(';').next().unwrap_or("").trim();
    mime.eq_ignore_ascii_case(CONTENT_TYPE) || mime.eq_ignore_ascii_case("application/octet-stream")
}

async fn post_results(
    State(a): State<Arc<Analyzer>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UploadAck>, ApiError> {
    if !is_batch_content_type(&headers) {
        a.count_refused_upload(false);
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be {CONTENT_TYPE} or application/octet-stream"),
        ));
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            a.count_refused_upload(true);
            return Err(error(
                e.status(),
                format!("batch larger than {MAX_BATCH_BYTES} bytes"),
            ));
        }
        Err(e) => return Err(error(e.status(), e.body_text())),
    };
    // A large batch takes milliseconds to aggregate: keep it off the async workers.
    let ingest =
        tokio::task::spawn_blocking(move || a.ingest(&body, rocemesh_proto::now_unix_ms()));
    match ingest.await {
        Ok(Ok(ack)) => Ok(Json(ack)),
        Ok(Err(e)) => Err(error(StatusCode::BAD_REQUEST, e.to_string())),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ingest failed: {e}"),
        )),
    }
}

async fn get_sla(
    State(a): State<Arc<Analyzer>>,
    q: Result<Query<SlaQuery>, QueryRejection>,
) -> Result<Json<Vec<SlaRow>>, ApiError> {
    let Query(q) = q.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    q.checked_limit()
        .map_err(|m| error(StatusCode::BAD_REQUEST, m))?;
    sla::query(a.db(), &q)
        .await
        .map(Json)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))
}

/// `GET /api/v1/sla/latest` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LatestQuery {
    scope: SlaScope,
    key: Option<String>,
}

async fn get_latest(
    State(a): State<Arc<Analyzer>>,
    q: Result<Query<LatestQuery>, QueryRejection>,
) -> Result<Json<Vec<SlaRow>>, ApiError> {
    let Query(q) = q.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    let rows = a.latest();
    Ok(Json(
        rows.iter()
            .filter(|r| r.scope == q.scope && q.key.as_ref().is_none_or(|k| *k == r.key))
            .cloned()
            .collect(),
    ))
}

async fn get_stats(State(a): State<Arc<Analyzer>>) -> Json<IngestStats> {
    Json(a.stats())
}

/// Problems a list names when it names no `limit`.
const DEFAULT_PROBLEMS: u32 = 100;
/// Largest `limit` of a problem list.
const MAX_PROBLEMS: u32 = 10_000;

/// `GET /api/v1/problems` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProblemsQuery {
    /// `active` (default), `resolved` or `all`.
    state: Option<StateFilter>,
    /// Only problems last seen at or after this time (ms since the Unix epoch).
    since_ms: Option<i64>,
    /// Most problems to return (default 100, at most 10,000).
    limit: Option<u32>,
}

fn internal(e: anyhow::Error) -> ApiError {
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
}

/// Problems, most recently seen first; active ones as diagnosed this very tick.
async fn get_problems(
    State(a): State<Arc<Analyzer>>,
    q: Result<Query<ProblemsQuery>, QueryRejection>,
) -> Result<Json<Vec<Problem>>, ApiError> {
    let Query(q) = q.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    let limit = q.limit.unwrap_or(DEFAULT_PROBLEMS);
    if !(1..=MAX_PROBLEMS).contains(&limit) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!("limit must be between 1 and {MAX_PROBLEMS}, got {limit}"),
        ));
    }
    let state = q.state.unwrap_or(StateFilter::Active);
    let since = q.since_ms.unwrap_or(i64::MIN);
    let active = a.problems(ProblemState::Active);
    let mut list = if state == StateFilter::Active {
        active
            .into_iter()
            .filter(|p| p.last_seen_ms >= since)
            .collect()
    } else {
        let mut stored = problems::query(a.db(), state, since, limit)
            .await
            .map_err(internal)?;
        // Stored active rows are refreshed only on change: show the live version.
        for p in &mut stored {
            if let Some(live) = active.iter().find(|l| l.id == p.id && p.id != 0) {
                p.clone_from(live);
            }
        }
        stored
    };
    list.truncate(limit as usize);
    Ok(Json(list))
}

async fn get_problem(
    State(a): State<Arc<Analyzer>>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Json<Problem>, ApiError> {
    let Path(id) = id.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    if let Some(p) = a
        .problems(ProblemState::Active)
        .into_iter()
        .find(|p| p.id == id)
    {
        return Ok(Json(p));
    }
    match problems::get(a.db(), id).await.map_err(internal)? {
        Some(p) => Ok(Json(p)),
        None => Err(error(StatusCode::NOT_FOUND, format!("no problem {id}"))),
    }
}

async fn get_baseline(State(a): State<Arc<Analyzer>>) -> Json<Vec<BaselineVote>> {
    Json(a.baseline_votes().as_ref().clone())
}
