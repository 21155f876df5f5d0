//! REST API of the analyzer under `/api/v1`.

use crate::advice::{Avoid, PairEnd, PortAdvice, advise};
use crate::diagnosis::engine::BaselineVote;
use crate::diagnosis::fabric::FabricMap;
use crate::host_keys::Proof;
use crate::ingest::IngestStats;
use crate::ingest::Refusal;
use crate::read;
use crate::registry::Registry;
use crate::sla::{self, SlaQuery};
use crate::{AcceptError, Analyzer};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, Method, StatusCode, header};
use rocemesh_httpd::Access::{Agent, Read};
use rocemesh_httpd::{ApiPath, ApiQuery, HttpError, Role, Routes};
use rocemesh_proto::api::{
    API_PREFIX, ErrorBody, Priority, Problem, ProblemState, SlaRow, SlaScope, UploadAck,
};
use rocemesh_proto::batch::{CONTENT_TYPE, MAX_BATCH_BYTES, peek_host_id};
use rocemesh_proto::host_key;
use rocemesh_proto::path::TracedPath;
use rocemesh_store::StateFilter;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// The analyzer's routes under `/api/v1`, each with who may call it.
pub fn routes() -> Routes<Arc<Analyzer>> {
    let at = |path: &str| format!("{API_PREFIX}{path}");
    Routes::new()
        .route(
            Method::POST,
            &at("/results"),
            Agent,
            post_results.layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)),
        )
        .route(Method::GET, &at("/sla"), Read, get_sla)
        .route(Method::GET, &at("/sla/latest"), Read, get_latest)
        .route(Method::GET, &at("/ingest/stats"), Read, get_stats)
        .route(Method::GET, &at("/problems"), Read, get_problems)
        .route(Method::GET, &at("/problems/{id}"), Read, get_problem)
        .route(Method::GET, &at("/diagnosis/baseline"), Read, get_baseline)
        .route(Method::GET, &at("/paths"), Read, get_paths)
        .route(Method::GET, &at("/paths/advice"), Read, get_advice)
}

/// The analyzer's routes with their state, without the token check (tests).
pub fn router(analyzer: Arc<Analyzer>) -> axum::Router {
    routes().with_state(analyzer).into_router()
}

/// The analyzer's part of the served OpenAPI document, from the handlers' annotations.
pub fn openapi() -> utoipa::openapi::OpenApi {
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(
        post_results,
        get_sla,
        get_latest,
        get_stats,
        get_problems,
        get_problem,
        get_baseline,
        get_paths,
        get_advice,
    ))]
    struct Doc;
    <Doc as utoipa::OpenApi>::openapi()
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

/// Result batch upload from an agent (`proto::batch` binary body).
#[utoipa::path(post, path = "/api/v1/results", operation_id = "uploadProbeResults", tag = "results",
    request_body(content = String, content_type = "application/vnd.rocemesh.results.v1",
        description = "A `proto::batch` encoded batch (application/octet-stream also accepted)"),
    params(("x-rocemesh-host-key" = Option<String>, Header,
        description = "The uploading host's key from its registration (required with auth on)")),
    responses((status = 200, body = UploadAck), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "The caller did not prove the batch's host"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "Not made durable (database unavailable or write-ahead log full): send again")))]
