//! The server roles behind one HTTP listener: controller, analyzer, or both (`server`).

use crate::config::ServerConfig;
use anyhow::{Context, Result};
use axum::{Json, Router, extract::State, http::StatusCode, routing::get};
use rocemesh_analyzer::Analyzer;
use rocemesh_controller::ControllerState;
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
    fn controller(self) -> bool {
        matches!(self, Self::Controller | Self::Both)
    }
    fn analyzer(self) -> bool {
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
        format!("http://{host}:{}", self.addr.port())
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

/// Connects the database, builds the routers of `roles`, binds and serves.
pub async fn start(cfg: ServerConfig, roles: Roles) -> Result<RunningServer> {
    let db = Db::connect(&cfg.database).await?;
    let cancel = CancellationToken::new();
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(db.clone());
    if roles.controller() {
        let state = ControllerState::new(db.clone(), cfg.controller.clone())
            .await
            .context("starting controller")?;
        app = app.merge(rocemesh_controller::router(state));
    }
    let mut background = Vec::new();
    let mut analyzer = None;
    if roles.analyzer() {
        let a = Analyzer::new(db.clone(), cfg.analyzer.clone())
            .await
            .context("starting analyzer")?;
        app = app.merge(rocemesh_analyzer::router(a.clone()));
        background.push(tokio::spawn(rocemesh_analyzer::run(
            a.clone(),
            cancel.child_token(),
        )));
        analyzer = Some(a);
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let stop = cancel.clone();
    let http = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    tracing::info!(role = roles.name(), %addr, database = ?db.backend(), "listening");
    Ok(RunningServer {
        addr,
        analyzer,
        cancel,
        http,
        background,
    })
}

/// Resolves when SIGINT or SIGTERM arrives.
pub async fn termination() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGTERM ({e}); only Ctrl-C stops this process");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
