//! A local Kubernetes API server for tests: list and watch of pods and nodes with resource
//! versions, label selectors, pagination, bookmarks and expiry (410 Gone as a watch ERROR
//! event, then every resume below the compaction point is refused the same way), plus the
//! node and node-status patches, recording every request. Objects are the Kubernetes
//! OpenAPI types (k8s-openapi) serialized as the real server sends them.

#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// One change, as a watch delivers it.
#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    /// "pods" or "nodes".
    resource: &'static str,
    kind: &'static str,
    object: Value,
}

/// A recorded request: method, path, query, content type, body.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub method: String,
    pub path: String,
    pub query: HashMap<String, String>,
    pub content_type: Option<String>,
    pub body: Value,
}

impl Recorded {
    /// The RBAC (resource, verb) of this request.
    pub(crate) fn rbac(&self) -> (String, &'static str) {
        let parts: Vec<&str> = self
            .path
            .trim_start_matches("/api/v1/")
            .split('/')
            .collect();
        let resource = match parts.as_slice() {
            ["namespaces", _, r] => r.to_string(),
            ["nodes", _, sub] => format!("nodes/{sub}"),
            [r, ..] => r.to_string(),
            [] => String::new(),
        };
        let verb = match (
            self.method.as_str(),
            self.query.get("watch").map(String::as_str),
        ) {
            ("GET", Some("true" | "1")) => "watch",
            ("GET", _) if parts.len() == 2 && parts[0] == "nodes" => "get",
            ("GET", _) => "list",
            ("PATCH", _) => "patch",
            _ => "other",
        };
        (resource, verb)
    }
}

#[derive(Default)]
struct Inner {
    rv: u64,
    pods: BTreeMap<(String, String), Value>,
    nodes: BTreeMap<String, Value>,
    log: Vec<Change>,
    /// Watches from a version below this are expired (410).
    compacted: u64,
    requests: Vec<Recorded>,
}

/// The shared server state.
#[derive(Clone)]
pub(crate) struct ApiServer {
    inner: Arc<Mutex<Inner>>,
    changes: broadcast::Sender<Change>,
    /// Tells open watches to end with 410 Gone.
    expire: broadcast::Sender<()>,
    /// Tells open watches to end normally (as at their timeout).
    end: broadcast::Sender<()>,
    bookmark_every: Duration,
    pub addr: SocketAddr,
}

fn to_value<T: serde::Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).expect("k8s-openapi objects serialize")
}

fn set_rv(obj: &mut Value, rv: u64) {
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
}

