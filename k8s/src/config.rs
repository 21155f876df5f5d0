//! The `[kubernetes]` section: what to watch, which labels mean what, and what to write back.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Settings of task discovery, node placement and node verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Talk to the Kubernetes API at all (in-cluster service account, else kubeconfig).
    pub enabled: bool,
    /// Kubeconfig file of the cluster (`None`: the in-cluster service account, else
    /// `$KUBECONFIG` or `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// Namespace whose pods become tasks (`None`: every namespace).
    pub namespace: Option<String>,
    /// Label naming the task of pods no known job controller labels.
    pub task_label: String,
    /// Label giving a pod's rank within its task (pods without one rank by name).
    pub rank_label: String,
    /// Node label naming the ToR of the node's RNICs (used when the agent gives no hint);
    /// `<tor_label>.<ifname>` names the ToR of one RNIC (rail-optimized nodes).
    pub tor_label: String,
    /// Node label giving the rail of the node's RNICs (used when the agent gives none);
    /// `<rail_label>.<ifname>` gives the rail of one RNIC.
    pub rail_label: String,
    /// Multus networks (`name` in `k8s.v1.cni.cncf.io/network-status`, with or without the
    /// namespace) that carry RDMA; empty: every non-default network of the pod.
    pub rdma_networks: Vec<String>,
    /// Tasks are re-derived at least this often (RNICs that registered since).
    #[serde(with = "humantime_serde")]
    pub resync: Duration,
    /// Write node conditions for active RNIC and host problems.
    pub conditions: bool,
    /// Type of that node condition.
    pub condition_type: String,
    /// Also taint the node `NoSchedule` while the problem is active (opt-in).
    pub taint: bool,
    /// Key of that taint.
    pub taint_key: String,
    /// How often the active problems are read (keep it below the analyzer's period).
    #[serde(with = "humantime_serde")]
    pub verdict_poll: Duration,
    /// An unchanged condition's `lastHeartbeatTime` is refreshed this often.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
}

/// Default of [`KubernetesConfig::task_label`].
pub const DEFAULT_TASK_LABEL: &str = "rocemesh.io/task";
/// Default of [`KubernetesConfig::tor_label`].
pub const DEFAULT_TOR_LABEL: &str = "topology.rocemesh.io/tor";
/// Default of [`KubernetesConfig::rail_label`].
pub(crate) const DEFAULT_RAIL_LABEL: &str = "topology.rocemesh.io/rail";

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            kubeconfig: None,
            namespace: None,
            task_label: DEFAULT_TASK_LABEL.into(),
            rank_label: "rocemesh.io/rank".into(),
            tor_label: DEFAULT_TOR_LABEL.into(),
            rail_label: DEFAULT_RAIL_LABEL.into(),
            rdma_networks: Vec::new(),
            resync: Duration::from_secs(5),
            conditions: true,
            condition_type: "RocemeshRnicProblem".into(),
            taint: false,
            taint_key: "rocemesh.io/rnic-problem".into(),
            verdict_poll: Duration::from_millis(500),
            heartbeat: Duration::from_secs(60),
        }
    }
}

impl KubernetesConfig {
    /// Refuses settings that cannot work, naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (key, value) in [
            ("task_label", &self.task_label),
            ("rank_label", &self.rank_label),
            ("tor_label", &self.tor_label),
            ("rail_label", &self.rail_label),
            ("taint_key", &self.taint_key),
        ] {
            anyhow::ensure!(
                qualified_name(value),
                "kubernetes.{key} {value:?} is not a Kubernetes label key"
            );
        }
        anyhow::ensure!(
            !self.condition_type.is_empty()
                && self.condition_type.len() <= 316
                && self
                    .condition_type
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c)),
            "kubernetes.condition_type {:?} is not a condition type",
            self.condition_type
        );
        for (key, d) in [
            ("resync", self.resync),
            ("verdict_poll", self.verdict_poll),
            ("heartbeat", self.heartbeat),
        ] {
            anyhow::ensure!(
                d >= Duration::from_millis(100) && d <= Duration::from_secs(3600),
                "kubernetes.{key} must be between 100ms and 1h, got {d:?}"
            );
        }
        Ok(())
    }
}

/// A label key: optional DNS prefix, then a name of at most 63 alphanumerics, `-`, `_`, `.`
/// beginning and ending alphanumeric.
fn qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    prefix_ok
        && !name.is_empty()
        && name.len() <= 63
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_durations_read_as_strings() {
        KubernetesConfig::default().validate().unwrap();
        let cfg: KubernetesConfig =
            toml::from_str("enabled = true\nresync = \"2s\"\nheartbeat = \"5m\"").unwrap();
        assert_eq!(cfg.resync, Duration::from_secs(2));
        assert_eq!(cfg.heartbeat, Duration::from_secs(300));
        cfg.validate().unwrap();
    }

    #[test]
    fn bad_settings_are_refused_with_the_key() {
        for (text, why) in [
            ("tor_label = \"-bad\"", "tor_label"),
            ("rail_label = \"a/b/c\"", "rail_label"),
            ("task_label = \"Example.COM/x\"", "task_label"),
            ("condition_type = \"\"", "condition_type"),
            ("resync = \"1ms\"", "resync"),
        ] {
            let cfg: KubernetesConfig = toml::from_str(text).unwrap();
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
        assert!(toml::from_str::<KubernetesConfig>("resync = 5").is_err());
        assert!(toml::from_str::<KubernetesConfig>("tor_lable = \"x\"").is_err());
    }
}
