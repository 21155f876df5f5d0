//! REST API of the analyzer under `/api/v1`.

use crate::Analyzer;
use crate::ingest::IngestStats;
use crate::sla::{self, SlaQuery};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use rocemesh_proto::api::{API_PREFIX, ErrorBody, SlaRow, SlaScope, UploadAck};
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
