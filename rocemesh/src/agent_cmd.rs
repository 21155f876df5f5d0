//! `rocemesh agent`: runs the per-host agent until SIGTERM/SIGINT, then shuts down cleanly.

use anyhow::{Context, Result, bail};
use clap::Args;
use rocemesh_agent::{AgentConfig, RnicConfig};
use std::path::PathBuf;

/// Agent options; flags override the config file.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// TOML agent config file (same keys as the flags, `[[rnics]]` tables).
    #[arg(long, env = "ROCEMESH_AGENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Controller base URL, e.g. https://controller:8080 (http:// without TLS).
    #[arg(long, env = "ROCEMESH_CONTROLLER")]
    pub controller: Option<String>,
    /// Analyzer base URL (default: what the controller says, else the controller URL).
    #[arg(long, env = "ROCEMESH_ANALYZER")]
    pub analyzer: Option<String>,
    /// Host name to register as (default: this machine's hostname).
    #[arg(long, env = "ROCEMESH_HOST")]
    pub host: Option<String>,
    /// An RNIC to probe from: NAME=IP[,tor=T][,rail=N] or NAME=@IFACE[,...]; repeatable.
    #[arg(long = "rnic")]
    pub rnics: Vec<String>,
    /// UDP port the responder listens on.
    #[arg(long)]
    pub port: Option<u16>,
    /// DSCP value for probes, so they ride the RoCE traffic class.
    #[arg(long)]
    pub dscp: Option<u8>,
    /// Result buffer capacity in records (oldest dropped when full).
    #[arg(long)]
    pub buffer_capacity: Option<usize>,
    /// Probe transport: auto (verbs where an RDMA device holds the RNIC's IP), udp or verbs.
    #[arg(long)]
    pub transport: Option<rocemesh_agent::TransportKind>,
    /// Service tracing route: auto, kernel (kprobes), user (uprobes on libibverbs) or off.
    #[arg(long)]
    pub service_tracing: Option<rocemesh_agent::ServiceTracing>,
    /// Extra libibverbs file for the user route to hook (repeatable).
    #[arg(long = "service-library")]
    pub service_libraries: Vec<PathBuf>,
    /// File holding the server's `agent` bearer token (else `token_file` in the config,
    /// else the token itself in env ROCEMESH_TOKEN; none = no credential sent).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// CA certificates (PEM) the server's https certificate must chain to (default: the
    /// public web roots).
    #[arg(long, env = "ROCEMESH_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for a server that requires mutual TLS.
    #[arg(long, requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// Private key (PEM) of --client-cert.
    #[arg(long, requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Serve the agent's Prometheus self-metrics at http://ADDR/metrics (off by default).
    #[arg(long, env = "ROCEMESH_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl AgentArgs {
    /// The effective agent configuration.
    pub fn resolve(&self) -> Result<AgentConfig> {
        let mut cfg = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                crate::config::parse_toml::<AgentConfig>(&text)
                    .with_context(|| format!("parsing {}", path.display()))?
            }
            None => {
                let Some(controller) = &self.controller else {
                    bail!("--controller URL is required (or --config FILE)");
                };
                AgentConfig::new(controller.clone(), Vec::new())
            }
        };
        if let Some(c) = &self.controller {
            cfg.controller_url = c.clone();
        }
        if self.analyzer.is_some() {
            cfg.analyzer_url = self.analyzer.clone();
        }
        if let Some(h) = &self.host {
            cfg.host = h.clone();
        }
        if !self.rnics.is_empty() {
            cfg.rnics = self
                .rnics
                .iter()
                .map(|s| RnicConfig::parse(s))
                .collect::<Result<_, _>>()?;
        }
        if let Some(p) = self.port {
            cfg.port = p;
        }
        if self.dscp.is_some() {
            cfg.dscp = self.dscp;
        }
        if let Some(b) = self.buffer_capacity {
            cfg.buffer_capacity = b;
        }
        if let Some(t) = self.transport {
            cfg.transport = t;
        }
        if let Some(s) = self.service_tracing {
            cfg.service_tracing = s;
        }
        if !self.service_libraries.is_empty() {
            cfg.service_libraries = self.service_libraries.clone();
        }
        if self.metrics_listen.is_some() {
            cfg.metrics_listen = self.metrics_listen;
        }
        if self.token_file.is_some() {
            cfg.token_file = self.token_file.clone();
        }
        if self.ca_file.is_some() {
            cfg.ca_file = self.ca_file.clone();
        }
        if self.client_cert.is_some() {
            cfg.client_cert_file = self.client_cert.clone();
            cfg.client_key_file = self.client_key.clone();
        }
        if cfg.rnics.is_empty() {
            bail!("no RNIC configured: pass --rnic NAME=IP (or [[rnics]] in the config file)");
        }
        Ok(cfg)
    }
}

/// Runs the agent in the foreground.
pub fn run(args: AgentArgs) -> Result<()> {
    let cfg = args.resolve()?;
    match (agent_token(&cfg)?, &cfg.token_file) {
        (Some(token), Some(file)) => rocemesh_agent::set_token_file(file, &token)?,
        (Some(token), None) => rocemesh_agent::set_bearer_token(&token)?,
        (None, _) => {}
    }
    rocemesh_agent::set_tls(rocemesh_agent::client_tls(&cfg)?)?;
    let signals = crate::signals::block_termination()?;
    let agent = rocemesh_agent::start(cfg)?;
    tracing::info!(epoch = agent.epoch(), "agent running");
    let sig = crate::signals::wait(&signals)?;
    tracing::info!(signal = sig, "shutting down");
    agent.shutdown()
}

/// The agent's bearer token: the token file (flag or config), else env `ROCEMESH_TOKEN`.
fn agent_token(cfg: &AgentConfig) -> Result<Option<String>> {
    match &cfg.token_file {
        Some(path) => rocemesh_httpd::read_token_file(path)
            .context("agent token")
            .map(Some),
        None => Ok(std::env::var("ROCEMESH_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn resolve(extra: &[&str]) -> Result<AgentConfig> {
        let args = [
            "agent",
            "--controller",
            "http://c:1",
            "--rnic",
            "r0=127.0.0.1",
        ];
        let cli = Cli::try_parse_from(args.iter().chain(extra))?;
        cli.agent.resolve()
    }

    #[test]
    fn metrics_listener_is_off_unless_asked_for() {
        assert_eq!(resolve(&[]).unwrap().metrics_listen, None);
        let cfg = resolve(&["--metrics-listen", "0.0.0.0:9465"]).unwrap();
        assert_eq!(cfg.metrics_listen, Some("0.0.0.0:9465".parse().unwrap()));
        let err = resolve(&["--metrics-listen", "9465"]).unwrap_err();
        assert!(err.to_string().contains("metrics-listen"), "{err}");
    }
}