async fn post_results(
    State(a): State<Arc<Analyzer>>,
    caller: Option<Extension<Role>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<UploadAck>, HttpError> {
    if !is_batch_content_type(&headers) {
        a.count_refused_upload(Refusal::ContentType);
        return Err(HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type must be {CONTENT_TYPE} or application/octet-stream"),
        ));
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            a.count_refused_upload(Refusal::TooLarge);
            return Err(HttpError::new(
                e.status(),
                format!("batch larger than {MAX_BATCH_BYTES} bytes"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    // With auth on, a batch counts for its host only when the caller holds that host's
    // upload key (else any agent token could fill another host's de-duplication window).
    if caller.is_some()
        && let Some(host_id) = peek_host_id(&body)
    {
        let key = headers.get(host_key::HEADER).and_then(|v| v.to_str().ok());
        match a.prove_host(host_id, key).await {
            Ok(Proof::Proven) => {}
            Ok(Proof::Refused(why)) => {
                a.count_refused_upload(Refusal::WrongHost);
                return Err(HttpError::forbidden(format!(
                    "batch names host {host_id}: {why}"
                )));
            }
            Err(e) => return Err(HttpError::internal(e)),
        }
    }
    match a.accept(body, rocemesh_proto::now_unix_ms()).await {
        Ok(ack) => Ok(Json(ack)),
        Err(AcceptError::Batch(e)) => Err(HttpError::bad_request(e.to_string())),
        // Not durable: the agent keeps the batch and sends it again.
        Err(AcceptError::Wal(e)) => Err(HttpError::unavailable(e.to_string())),
    }
}

/// Stored SLA rows of one scope, newest period first.
#[utoipa::path(get, path = "/api/v1/sla", operation_id = "listSlaRows", tag = "sla",
    params(("scope" = SlaScope, Query, description = "cluster, tor_pair, rnic, task or service"),
        ("key" = Option<String>, Query, description = "Only this key (`tor-a->tor-b`, an RNIC id, a task name)"),
        ("from_ms" = Option<i64>, Query, description = "Periods starting at or after (ms since the Unix epoch)"),
        ("to_ms" = Option<i64>, Query, description = "Periods starting before"),
        ("limit" = Option<u32>, Query, description = "Most rows (default 100, at most 10,000)")),
    responses((status = 200, body = Vec<SlaRow>), (status = 400, body = ErrorBody)))]
async fn get_sla(
    State(a): State<Arc<Analyzer>>,
    ApiQuery(q): ApiQuery<SlaQuery>,
) -> Result<Json<Vec<SlaRow>>, HttpError> {
    q.checked_limit().map_err(HttpError::bad_request)?;
    sla::query(a.db(), &q)
        .await
        .map(Json)
        .map_err(HttpError::internal)
}

/// `GET /api/v1/sla/latest` parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct LatestQuery {
    /// Scope to list.
    scope: SlaScope,
    /// Only this key.
    key: Option<String>,
}

/// SLA rows of the latest closed period.
#[utoipa::path(get, path = "/api/v1/sla/latest", operation_id = "getLatestSla", tag = "sla", params(LatestQuery),
    responses((status = 200, body = Vec<SlaRow>), (status = 400, body = ErrorBody)))]
async fn get_latest(
    State(a): State<Arc<Analyzer>>,
    ApiQuery(q): ApiQuery<LatestQuery>,
) -> Result<Json<Vec<SlaRow>>, HttpError> {
    let rows = a.latest();
    Ok(Json(
        rows.iter()
            .filter(|r| r.scope == q.scope && q.key.as_ref().is_none_or(|k| *k == r.key))
            .cloned()
            .collect(),
    ))
}

/// Ingest counters: what came in and what was thrown away, and why.
#[utoipa::path(get, path = "/api/v1/ingest/stats", operation_id = "getIngestStats", tag = "results",
    responses((status = 200, description = "Ingest counters (JSON object)", content_type = "application/json")))]
async fn get_stats(State(a): State<Arc<Analyzer>>) -> Json<IngestStats> {
    Json(a.stats())
}

/// Problems a list names when it names no `limit`.
const DEFAULT_PROBLEMS: u32 = 100;
/// Largest `limit` of a problem list.
const MAX_PROBLEMS: u32 = 10_000;

/// `GET /api/v1/problems` parameters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ProblemsQuery {
    /// `active` (default), `resolved` or `all`.
    #[param(value_type = Option<String>)]
    state: Option<StateFilter>,
    /// Only problems last seen at or after this time (ms since the Unix epoch).
    since_ms: Option<i64>,
    /// Most problems to return (default 100, at most 10,000).
    limit: Option<u32>,
    /// Only problems the impact loop gave this priority (`P0`, `P1`, `P2`).
    priority: Option<Priority>,
}

/// Problems, most recently seen first; active ones as diagnosed this very tick.
#[utoipa::path(get, path = "/api/v1/problems", operation_id = "listProblems", tag = "problems", params(ProblemsQuery),
    responses((status = 200, body = Vec<Problem>), (status = 400, body = ErrorBody)))]