impl ApiServer {
    /// Starts on 127.0.0.1; open watches get a bookmark every `bookmark_every`.
    pub(crate) async fn start(bookmark_every: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Self {
            inner: Arc::new(Mutex::new(Inner {
                rv: 100,
                ..Default::default()
            })),
            changes: broadcast::channel(4096).0,
            expire: broadcast::channel(16).0,
            end: broadcast::channel(16).0,
            bookmark_every,
            addr: listener.local_addr().unwrap(),
        };
        let app = Router::new()
            .route("/api/v1/pods", get(list_or_watch))
            .route("/api/v1/namespaces/{ns}/pods", get(list_or_watch))
            .route("/api/v1/nodes", get(list_or_watch))
            .route("/api/v1/nodes/{name}", axum::routing::patch(patch_node))
            .route(
                "/api/v1/nodes/{name}/status",
                axum::routing::patch(patch_node),
            )
            .fallback(unknown)
            .with_state(server.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// A kube client talking plain http to this server.
    pub(crate) fn client(&self) -> kube::Client {
        let cfg = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(cfg).unwrap()
    }

    /// A kubeconfig file naming this server (for a server configured by file).
    pub(crate) fn write_kubeconfig(&self, path: &std::path::Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: test, cluster: {{server: \"http://{}\"}}}}]\n\
             users: [{{name: test, user: {{}}}}]\ncontexts: [{{name: test, context: {{cluster: test, user: test}}}}]\n\
             current-context: test\n",
            self.addr
        );
        std::fs::write(path, text).unwrap();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    fn record_change(
        &self,
        inner: &mut Inner,
        resource: &'static str,
        kind: &'static str,
        object: Value,
    ) {
        let change = Change {
            rv: inner.rv,
            resource,
            kind,
            object,
        };
        inner.log.push(change.clone());
        let _ = self.changes.send(change);
    }

    /// Creates or replaces a pod (ADDED / MODIFIED).
    pub(crate) fn put_pod(&self, pod: &Pod) {
        let mut obj = to_value(pod);
        let key = (
            pod.metadata.namespace.clone().unwrap(),
            pod.metadata.name.clone().unwrap(),
        );
        let mut inner = self.lock();
        inner.rv += 1;
        set_rv(&mut obj, inner.rv);
        let kind = if inner.pods.insert(key, obj.clone()).is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.record_change(&mut inner, "pods", kind, obj);
    }

    /// Deletes a pod (DELETED).
    pub(crate) fn delete_pod(&self, namespace: &str, name: &str) {
        let mut inner = self.lock();
        if let Some(mut obj) = inner.pods.remove(&(namespace.into(), name.into())) {
            inner.rv += 1;
            set_rv(&mut obj, inner.rv);
            self.record_change(&mut inner, "pods", "DELETED", obj);
        }
    }

    /// Creates or replaces a node.
    pub(crate) fn put_node(&self, node: &Node) {
        let mut obj = to_value(node);
        let mut inner = self.lock();
        inner.rv += 1;
        set_rv(&mut obj, inner.rv);
        let name = node.metadata.name.clone().unwrap();
        let kind = if inner.nodes.insert(name, obj.clone()).is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.record_change(&mut inner, "nodes", kind, obj);
    }

    /// The node as stored.
    pub(crate) fn node(&self, name: &str) -> Node {
        serde_json::from_value(self.lock().nodes[name].clone()).unwrap()
    }

    /// A condition of a node.
    pub(crate) fn condition(&self, node: &str, type_: &str) -> Option<NodeCondition> {
        self.node(node)
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == type_))
    }

    /// Compacts the history (every version so far is too old to resume from) and ends every
    /// open watch with 410 Gone, as an API server does after etcd compaction.
    pub(crate) fn expire_watches(&self) {
        let mut inner = self.lock();
        inner.compacted = inner.rv + 1;
        inner.log.clear();
        drop(inner);
        let _ = self.expire.send(());
    }

    /// Ends every open watch normally, as its timeout does: clients resume from the
    /// last version they saw (a bookmark's, if one came).
    pub(crate) fn end_watches(&self) {
        let _ = self.end.send(());
    }

    /// Asserts that every request so far is one `rocemesh_k8s::rbac::REQUESTS` names.
    pub(crate) fn assert_requests_are_listed(&self) {
        let listed: std::collections::BTreeSet<(String, &str)> = rocemesh_k8s::rbac::REQUESTS
            .iter()
            .map(|r| (r.resource.to_string(), r.verb))
            .collect();
        for r in self.requests() {
            assert!(
                listed.contains(&r.rbac()),
                "request {} {} ({:?}) is not in rbac::REQUESTS",
                r.method,
                r.path,
                r.rbac()
            );
        }
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    fn record(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: Value) {
        let query = uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), urlencoding_decode(v)))
                    .collect()
            })
            .unwrap_or_default();
        self.lock().requests.push(Recorded {
            method: method.to_string(),
            path: uri.path().to_string(),
            query,
            content_type: headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body,
        });
    }
}

/// Percent-decoding of a query value (selectors carry `/` and `=`).
fn urlencoding_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ASCII hex");
                out.push(u8::from_str_radix(hex, 16).expect("percent escape"));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// A parsed label selector: `key`, `!key`, `key=value`, `key==value`, `key!=value` terms.
fn selector_matches(selector: &str, obj: &Value) -> Result<bool, String> {
    let labels = &obj["metadata"]["labels"];
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let ok = if let Some((k, v)) = term.split_once("!=") {
            labels[k].as_str() != Some(v)
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels[k].as_str() == Some(v)
        } else if let Some(k) = term.strip_prefix('!') {
            labels.get(k).is_none()
        } else if term
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "./-_".contains(c))
        {
            labels.get(term).is_some()
        } else {
            return Err(format!("unsupported selector term {term:?}"));
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn error(code: StatusCode, reason: &str, message: &str) -> Response {
    (code, axum::Json(status(code.as_u16(), reason, message))).into_response()
}

async fn unknown(
    State(s): State<ApiServer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    s.record(&method, &uri, &headers, Value::Null);
    error(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("no route {uri}"),
    )
}

struct Scope {
    resource: &'static str,
    namespace: Option<String>,
    selector: String,
}

impl Scope {
    fn matches(&self, resource: &str, obj: &Value) -> bool {
        resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns))
            && selector_matches(&self.selector, obj).unwrap_or(false)
    }
}

async fn list_or_watch(
    State(s): State<ApiServer>,
    ns: Option<Path<String>>,
    Query(q): Query<HashMap<String, String>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    s.record(&method, &uri, &headers, Value::Null);
    let resource = if uri.path().ends_with("/pods") {
        "pods"
    } else {
        "nodes"
    };
    let selector = q.get("labelSelector").cloned().unwrap_or_default();
    if let Err(e) = selector_matches(&selector, &json!({})) {
        return error(StatusCode::BAD_REQUEST, "BadRequest", &e);
    }
    let scope = Scope {
        resource,
        namespace: ns.map(|Path(n)| n),
        selector,
    };
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        let Some(since) = q.get("resourceVersion").and_then(|v| v.parse::<u64>().ok()) else {
            return error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "watch needs a resourceVersion here",
            );
        };
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(290), Duration::from_secs);
        let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
        return watch(s, scope, since, timeout, bookmarks);
    }
    list(&s, &scope, &q)
}

