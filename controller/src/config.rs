//! Controller settings: probing rates, pinglist rotation, timers told to agents.

use serde::Deserialize;
use std::path::PathBuf;

/// Everything an operator can tune on the controller; every field has a default.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControllerConfig {
    /// Probes per second each RNIC sends over its whole ToR-mesh list.
    pub tormesh_pps: f64,
    /// Rate of each inter-ToR 5-tuple, so every covered uplink sees at least this per direction.
    pub intertor_link_pps: f64,
    /// P of R-Pingmesh Eq. 1: probability that the inter-ToR tuples cover every path.
    pub coverage_probability: f64,
    /// N of Eq. 1 (parallel cross-ToR paths); overrides the topology file; default 4.
    pub parallel_paths: Option<u32>,
    /// How often a fraction of the inter-ToR 5-tuples is replaced.
    #[serde(rename = "rotation_period", with = "rocemesh_proto::duration::millis")]
    pub rotation_period_ms: u64,
    /// Fraction of inter-ToR 5-tuples replaced per rotation.
    pub rotation_fraction: f64,
    /// How often agents poll their pinglist (told to agents).
    #[serde(rename = "pinglist_poll", with = "rocemesh_proto::duration::millis")]
    pub pinglist_poll_ms: u64,
    /// How often agents upload results (told to agents).
    #[serde(rename = "upload_period", with = "rocemesh_proto::duration::millis")]
    pub upload_period_ms: u64,
    /// Probe timeout (told to agents in the pinglist).
    #[serde(rename = "probe_timeout", with = "rocemesh_proto::duration::millis")]
    pub probe_timeout_ms: u64,
    /// Analyzer base URL told to agents; `None` = the controller's own URL.
    pub analyzer_url: Option<String>,
    /// Optional TOML file mapping hosts and RNICs to ToRs.
    pub topology_file: Option<PathBuf>,
    /// Lowest UDP source port used in pinglists.
    pub src_port_min: u16,
    /// Highest UDP source port used in pinglists.
    pub src_port_max: u16,
    /// Probes per second per active training-task pair (SkeletonHunter §5.1); a prober's
    /// service list runs at `pairs x task_pair_pps`, capped by `task_max_pps_per_rnic`.
    pub task_pair_pps: f64,
    /// Cap on one RNIC's task-service list rate: beyond it each target is probed less often.
    pub task_max_pps_per_rnic: f64,
    /// Most basic (same-rail) pairs one task may have: bounds the memory of its pinglist.
    pub task_max_pairs: usize,
    /// Throughput samples kept per task RNIC (the ring the skeleton inference reads).
    pub throughput_window: usize,
    /// How often the runtime skeleton of every task is inferred again.
    #[serde(
        rename = "skeleton_interval",
        with = "rocemesh_proto::duration::millis"
    )]
    pub skeleton_interval_ms: u64,
    /// Samples every RNIC of a task needs before its skeleton is inferred.
    pub skeleton_min_samples: usize,
    /// Tunables of the skeleton inference (`[controller.skeleton]`).
    pub skeleton: rocemesh_skeleton::InferenceConfig,
    /// Several controller instances over one PostgreSQL (`[controller.scaleout]`).
    pub scaleout: rocemesh_store::coord::ScaleoutConfig,
    /// Probe authentication: `required` (agents tag and verify every PROBE/ACK with the
    /// cluster key) or `off` (untagged; for rolling out agents that predate it).
    pub probe_auth: ProbeAuthMode,
    /// Age at which the cluster probe key is replaced.
    #[serde(rename = "probe_key_rotate", with = "rocemesh_proto::duration::secs")]
    pub probe_key_rotate_s: u64,
    /// A tagged PROBE is answered only while its send time is this close to the
    /// responder's clock: how long a captured probe can be replayed (from its own flow).
    #[serde(with = "humantime_serde")]
    pub probe_tag_window: std::time::Duration,
    /// Longest ToR-mesh list of one RNIC: under a larger ToR each RNIC probes a window of
    /// its peers that moves on every rotation (every pair is covered within
    /// ceil((n - 1) / tormesh_max_targets) rotations).
    pub tormesh_max_targets: usize,
    /// Where RNIC addresses may lie (`["10.0.0.0/8", "fd00::/8"]`); a registration with an
    /// address outside is refused. Empty: every unicast address but loopback and
    /// link-local (a server listening on loopback takes every address).
    pub rnic_prefixes: Vec<crate::prefix::IpPrefix>,
    /// Most RNICs registered under one ToR; a registration that would exceed it is refused.
    pub max_rnics_per_tor: usize,
}

