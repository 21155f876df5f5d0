//! One in-process rocemesh server (both roles, auth off, SQLite in a temporary directory)
//! built by the real `server::build`, shared by the stateful targets of one process.
//!
//! It is seeded with two registered hosts (two RNICs each, under ToRs `t1` and `t2`) and
//! one task over them (id 1), so uploads naming those ids get past the registry checks and
//! reach the aggregation, skeleton and impact code. Its background loops are stopped at
//! once: a request's outcome then depends on the request and the state before it only.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use rocemesh::config::ServerConfig;
use rocemesh::server::{Roles, build};
use rocemesh_analyzer::Analyzer;
use std::sync::{Arc, OnceLock};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The shared server.
pub struct Fixture {
    /// Runs every request (current-thread: requests are handled one at a time).
    pub rt: Runtime,
    /// Every route of the server, as `rocemesh server` serves them.
    pub router: Router,
    /// The analyzer behind `/api/v1/results`.
    pub analyzer: Arc<Analyzer>,
    _dir: tempfile::TempDir,
}

/// A response reduced to what the targets check.
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Fixture {
    /// Sends one request through the router.
    pub fn send(&self, method: &str, uri: &str, content_type: &str, body: &[u8]) -> Reply {
        let Ok(req) = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(Body::from(body.to_vec()))
        else {
            return Reply {
                status: StatusCode::BAD_REQUEST,
                body: Vec::new(),
            };
        };
        self.rt.block_on(async {
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let status = resp.status();
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("in-memory body");
            Reply {
                status,
                body: body.to_vec(),
            }
        })
    }
}

/// The registration of the fixture's host `n` (1 or 2): RNICs `eth0`/`eth1` under `t<n>`.
fn registration(n: u32) -> String {
    format!(
        r#"{{"host":"host-{n}","epoch":1,"rnics":[
            {{"ifname":"eth0","ip":"10.0.{n}.1","qpn":{q0},"port":4791,"tor":"t{n}"}},
            {{"ifname":"eth1","ip":"10.0.{n}.2","qpn":{q1},"port":4791,"tor":"t{n}"}}]}}"#,
        q0 = 100 + n,
        q1 = 200 + n
    )
}

const TASK: &str = r#"{"name":"job-1","endpoints":[
    {"host":"host-1","rnic":"eth0"},{"host":"host-1","rnic":"eth1"},
    {"host":"host-2","rnic":"eth0"},{"host":"host-2","rnic":"eth1"}]}"#;

fn start() -> Fixture {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let cfg = ServerConfig {
        database: dir.path().join("fuzz.db").display().to_string(),
        ..ServerConfig::default()
    };
    let cancel = CancellationToken::new();
    let app = rt
        .block_on(build(&cfg, Roles::Both, &cancel))
        .expect("server builds");
    cancel.cancel();
    let f = Fixture {
        rt,
        router: app.router,
        analyzer: app.analyzer.expect("analyzer role"),
        _dir: dir,
    };
    for n in [1, 2] {
        let r = f.send(
            "POST",
            "/api/v1/agents/register",
            "application/json",
            registration(n).as_bytes(),
        );
        assert_eq!(
            r.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = f.send("POST", "/api/v1/tasks", "application/json", TASK.as_bytes());
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    f.rt.block_on(f.analyzer.refresh_registry())
        .expect("analyzer sees the registry");
    f
}

/// The process's server, started on first use.
pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(start)
}