fn list(s: &ApiServer, scope: &Scope, q: &HashMap<String, String>) -> Response {
    let inner = s.lock();
    let all: Vec<Value> = match scope.resource {
        "pods" => inner.pods.values().cloned().collect(),
        _ => inner.nodes.values().cloned().collect(),
    };
    let items: Vec<Value> = all
        .into_iter()
        .filter(|o| scope.matches(scope.resource, o))
        .collect();
    let offset: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(usize::MAX);
    let end = offset.saturating_add(limit).min(items.len());
    let mut metadata = json!({"resourceVersion": inner.rv.to_string()});
    if end < items.len() {
        metadata["continue"] = json!(end.to_string());
    }
    let kind = if scope.resource == "pods" {
        "PodList"
    } else {
        "NodeList"
    };
    axum::Json(
        json!({"kind": kind, "apiVersion": "v1", "metadata": metadata,
                      "items": items[offset.min(end)..end]}),
    )
    .into_response()
}

fn watch(s: ApiServer, scope: Scope, since: u64, timeout: Duration, bookmarks: bool) -> Response {
    let (tx, rx) = mpsc::channel::<String>(256);
    let line =
        |kind: &str, object: &Value| format!("{}\n", json!({"type": kind, "object": object}));
    tokio::spawn(async move {
        let mut changes = s.changes.subscribe();
        let mut expire = s.expire.subscribe();
        let mut end = s.end.subscribe();
        let (backlog, expired) = {
            let inner = s.lock();
            (
                inner
                    .log
                    .iter()
                    .filter(|c| c.rv > since)
                    .cloned()
                    .collect::<Vec<_>>(),
                since < inner.compacted,
            )
        };
        let gone = line("ERROR", &status(410, "Expired", "too old resource version"));
        if expired {
            let _ = tx.send(gone).await;
            return;
        }
        let mut last = since;
        for c in backlog {
            last = c.rv;
            if scope.matches(c.resource, &c.object)
                && tx.send(line(c.kind, &c.object)).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(s.bookmark_every);
        loop {
            tokio::select! {
                () = &mut deadline => return,
                _ = end.recv() => return,
                _ = expire.recv() => {
                    let _ = tx.send(gone).await;
                    return;
                }
                c = changes.recv() => match c {
                    Ok(c) if c.rv > last => {
                        last = c.rv;
                        if scope.matches(c.resource, &c.object) && tx.send(line(c.kind, &c.object)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let kind = if scope.resource == "pods" { "Pod" } else { "Node" };
                    // As the real server: a bookmark names the version every change up to
                    // which was delivered, never the store's newest, whose change may still
                    // be queued for this watch (resuming there would skip it).
                    let mark = json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": last.to_string()}});
                    if tx.send(line("BOOKMARK", &mark)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|l| (Ok::<_, Infallible>(Bytes::from(l)), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(body))
        .unwrap()
}

/// `PATCH /api/v1/nodes/{name}` (JSON merge patch of the taints, over the resourceVersion
/// it names: 409 on a stale one) and `/status` (strategic merge of conditions by type).
async fn patch_node(
    State(s): State<ApiServer>,
    Path(name): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        s.record(&method, &uri, &headers, Value::Null);
        return error(StatusCode::BAD_REQUEST, "BadRequest", "body is not JSON");
    };
    s.record(&method, &uri, &headers, patch.clone());
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let status_sub = uri.path().ends_with("/status");
    let mut inner = s.lock();
    let Some(mut node) = inner.nodes.get(&name).cloned() else {
        return error(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("nodes {name:?} not found"),
        );
    };
    if status_sub {
        if content_type != "application/strategic-merge-patch+json" {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                content_type,
            );
        }
        let Some(conditions) = patch["status"]["conditions"].as_array() else {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "only status.conditions is patched here",
            );
        };
        if let Err(e) = serde_json::from_value::<Vec<NodeCondition>>(json!(conditions)) {
            return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e.to_string());
        }
        let current = node["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut merged = current;
        for c in conditions {
            match merged.iter_mut().find(|m| m["type"] == c["type"]) {
                Some(m) => {
                    for (k, v) in c.as_object().unwrap() {
                        m[k] = v.clone();
                    }
                }
                None => merged.push(c.clone()),
            }
        }
        node["status"]["conditions"] = json!(merged);
    } else {
        if content_type != "application/merge-patch+json" {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                content_type,
            );
        }
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str()
            && Some(rv) != node["metadata"]["resourceVersion"].as_str()
        {
            return error(
                StatusCode::CONFLICT,
                "Conflict",
                "the object has been modified",
            );
        }
        let Some(taints) = patch["spec"].get("taints") else {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "only spec.taints is patched here",
            );
        };
        node["spec"]["taints"] = taints.clone();
    }
    if let Err(e) = serde_json::from_value::<Node>(node.clone()) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e.to_string());
    }
    inner.rv += 1;
    let rv = inner.rv;
    set_rv(&mut node, rv);
    inner.nodes.insert(name, node.clone());
    s.record_change(&mut inner, "nodes", "MODIFIED", node.clone());
    axum::Json(node).into_response()
}