/// Whether agents must authenticate probe packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeAuthMode {
    /// Every PROBE/ACK carries a valid MAC; others get no answer.
    Required,
    /// Packets are untagged and tags ignored.
    Off,
}

/// N of Eq. 1 when neither the config nor the topology file says.
pub const DEFAULT_PARALLEL_PATHS: u32 = 4;
/// Largest N accepted: k grows like N ln N and every ToR gets k tuples.
pub const MAX_PARALLEL_PATHS: u32 = 1024;
/// Largest throughput ring per RNIC: a day of one-second samples.
pub const MAX_THROUGHPUT_WINDOW: usize = 86_400;

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            tormesh_pps: 10.0,
            intertor_link_pps: 10.0,
            coverage_probability: 0.99,
            parallel_paths: None,
            rotation_period_ms: 3_600_000,
            rotation_fraction: 0.2,
            pinglist_poll_ms: 30_000,
            upload_period_ms: 5_000,
            probe_timeout_ms: 500,
            analyzer_url: None,
            topology_file: None,
            src_port_min: 49152,
            src_port_max: 65535,
            task_pair_pps: 10.0,
            task_max_pps_per_rnic: 1000.0,
            task_max_pairs: 2_000_000,
            throughput_window: 600,
            skeleton_interval_ms: 60_000,
            skeleton_min_samples: 128,
            skeleton: rocemesh_skeleton::InferenceConfig::default(),
            scaleout: rocemesh_store::coord::ScaleoutConfig::default(),
            probe_auth: ProbeAuthMode::Required,
            probe_key_rotate_s: 3_600,
            probe_tag_window: rocemesh_proto::probe_auth::DEFAULT_TAG_WINDOW,
            tormesh_max_targets: 64,
            rnic_prefixes: Vec::new(),
            max_rnics_per_tor: 2048,
        }
    }
}

impl ControllerConfig {
    /// How long a new probe key is published before it signs: two pinglist polls, so
    /// every agent holds it before the first probe tagged with it.
    pub fn probe_key_lead_ms(&self) -> u64 {
        self.pinglist_poll_ms.saturating_mul(2)
    }

    /// Rejects values that would make pinglists meaningless, naming the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        let positive = |name: &str, v: f64| {
            anyhow::ensure!(
                v.is_finite() && v > 0.0,
                "{name} must be a positive number, got {v}"
            );
            Ok(())
        };
        positive("tormesh_pps", self.tormesh_pps)?;
        positive("intertor_link_pps", self.intertor_link_pps)?;
        positive("task_pair_pps", self.task_pair_pps)?;
        positive("task_max_pps_per_rnic", self.task_max_pps_per_rnic)?;
        let p = self.coverage_probability;
        anyhow::ensure!(
            p > 0.0 && p < 1.0,
            "coverage_probability must be in (0, 1), got {p}"
        );
        if let Some(n) = self.parallel_paths {
            validate_parallel_paths(n)?;
        }
        let f = self.rotation_fraction;
        anyhow::ensure!(
            (0.0..=1.0).contains(&f),
            "rotation_fraction must be in [0, 1], got {f}"
        );
        for (name, v) in [
            ("rotation_period", self.rotation_period_ms),
            ("pinglist_poll", self.pinglist_poll_ms),
            ("upload_period", self.upload_period_ms),
            ("probe_timeout", self.probe_timeout_ms),
            ("skeleton_interval", self.skeleton_interval_ms),
        ] {
            anyhow::ensure!(v > 0, "{name} must be positive");
        }
        anyhow::ensure!(
            self.src_port_min > 0 && self.src_port_min <= self.src_port_max,
            "source port range {}..={} is empty or starts at 0",
            self.src_port_min,
            self.src_port_max
        );
        anyhow::ensure!(self.task_max_pairs > 0, "task_max_pairs must be positive");
        anyhow::ensure!(
            self.tormesh_max_targets > 0,
            "tormesh_max_targets must be positive"
        );
        anyhow::ensure!(
            self.max_rnics_per_tor > 0,
            "max_rnics_per_tor must be positive"
        );
        anyhow::ensure!(
            self.probe_key_rotate_s.saturating_mul(1000) >= 2 * self.probe_key_lead_ms(),
            "probe_key_rotate ({} s) must be at least twice the key lead time ({} ms: two pinglist polls)",
            self.probe_key_rotate_s,
            self.probe_key_lead_ms()
        );
        anyhow::ensure!(
            self.probe_tag_window >= std::time::Duration::from_secs(1),
            "probe_tag_window must be at least 1s (clocks of hosts differ by milliseconds)"
        );
        self.skeleton
            .validate()
            .map_err(|e| anyhow::anyhow!("skeleton: {e}"))?;
        self.scaleout
            .validate()
            .map_err(|e| anyhow::anyhow!("controller.{e}"))?;
        let window = self.skeleton.features.window;
        anyhow::ensure!(
            self.skeleton_min_samples >= window
                && self.skeleton_min_samples <= self.throughput_window,
            "skeleton_min_samples must be in skeleton.features.window ({window})..=throughput_window ({}), got {}",
            self.throughput_window,
            self.skeleton_min_samples
        );
        anyhow::ensure!(
            self.throughput_window <= MAX_THROUGHPUT_WINDOW,
            "throughput_window must be at most {MAX_THROUGHPUT_WINDOW}, got {}",
            self.throughput_window
        );
        Ok(())
    }
}