async fn get_problems(
    State(a): State<Arc<Analyzer>>,
    ApiQuery(q): ApiQuery<ProblemsQuery>,
) -> Result<Json<Vec<Problem>>, HttpError> {
    let limit = q.limit.unwrap_or(DEFAULT_PROBLEMS);
    if !(1..=MAX_PROBLEMS).contains(&limit) {
        return Err(HttpError::bad_request(format!(
            "limit must be between 1 and {MAX_PROBLEMS}, got {limit}"
        )));
    }
    let state = q.state.unwrap_or(StateFilter::Active);
    let since = q.since_ms.unwrap_or(i64::MIN);
    let active = a.problems(ProblemState::Active);
    // One of several analyzer instances: the others' problems are only in the database.
    let mut list: Vec<Problem> = if state == StateFilter::Active && a.shards().is_none() {
        active
            .into_iter()
            .filter(|p| p.last_seen_ms >= since)
            .collect()
    } else {
        let mut stored = a
            .db()
            .problems()
            .query(state, q.priority, since, limit)
            .await
            .map_err(HttpError::internal)?;
        // Stored active rows are refreshed only on change: show the live version.
        for p in &mut stored {
            if let Some(live) = active.iter().find(|l| l.id == p.id && p.id != 0) {
                p.clone_from(live);
            }
        }
        stored
    };
    // Priorities live only in the database (the impact loop writes them).
    a.db()
        .problems()
        .attach_impact(&mut list)
        .await
        .map_err(HttpError::internal)?;
    if let Some(want) = q.priority {
        list.retain(|p| p.priority == Some(want));
    }
    list.truncate(limit as usize);
    Ok(Json(list))
}

/// One problem, active (live) or stored.
#[utoipa::path(get, path = "/api/v1/problems/{id}", operation_id = "getProblem", tag = "problems",
    params(("id" = i64, Path, description = "Problem id")),
    responses((status = 200, body = Problem), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_problem(
    State(a): State<Arc<Analyzer>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Problem>, HttpError> {
    if let Some(p) = a
        .problems(ProblemState::Active)
        .into_iter()
        .find(|p| p.id == id)
    {
        let mut one = [p];
        a.db()
            .problems()
            .attach_impact(&mut one)
            .await
            .map_err(HttpError::internal)?;
        let [p] = one;
        return Ok(Json(p));
    }
    match a
        .db()
        .problems()
        .get(id)
        .await
        .map_err(HttpError::internal)?
    {
        Some(p) => Ok(Json(p)),
        None => Err(HttpError::not_found(format!("no problem {id}"))),
    }
}

/// The Algorithm 1 baseline's votes (R-Pingmesh), for comparison with the diagnosis.
#[utoipa::path(get, path = "/api/v1/diagnosis/baseline", operation_id = "getDiagnosisBaseline", tag = "problems",
    responses((status = 200, description = "Baseline votes (JSON array)", content_type = "application/json")))]
async fn get_baseline(State(a): State<Arc<Analyzer>>) -> Json<Vec<BaselineVote>> {
    Json(a.baseline_votes().as_ref().clone())
}

/// Traced paths a list names when it names no `limit`.
const DEFAULT_PATHS: u32 = 100;
/// Largest `limit` of a path list.
const MAX_PATHS: u32 = 1_000;

/// `GET /api/v1/paths` parameters: each given end narrows the list; an end is
/// named by RNIC (registry id or `host/ifname`) or by ToR, not both.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathsQuery {
    src_rnic: Option<String>,
    dst_rnic: Option<String>,
    src_tor: Option<String>,
    dst_tor: Option<String>,
    /// Most 5-tuples to return (default 100, at most 1,000).
    limit: Option<u32>,
}

/// Which way a traced packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PathDirection {
    /// A probe, traced by its prober.
    Probe,
    /// The ACK of a probe, traced by the responder.
    Ack,
}

