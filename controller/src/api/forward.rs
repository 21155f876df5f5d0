//! Scale-out: a controller that does not lead passes registrations and pinglist polls to
//! the leader ([`crate::leader`]) and relays its answer, so agents may talk to any
//! instance. Only the headers that matter to these two requests cross (bearer token,
//! content type, ETag validators, the analyzer header).

use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rocemesh_httpd::HttpError;
use rocemesh_proto::api::ANALYZER_HEADER;
use std::sync::OnceLock;
use std::time::Duration;

/// A forwarded request gets this long (the leader answers from memory).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer relayed (a pinglist of a big host is well below).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

const REQUEST_HEADERS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    header::IF_NONE_MATCH,
];

fn client() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .timeout_global(Some(FORWARD_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into()
    })
}

/// Sends `method` `path_and_query` with `body` to `leader` and relays the answer; a
/// leader that cannot be reached is a 503 (the agent retries, by then a new leader leads).
pub(super) async fn to_leader(
    leader: String,
    method: &'static str,
    path_and_query: String,
    headers: &HeaderMap,
    body: Vec<u8>,
) -> Result<Response, HttpError> {
    let url = format!("{}{path_and_query}", leader.trim_end_matches('/'));
    let pass: Vec<(HeaderName, String)> = REQUEST_HEADERS
        .iter()
        .filter_map(|h| Some((h.clone(), headers.get(h)?.to_str().ok()?.to_string())))
        .collect();
    let answer = tokio::task::spawn_blocking(move || {
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        for (h, v) in &pass {
            builder = builder.header(h, v);
        }
        let req = builder.body(body).map_err(|e| e.to_string())?;
        let mut resp = client().run(req).map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let keep: Vec<(String, String)> = [
            header::CONTENT_TYPE.as_str(),
            header::ETAG.as_str(),
            ANALYZER_HEADER,
        ]
        .iter()
        .filter_map(|h| {
            Some((
                h.to_string(),
                resp.headers().get(*h)?.to_str().ok()?.to_string(),
            ))
        })
        .collect();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((status, keep, bytes))
    })
    .await
    .map_err(|e| HttpError::internal(e.into()))?;
    let (status, keep, bytes) = answer.map_err(|e| {
        HttpError::unavailable(format!(
            "the leading controller {leader} cannot be reached: {e}"
        ))
    })?;
    let status = StatusCode::from_u16(status).map_err(|e| HttpError::internal(e.into()))?;
    let mut out = (status, bytes).into_response();
    for (h, v) in keep {
        if let (Ok(h), Ok(v)) = (HeaderName::try_from(h), v.parse()) {
            out.headers_mut().insert(h, v);
        }
    }
    Ok(out)
}
