//! The server roles behind one HTTP listener: controller, analyzer, or both (`server`).

use crate::config::ServerConfig;
use anyhow::{Context, Result};
use axum::{Json, Router, extract::State, http::StatusCode, routing::get};
use rocemesh_analyzer::Analyzer;
use rocemesh_controller::ControllerState;
use rocemesh_httpd::{Policy, Rule};
use rocemesh_store::Db;
use std::net::SocketAddr;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Which components this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roles {
    /// Registry and pinglists only.
    Controller,
    /// Ingest and SLA only.
    Analyzer,
    /// Both in one process (the default deployment and the demo).
    Both,
}

impl Roles {
    /// True when the controller runs here.
    pub fn controller(self) -> bool {
        matches!(self, Self::Controller | Self::Both)
    }
    /// True when the analyzer runs here.
    pub fn analyzer(self) -> bool {
        matches!(self, Self::Analyzer | Self::Both)
    }
    /// Name used in logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Controller => "controller",
            Self::Analyzer => "analyzer",
            Self::Both => "server",
        }
    }
}

/// A server running in this process.
pub struct RunningServer {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// The analyzer, when this process runs one (demo output, tests).
    pub analyzer: Option<std::sync::Arc<Analyzer>>,
    /// Whether the listener speaks https.
    pub tls: bool,
    cancel: CancellationToken,
    http: JoinHandle<std::io::Result<()>>,
    background: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// Base URL for clients on this machine.
    pub fn url(&self) -> String {
        let host = if self.addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            self.addr.ip().to_string()
        };
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{host}:{}", self.addr.port())
    }

    /// Stops accepting requests, finishes in-flight ones, flushes the analyzer.
    pub async fn shutdown(self) -> Result<()> {
        self.cancel.cancel();
        self.http
            .await
            .context("joining HTTP task")?
            .context("HTTP server")?;
        for task in self.background {
            task.await.context("joining background task")?;
        }
        Ok(())
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(db): State<Db>) -> (StatusCode, Json<serde_json::Value>) {
    match sqlx::query("SELECT 1").execute(db.pool()).await {
        Ok(_) => (StatusCode::OK, Json(serde_json::json!({"status": "ready"}))),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"status": "database unavailable", "error": e.to_string()})),
        ),
    }
}

/// A server assembled but not listening yet ([`start`] serves it; tests inspect the router).
pub struct App {
    /// Every route, inside the request size limits and the token check.
    pub router: Router,
    /// The database pool.
    pub db: Db,
    /// The analyzer, when the roles include it.
    pub analyzer: Option<std::sync::Arc<Analyzer>>,
    /// Background loops; they stop when the token given to [`build`] is cancelled.
    pub background: Vec<JoinHandle<()>>,
}

/// The controller section; a server listening on loopback (a one-machine deployment, whose
/// RNICs are loopback addresses) that names no fabric prefixes takes every address.
fn controller_config(cfg: &ServerConfig) -> rocemesh_controller::ControllerConfig {
    let mut c = cfg.controller.clone();
    if c.rnic_prefixes.is_empty() && cfg.listen.ip().is_loopback() {
        c.rnic_prefixes = rocemesh_controller::prefix::IpPrefix::any();
    }
    c
}

/// Connects the database and builds the routers of `roles` (auth and limits around all).
pub async fn build(cfg: &ServerConfig, roles: Roles, cancel: &CancellationToken) -> Result<App> {
    let tokens = rocemesh_httpd::Tokens::load(&cfg.auth)?;
    let db = Db::connect(&cfg.database).await?;
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(db.clone());
    // The API's routes, each declared with who may call it (the token check's rules).
    let mut api = crate::openapi::routes(roles);
    let mut metrics = Vec::new();
    let mut background = Vec::new();
    let mut controller = None;
    if roles.controller() {
        let state = ControllerState::new(db.clone(), controller_config(cfg))
            .await
            .context("starting controller")?;
        controller = Some(state.clone());
        metrics.push(rocemesh_controller::metrics::collector(&state));
        // Task skeletons are re-inferred from uploaded throughput every skeleton_interval_ms.
        background.push(tokio::spawn(
            state.clone().run_skeleton_loop(cancel.child_token()),
        ));
        // Scale-out: leader lease and analyzer shard owners (returns at once when off).
        background.push(tokio::spawn(
            state.clone().run_scaleout_loop(cancel.child_token()),
        ));
        api = api.merge(rocemesh_controller::routes().with_state(state));
    }
    let mut analyzer = None;
    if roles.analyzer() {
        let a = Analyzer::new(db.clone(), cfg.analyzer.clone())
            .await
            .context("starting analyzer")?;
        api = api.merge(rocemesh_analyzer::routes().with_state(a.clone()));
        background.push(tokio::spawn(rocemesh_analyzer::run(
            a.clone(),
            cancel.child_token(),
        )));
        analyzer = Some(a.clone());
        if let Some(c) = controller.clone() {
            // Flow blame weighs flows by the throughput the controller samples.
            a.set_throughput(std::sync::Arc::new(move |rnic| c.throughput_rate(rnic)));
        }
        // Alert webhooks follow the problems the analyzer stores.
        let alerts = rocemesh_alerts::Alerts::new(db.clone(), cfg.alerts.clone())
            .context("starting alerts")?;
        metrics.push(rocemesh_alerts::collector(&alerts));
        api = api.merge(rocemesh_alerts::routes().with_state(alerts.clone()));
        background.push(tokio::spawn(rocemesh_alerts::run(
            alerts,
            cancel.child_token(),
        )));
        if roles.controller() {
            // Priorities need both the tasks (controller) and the traced paths (analyzer).
            let impact = rocemesh_impact::Impact::new(db.clone(), cfg.impact.clone(), a.clone())
                .context("starting impact")?;
            if let Some(c) = &controller {
                // Verdicts judge hang/slow windows on the controller's throughput rings.
                impact.set_throughput(std::sync::Arc::new(RankThroughput(c.clone())));
            }
            api = api.merge(rocemesh_impact::routes().with_state(impact.clone()));
            background.push(tokio::spawn(rocemesh_impact::run(
                impact,
                cancel.child_token(),
            )));
        }
    }
    if cfg.kubernetes.enabled {
        background.push(kubernetes(cfg, controller, analyzer.clone(), cancel).await?);
    }
    app = app.merge(rocemesh_analyzer::metrics_router(analyzer.clone(), metrics));
    // The operator's dashboard at `/` (its panels say when a role's endpoints are absent).
    app = app.merge(rocemesh_dashboard::router());
    // A token's rights do not depend on the components this process runs: a call to one
    // that runs elsewhere is a 404, as it would be without auth.
    let policy = Policy::new(&api_rules(Roles::Both));
    let app = rocemesh_httpd::limit_bodies(app.merge(api.into_router()));
    let router = rocemesh_httpd::protect(app, tokens, policy);
    Ok(App {
        router,
        db,
        analyzer,
        background,
    })
}