/// One traced path as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PathInfo {
    /// Source address of the traced 5-tuple.
    #[schema(value_type = String)]
    pub src: IpAddr,
    /// Destination address.
    #[schema(value_type = String)]
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Probe or ACK direction.
    pub direction: PathDirection,
    /// True when the trace reached the destination.
    pub reached: bool,
    /// When the trace finished (ms since the Unix epoch).
    pub traced_at_ms: i64,
    /// Hop addresses by TTL; `null` where nothing answered.
    #[schema(value_type = Vec<Option<String>>)]
    pub hops: Vec<Option<IpAddr>>,
    /// Hop names by TTL: the fabric map's switch, else the registry's RNIC
    /// (`host/ifname`), else the address; `"*"` where nothing answered.
    pub hop_names: Vec<String>,
}

/// `GET /api/v1/paths` answer: the latest trace of each matching 5-tuple, newest
/// first, followed by its last complete trace when the latest one broke off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PathsReply {
    /// Traced paths.
    pub paths: Vec<PathInfo>,
}

/// The RNIC a query names by registry id or `host/ifname`.
fn find_rnic<'a>(registry: &'a Registry, spec: &str) -> Option<&'a crate::registry::RnicMeta> {
    match spec.parse::<u32>() {
        Ok(id) => registry.meta(id),
        Err(_) => registry.rnic_by_name(spec).and_then(|id| registry.meta(id)),
    }
}

/// One end of a path filter, resolved against the registry.
enum EndFilter {
    Any,
    Ip(IpAddr),
    Tor(String),
}

impl EndFilter {
    fn resolve(
        registry: &Registry,
        rnic: Option<&str>,
        tor: Option<String>,
        end: &str,
    ) -> Result<Self, HttpError> {
        match (rnic, tor) {
            (Some(_), Some(_)) => Err(HttpError::bad_request(format!(
                "give {end}_rnic or {end}_tor, not both"
            ))),
            (Some(spec), None) => find_rnic(registry, spec)
                .map(|m| Self::Ip(m.ip))
                .ok_or_else(|| HttpError::not_found(format!("no RNIC {spec:?}"))),
            (None, Some(tor)) => Ok(Self::Tor(tor)),
            (None, None) => Ok(Self::Any),
        }
    }

    fn matches(&self, registry: &Registry, ip: IpAddr) -> bool {
        match self {
            Self::Any => true,
            Self::Ip(want) => *want == ip,
            Self::Tor(tor) => registry
                .rnic_by_ip(ip)
                .and_then(|id| registry.get(id))
                .is_some_and(|e| registry.tor_name(e.tor) == tor),
        }
    }
}

fn path_info(map: &FabricMap, registry: &Registry, p: &TracedPath) -> PathInfo {
    let name = |hop: &Option<IpAddr>| match *hop {
        None => "*".to_string(),
        Some(ip) if map.knows_device(&map.device(ip)) => map.device(ip).to_string(),
        Some(ip) => registry
            .rnic_by_ip(ip)
            .and_then(|id| registry.meta(id))
            .map_or_else(|| ip.to_string(), |m| m.name.clone()),
    };
    PathInfo {
        src: p.src,
        dst: p.dst,
        src_port: p.src_port,
        dst_port: p.dst_port,
        direction: if p.ack_direction {
            PathDirection::Ack
        } else {
            PathDirection::Probe
        },
        reached: p.reached,
        traced_at_ms: i64::try_from(p.traced_at_unix_ns / 1_000_000).unwrap_or(i64::MAX),
        hop_names: p.hops.iter().map(name).collect(),
        hops: p.hops.clone(),
    }
}

