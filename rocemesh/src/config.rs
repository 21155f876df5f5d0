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
    pub auth: rocemesh_httpd::AuthConfig,
    /// HTTPS certificate and key (absent = plain HTTP).
    pub tls: Option<rocemesh_httpd::TlsConfig>,
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
            auth: rocemesh_httpd::AuthConfig::default(),
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
            parse_toml(&text).with_context(|| format!("parsing config {}", path.display()))?;
        cfg.http
            .validate()
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("config {}", path.display()))?;
        Ok(cfg)
    }
}

/// Parses the TOML text of a config file (server or agent) into `T`. The old integer duration
/// keys (`period_ms = 20000`) are refused with the key and value that replace them, rather
/// than as unknown keys.
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T> {
    refuse_unit_keys(&toml::from_str::<toml::Table>(text)?, "")?;
    Ok(toml::from_str(text)?)
}

/// Fails on the first key of `table` (recursively; `path` prefixes its name) in the old
/// `<name>_ms` / `_s` / `_us` / `_ns` integer form.
fn refuse_unit_keys(table: &toml::Table, path: &str) -> Result<()> {
    for (key, value) in table {
        let name = format!("{path}{key}");
        let old_value = value.as_integer().and_then(|v| u64::try_from(v).ok());
        if let Some((new, human)) =
            rocemesh_proto::duration::replacement_of_unit_key(key, old_value)
        {
            let example = human
                .or_else(|| value.as_str().map(str::to_string))
                .unwrap_or_else(|| "30s".to_string());
            anyhow::bail!(
                "`{name}` is no longer read: durations are strings now, write `{new} = \"{example}\"` instead"
            );
        }
        match value {
            toml::Value::Table(t) => refuse_unit_keys(t, &format!("{name}."))?,
            toml::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let toml::Value::Table(t) = item {
                        refuse_unit_keys(t, &format!("{name}[{i}]."))?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_reach_their_components() {
        let c: ServerConfig = toml::from_str(
            "listen = \"127.0.0.1:9\"\ndatabase = \"sqlite://x.db\"\n[controller]\ntormesh_pps = 150.0\n[analyzer]\nperiod = \"2s\"\n",
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

    #[test]
    fn old_millisecond_keys_are_refused_naming_their_replacement() {
        for (text, wanted) in [
            (
                "[analyzer]\nperiod_ms = 20000\n",
                "`analyzer.period_ms` is no longer read: durations are strings now, write `period = \"20s\"`",
            ),
            (
                "[analyzer.diagnosis]\nnoise_delay_ns = 200000\n",
                "`analyzer.diagnosis.noise_delay_ns`",
            ),
            (
                "[controller]\nprobe_key_rotate_s = 86400\n",
                "`probe_key_rotate = \"1day\"`",
            ),
            ("[alerts]\ntimeout_ms = 10000\n", "`timeout = \"10s\"`"),
            (
                "[[alerts.receivers]]\nname = \"a\"\nurl = \"http://x\"\nretry_ms = 5\n",
                "`alerts.receivers[0].retry_ms`",
            ),
        ] {
            let err = parse_toml::<ServerConfig>(text).unwrap_err().to_string();
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
        // The agent's file goes through the same loader.
        let err = parse_toml::<rocemesh_agent::AgentConfig>(
            "controller_url = \"http://c:1\"\nsample_upload_ms = 500\n[[rnics]]\nname = \"a\"\nip = \"127.0.0.1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("write `sample_upload = \"500ms\"`"), "{err}");
        // The replacements parse, in every section that has durations.
        let c: ServerConfig = parse_toml(
            "[controller]\npinglist_poll = \"30s\"\nprobe_key_rotate = \"1day\"\n[controller.scaleout]\nlease = \"15s\"\n\
             [analyzer]\nretention = \"7d\"\n[analyzer.diagnosis]\nnoise_delay = \"200us\"\n[analyzer.latency]\nmin_rise = \"50us\"\n\
             [alerts]\ntimeout = \"10s\"\n[impact]\ntick = \"5s\"\n",
        )
        .unwrap();
        assert_eq!(c.controller.pinglist_poll_ms, 30_000);
        assert_eq!(c.controller.probe_key_rotate_s, 86_400);
        assert_eq!(c.controller.scaleout.lease_ms, 15_000);
        assert_eq!(c.analyzer.retention_ms, 7 * 86_400_000);
        assert_eq!(c.analyzer.diagnosis.noise_delay_ns, 200_000);
        assert_eq!(c.analyzer.latency.min_rise_us, 50);
        assert_eq!(c.alerts.timeout_ms, 10_000);
        assert_eq!(c.impact.tick_ms, 5_000);
    }
}