/// Checks N of Eq. 1 wherever it comes from (config or topology file).
pub(crate) fn validate_parallel_paths(n: u32) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=MAX_PARALLEL_PATHS).contains(&n),
        "parallel_paths must be in 1..={MAX_PARALLEL_PATHS}, got {n}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        ControllerConfig::default().validate().unwrap();
        let bad = [
            ControllerConfig {
                tormesh_pps: 0.0,
                ..Default::default()
            },
            ControllerConfig {
                intertor_link_pps: f64::NAN,
                ..Default::default()
            },
            ControllerConfig {
                coverage_probability: 1.0,
                ..Default::default()
            },
            ControllerConfig {
                parallel_paths: Some(0),
                ..Default::default()
            },
            ControllerConfig {
                rotation_fraction: 1.5,
                ..Default::default()
            },
            ControllerConfig {
                rotation_period_ms: 0,
                ..Default::default()
            },
            ControllerConfig {
                src_port_min: 60000,
                src_port_max: 50000,
                ..Default::default()
            },
            ControllerConfig {
                task_pair_pps: 0.0,
                ..Default::default()
            },
            ControllerConfig {
                skeleton_min_samples: 8,
                ..Default::default()
            },
            ControllerConfig {
                throughput_window: 100,
                ..Default::default()
            },
            ControllerConfig {
                skeleton_interval_ms: 0,
                ..Default::default()
            },
        ];
        let names = [
            "tormesh_pps",
            "intertor_link_pps",
            "coverage_probability",
            "parallel_paths",
            "rotation_fraction",
            "rotation_period",
            "source port",
            "task_pair_pps",
            "skeleton_min_samples",
            "skeleton_min_samples",
            "skeleton_interval",
        ];
        for (cfg, name) in bad.iter().zip(names) {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = toml::from_str::<ControllerConfig>("tormesh_ppps = 3.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tormesh_ppps"), "{err}");
        let cfg: ControllerConfig = toml::from_str("tormesh_pps = 3.0").unwrap();
        assert_eq!(cfg.tormesh_pps, 3.0);
        assert_eq!(cfg.src_port_max, 65535);
        let cfg: ControllerConfig =
            toml::from_str("task_pair_pps = 2.0\n[skeleton.features]\nwindow = 32\n").unwrap();
        assert_eq!(
            (
                cfg.task_pair_pps,
                cfg.skeleton.features.window,
                cfg.throughput_window
            ),
            (2.0, 32, 600)
        );
        assert!(toml::from_str::<ControllerConfig>("[skeleton]\nwindow = 32\n").is_err());
    }
}
