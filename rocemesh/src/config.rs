//! The server-side configuration file (TOML): listener, database and the controller
//! and analyzer sections, each deserialized straight into that component's config.

use anyhow::{Context, Result};
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// Default listen address of the server roles.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default database: an SQLite file in the working directory, created on first run.
pub const DEFAULT_DATABASE: &str = "sqlite://rocemesh.db";

/// Everything `rocemesh server|controller|analyzer` reads from `--config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Database URL: `sqlite://path` (default) or `postgres://...`.
    pub database: String,
    /// Controller section.
    pub controller: ControllerConfig,
    /// Analyzer section.
    pub analyzer: AnalyzerConfig,
    /// API bearer tokens and their roles (none = auth off).
    pub auth: crate::auth::AuthConfig,
    /// HTTPS certificate and key (absent = plain HTTP).
    pub tls: Option<crate::tls::TlsConfig>,
    /// Connection caps and deadlines of the listener.
    pub http: rocemesh_httpd::Limits,
    /// Alert webhooks: receivers and delivery knobs (run with the analyzer role).
    pub alerts: rocemesh_alerts::AlertsConfig,
    /// Problem priorities and task verdicts (run when the server has both roles).
    pub impact: rocemesh_impact::ImpactConfig,
    /// Kubernetes: tasks from pods and ToRs from node labels (controller role), node
    /// conditions and taints from RNIC and host problems (analyzer role).
    pub kubernetes: rocemesh_k8s::KubernetesConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("constant address"),
            database: DEFAULT_DATABASE.to_string(),
            controller: ControllerConfig::default(),
            analyzer: AnalyzerConfig::default(),
            auth: crate::auth::AuthConfig::default(),
            tls: None,
            http: rocemesh_httpd::Limits::default(),
            alerts: rocemesh_alerts::AlertsConfig::default(),
            impact: rocemesh_impact::ImpactConfig::default(),
            kubernetes: rocemesh_k8s::KubernetesConfig::default(),
        }
    }
}

impl ServerConfig {
    /// Reads a config file; unknown keys and bad values are errors naming the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        let cfg: Self =
            toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))?;
        cfg.http
            .validate()
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("config {}", path.display()))?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_reach_their_components() {
        let c: ServerConfig = toml::from_str(
            "listen = \"127.0.0.1:9\"\ndatabase = \"sqlite://x.db\"\n[controller]\ntormesh_pps = 150.0\n[analyzer]\nperiod_ms = 2000\n",
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9);
        assert_eq!(c.controller.tormesh_pps, 150.0);
        assert_eq!(c.analyzer.period_ms, 2000);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<ServerConfig>("lisen = \"127.0.0.1:9\"\n").unwrap_err();
        assert!(err.to_string().contains("lisen"), "{err}");
        assert!(toml::from_str::<ServerConfig>("[controller]\ntormesh = 1\n").is_err());
    }
}