/// The latest traced paths the diagnosis holds, filtered by their ends.
#[utoipa::path(get, path = "/api/v1/paths", operation_id = "listTracedPaths", tag = "problems",
    params(("src_rnic" = Option<String>, Query, description = "Source RNIC: id or `host/ifname`"),
        ("dst_rnic" = Option<String>, Query, description = "Destination RNIC: id or `host/ifname`"),
        ("src_tor" = Option<String>, Query, description = "Source ToR (instead of src_rnic)"),
        ("dst_tor" = Option<String>, Query, description = "Destination ToR (instead of dst_rnic)"),
        ("limit" = Option<u32>, Query, description = "Most 5-tuples (default 100, at most 1,000)")),
    responses((status = 200, body = PathsReply), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_paths(
    State(a): State<Arc<Analyzer>>,
    ApiQuery(q): ApiQuery<PathsQuery>,
) -> Result<Json<PathsReply>, HttpError> {
    let limit = q.limit.unwrap_or(DEFAULT_PATHS);
    if !(1..=MAX_PATHS).contains(&limit) {
        return Err(HttpError::bad_request(format!(
            "limit must be between 1 and {MAX_PATHS}, got {limit}"
        )));
    }
    let registry = read(&a.registry);
    let src = EndFilter::resolve(&registry, q.src_rnic.as_deref(), q.src_tor, "src")?;
    let dst = EndFilter::resolve(&registry, q.dst_rnic.as_deref(), q.dst_tor, "dst")?;
    // The scan visits every traced 5-tuple: keep it off the async workers.
    let scan = tokio::task::spawn_blocking(move || {
        let traces = a.diagnosis.traces(
            |p| src.matches(&registry, p.src) && dst.matches(&registry, p.dst),
            limit as usize,
        );
        let map = a.diagnosis.map();
        let mut paths = Vec::with_capacity(traces.len());
        for t in &traces {
            paths.push(path_info(map, &registry, &t.latest));
            if let Some(c) = t.complete.as_ref().filter(|_| !t.latest.reached) {
                paths.push(path_info(map, &registry, c));
            }
        }
        PathsReply { paths }
    });
    scan.await
        .map(Json)
        .map_err(|e| HttpError::internal(anyhow::Error::new(e).context("path scan failed")))
}

/// Traced 5-tuples one advice reads at most (a pair has a handful; this bounds the scan's copy).
const MAX_ADVICE_TRACES: usize = 4_096;

/// `GET /api/v1/paths/advice` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdviceQuery {
    src: String,
    dst: String,
}

fn pair_end(registry: &Registry, spec: &str, end: &str) -> Result<PairEnd, HttpError> {
    find_rnic(registry, spec)
        .map(|m| PairEnd {
            name: m.name.clone(),
            host: m.host.clone(),
            ip: m.ip,
        })
        .ok_or_else(|| HttpError::not_found(format!("no {end} RNIC {spec:?}")))
}

/// Source ports for an RNIC pair whose traced paths avoid every open problem (C4P).
#[utoipa::path(get, path = "/api/v1/paths/advice", operation_id = "getPortAdvice", tag = "problems",
    params(("src" = String, Query, description = "Source RNIC: id or `host/ifname`"),
        ("dst" = String, Query, description = "Destination RNIC: id or `host/ifname`")),
    responses((status = 200, body = PortAdvice), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_advice(
    State(a): State<Arc<Analyzer>>,
    ApiQuery(q): ApiQuery<AdviceQuery>,
) -> Result<Json<PortAdvice>, HttpError> {
    let registry = read(&a.registry);
    let src = pair_end(&registry, &q.src, "source")?;
    let dst = pair_end(&registry, &q.dst, "destination")?;
    if src.ip == dst.ip {
        return Err(HttpError::bad_request("src and dst are the same RNIC"));
    }
    // With several analyzers, the others' problems are only in the database.
    let problems = if a.shards().is_some() {
        a.db()
            .problems()
            .query(StateFilter::Active, None, i64::MIN, MAX_PROBLEMS)
            .await
            .map_err(HttpError::internal)?
    } else {
        a.problems(ProblemState::Active)
    };
    let avoid = Avoid::from_problems(&problems);
    let scan = tokio::task::spawn_blocking(move || {
        let (s, d) = (src.ip, dst.ip);
        let traces: Vec<TracedPath> = a
            .diagnosis
            .traces(
                |p| (p.src == s && p.dst == d) || (p.src == d && p.dst == s),
                MAX_ADVICE_TRACES,
            )
            .into_iter()
            .map(|t| Arc::unwrap_or_clone(t.latest))
            .collect();
        advise(a.diagnosis.map(), &src, &dst, &traces, &avoid)
    });
    scan.await
        .map(Json)
        .map_err(|e| HttpError::internal(anyhow::Error::new(e).context("advice failed")))
}
