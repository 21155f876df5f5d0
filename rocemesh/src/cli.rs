//! Command-line surface of the `rocemesh` binary and dispatch to the roles.

use crate::config::ServerConfig;
use crate::server::Roles;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// rocemesh: active-probing monitor for RoCE fabrics.
#[derive(Debug, Parser)]
#[command(name = "rocemesh", version, about)]
pub struct Cli {
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, global = true)]
    pub log_json: bool,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The roles and tools of the binary.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-host agent: probe, respond, upload.
    Agent(crate::agent_cmd::AgentArgs),
    /// Controller only: registry, topology, pinglists.
    Controller(ServerArgs),
    /// Analyzer only: result ingest, SLA aggregation.
    Analyzer(ServerArgs),
    /// Controller and analyzer in one process.
    Server(ServerArgs),
    /// Operator CLI over the REST API: status, problems, rnic, path, advise, verdict, tasks.
    Ctl(crate::ctl::CtlArgs),
}

impl Command {
    /// Daemons log at info; the interactive tools print their own output and log warnings only.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Command::Ctl(_) => "warn",
            _ => "info",
        }
    }
}

/// Options shared by the server roles; flags override the config file.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// TOML config file (listen, database, [controller], [analyzer]).
    #[arg(long, env = "ROCEMESH_CONFIG")]
    pub config: Option<PathBuf>,
    /// Listen address (default 0.0.0.0:8080).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Database URL: sqlite://FILE (default sqlite://rocemesh.db) or postgres://...
    #[arg(long, env = "ROCEMESH_DATABASE")]
    pub database: Option<String>,
}

impl ServerArgs {
    /// The effective configuration: file (if any), then flags.
    pub fn resolve(&self) -> Result<ServerConfig> {
        let mut cfg = match &self.config {
            Some(path) => ServerConfig::load(path)?,
            None => ServerConfig::default(),
        };
        if let Some(listen) = self.listen {
            cfg.listen = listen;
        }
        if let Some(db) = &self.database {
            cfg.database = db.clone();
        }
        Ok(cfg)
    }
}

/// Runs the parsed command to completion.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Agent(args) => crate::agent_cmd::run(args),
        Command::Controller(args) => serve(args, Roles::Controller),
        Command::Analyzer(args) => serve(args, Roles::Analyzer),
        Command::Server(args) => serve(args, Roles::Both),
        Command::Ctl(args) => crate::ctl::run(args),
    }
}

fn serve(args: ServerArgs, roles: Roles) -> Result<()> {
    let cfg = args.resolve()?;
    // Thousands of agent connections need more than the usual 1,024 descriptors; the
    // outcome is logged, and the connection cap fits whatever limit is in force.
    let _ = rocemesh_httpd::raise_fd_limit();
    runtime()?.block_on(async move {
        // Handlers first: a SIGTERM during start-up stops the server cleanly once started.
        let stop = crate::server::termination();
        let server = crate::server::start(cfg, roles).await?;
        // A machine-readable line for scripts and tests that start the server on port 0.
        println!("rocemesh {} listening on {}", roles.name(), server.url());
        stop.await;
        tracing::info!("shutting down");
        server.shutdown().await
    })
}

/// The multi-threaded tokio runtime of the server roles (and of the labs that start them).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio runtime")
}