/// Every API route of the components `roles` run, with who may call it.
pub(crate) fn api_rules(roles: Roles) -> Vec<Rule> {
    let mut rules = crate::openapi::own_rules();
    if roles.controller() {
        rules.extend_from_slice(rocemesh_controller::routes().rules());
    }
    if roles.analyzer() {
        rules.extend_from_slice(rocemesh_analyzer::routes().rules());
        rules.extend_from_slice(rocemesh_alerts::routes().rules());
    }
    if roles.controller() && roles.analyzer() {
        rules.extend_from_slice(rocemesh_impact::routes().rules());
    }
    rules
}

/// The controller's throughput rings, as the impact verdict reads them.
struct RankThroughput(ControllerState);

impl rocemesh_impact::health::ThroughputSource for RankThroughput {
    fn series(&self, rnics: &[u32]) -> Result<rocemesh_taskhealth::Throughput, String> {
        self.0.task_throughput(rnics)
    }

    fn dp_groups(&self, task: u32) -> Vec<Vec<u32>> {
        self.0.task_dp_groups(task)
    }
}

/// Starts the Kubernetes loop: task discovery and node placement with the controller,
/// node verdicts from the analyzer's active problems (when `conditions` is on).
async fn kubernetes(
    cfg: &ServerConfig,
    controller: Option<ControllerState>,
    analyzer: Option<std::sync::Arc<Analyzer>>,
    cancel: &CancellationToken,
) -> Result<JoinHandle<()>> {
    let k8s = cfg.kubernetes.clone();
    k8s.validate()?;
    let client = rocemesh_k8s::connect(&k8s)
        .await
        .context("kubernetes.enabled")?;
    let problems = analyzer
        .filter(|_| k8s.conditions)
        .map(|a| -> rocemesh_k8s::ProblemSource {
            std::sync::Arc::new(move || {
                let a = a.clone();
                Box::pin(async move {
                    let lease = rocemesh_analyzer::NODE_VERDICTS_LEASE;
                    a.deployment_problems(lease, rocemesh_proto::now_unix_ms())
                        .await
                        .unwrap_or_else(|e| {
                            tracing::warn!("node verdicts: cannot read the active problems: {e:#}");
                            None
                        })
                })
            })
        });
    tracing::info!(
        tasks = controller.is_some(),
        conditions = problems.is_some(),
        taint = k8s.taint,
        "watching Kubernetes"
    );
    Ok(tokio::spawn(rocemesh_k8s::run(
        client,
        k8s,
        controller,
        problems,
        cancel.child_token(),
    )))
}

/// Connects the database, builds the routers of `roles`, binds and serves.
pub async fn start(cfg: ServerConfig, roles: Roles) -> Result<RunningServer> {
    let tls = rocemesh_httpd::load_tls(cfg.tls.as_ref(), !cfg.auth.tokens.is_empty())?;
    let cancel = CancellationToken::new();
    let App {
        router,
        db,
        analyzer,
        background,
    } = build(&cfg, roles, &cancel).await?;
    let listener =
        rocemesh_httpd::bind(cfg.listen).with_context(|| format!("binding {}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let stop = cancel.clone();
    let https = tls.is_some();
    let http = tokio::spawn(rocemesh_httpd::serve(
        listener,
        tls,
        router,
        cfg.http.clone(),
        async move { stop.cancelled().await },
    ));
    tracing::info!(role = roles.name(), %addr, https, database = ?db.backend(), "listening");
    Ok(RunningServer {
        addr,
        analyzer,
        tls: https,
        cancel,
        http,
        background,
    })
}

/// Resolves when SIGINT or SIGTERM arrives. Both handlers are installed when this is
/// called, not when the future is first polled: a signal that arrives between the call and
/// the await (a supervisor stopping a process that has just printed its address) is kept
/// rather than killing the process by the default action. Call it inside the runtime.
pub fn termination() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let streams =
        signal(SignalKind::terminate()).and_then(|t| Ok((t, signal(SignalKind::interrupt())?)));
    async move {
        match streams {
            Ok((mut term, mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM/SIGINT ({e}); only a kill stops this process");
                std::future::pending::<()>().await;
            }
        }
    }
}
