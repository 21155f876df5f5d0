//! Analyzer settings (a section of the rocemesh config file).

use anyhow::ensure;
use serde::Deserialize;
use std::path::PathBuf;

/// Tunables of the analyzer; every field has a production default.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct AnalyzerConfig {
    /// Analysis period length (R-Pingmesh uses 20 s).
    pub period_ms: u64,
    /// How long after its end a period still accepts late uploads before it is finalized.
    pub grace_ms: u64,
    /// How long cluster and ToR-pair SLA rows are kept.
    pub retention_ms: u64,
    /// How long per-RNIC SLA rows are kept (there are many more of them).
    pub rnic_retention_ms: u64,
    /// How often the RNIC registry is re-read from the database.
    pub registry_refresh_ms: u64,
    /// Fabric map (TOML: switches with their interface addresses, switch-to-switch
    /// links) naming the devices and links of traced paths; without it, hops are
    /// named by address.
    pub fabric_map: Option<PathBuf>,
    /// Fault diagnosis tunables.
    pub diagnosis: DiagnosisConfig,
}

/// Tunables of fault diagnosis (R-Pingmesh §4.3 pipeline plus tomography).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DiagnosisConfig {
    /// How often diagnosis runs.
    pub tick_ms: u64,
    /// Sliding window of recent results each diagnosis looks at.
    pub window_ms: u64,
    /// Most recent results kept for diagnosis (memory bound; oldest go first).
    pub max_records: usize,
    /// Most traced paths kept (latest per 5-tuple).
    pub max_paths: usize,
    /// A host whose agent has not uploaded for this long is down.
    pub host_down_after_ms: u64,
    /// Timeouts towards a host silent this long are set aside (likely down or
    /// restarting); keep it above two upload periods. (Timeouts are judged only after
    /// the target uploaded again anyway, see `liveness_margin_ms`.)
    pub host_silent_ms: u64,
    /// A timeout is judged only once its target host uploaded this long after the probe
    /// was sent (proof the host was alive); until then it waits.
    pub liveness_margin_ms: u64,
    /// After an agent restart (new epoch), timeouts towards its host are blamed on the
    /// restart for this long (pinglists still name the old QPN).
    pub restart_grace_ms: u64,
    /// An RNIC with more than this share (percent) of timed-out ToR-mesh probes is faulty.
    pub rnic_timeout_percent: u32,
    /// Fewest ToR-mesh probes before an RNIC is judged.
    pub rnic_min_probes: u32,
    /// An RNIC found faulty stays so (its timeouts explained) for this long.
    pub rnic_sticky_ms: u64,
    /// A processing delay above this is host noise (CPU), not the network.
    pub noise_delay_ns: u64,
    /// Share (percent) of a host's delays above `noise_delay_ns` that makes it noisy.
    pub noise_percent: u32,
    /// Tomography: least evidence (Chernoff bound exponent, ~ -ln p) to blame a component.
    pub min_score: u32,
    /// Tomography: least weighted failures to blame a component.
    pub min_failures: u32,
    /// Tomography: assumed background loss (parts per million) at least.
    pub background_loss_ppm: u32,
    /// A probe is slow when its RTT exceeds the flow's baseline by this factor...
    pub latency_factor: u32,
    /// ...and by at least this many ns.
    pub latency_min_ns: u64,
    /// Least share (percent) of slow probes through a component to blame it for latency.
    pub latency_percent: u32,
    /// A problem without evidence for this long is resolved.
    pub resolve_after_ms: u64,
}

impl Default for DiagnosisConfig {
    fn default() -> Self {
        Self {
            tick_ms: 1_000,
            window_ms: 10_000,
            max_records: 1_000_000,
            max_paths: 1_000_000,
            host_down_after_ms: 15_000,
            host_silent_ms: 10_000,
            liveness_margin_ms: 1_000,
            restart_grace_ms: 10_000,
            rnic_timeout_percent: 10,
            rnic_min_probes: 20,
            rnic_sticky_ms: 60_000,
            noise_delay_ns: 5_000_000,
            noise_percent: 10,
            min_score: 10,
            min_failures: 3,
            background_loss_ppm: 1_000,
            latency_factor: 5,
            latency_min_ns: 1_000_000,
            latency_percent: 50,
            resolve_after_ms: 10_000,
        }
    }
}

impl DiagnosisConfig {
    /// Refuses settings that make no sense or break memory bounds.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (10..=60_000).contains(&self.tick_ms),
            "analyzer.diagnosis.tick_ms must be between 10 ms and 1 min, got {}",
            self.tick_ms
        );
        ensure!(
            (self.tick_ms..=600_000).contains(&self.window_ms),
            "analyzer.diagnosis.window_ms must be between tick_ms and 10 min, got {}",
            self.window_ms
        );
        ensure!(
            (1_000..=50_000_000).contains(&self.max_records)
                && (1_000..=50_000_000).contains(&self.max_paths),
            "analyzer.diagnosis.max_records / max_paths must be between 1,000 and 50,000,000"
        );
        ensure!(
            self.rnic_timeout_percent <= 100
                && self.noise_percent <= 100
                && self.latency_percent <= 100
                && self.background_loss_ppm < 1_000_000,
            "analyzer.diagnosis percentages must be at most 100 and background_loss_ppm below 1,000,000"
        );
        ensure!(
            self.background_loss_ppm > 0 && self.min_score > 0 && self.latency_factor > 0,
            "analyzer.diagnosis.background_loss_ppm, min_score and latency_factor must be positive"
        );
        ensure!(
            self.host_silent_ms <= self.host_down_after_ms,
            "analyzer.diagnosis.host_silent_ms ({}) must not exceed host_down_after_ms ({})",
            self.host_silent_ms,
            self.host_down_after_ms
        );
        Ok(())
    }
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        Self {
            period_ms: 20_000,
            grace_ms: 7_000,
            retention_ms: 86_400_000,
            rnic_retention_ms: 3_600_000,
            registry_refresh_ms: 2_000,
            fabric_map: None,
            diagnosis: DiagnosisConfig::default(),
        }
    }
}

impl AnalyzerConfig {
    /// Refuses settings that would break the period arithmetic or memory bounds.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (100..=3_600_000).contains(&self.period_ms),
            "analyzer.period_ms must be between 100 ms and 1 h, got {}",
            self.period_ms
        );
        ensure!(
            self.grace_ms <= 4 * self.period_ms,
            "analyzer.grace_ms ({}) must be at most 4 periods ({} ms): open periods are held in memory",
            self.grace_ms,
            4 * self.period_ms
        );
        ensure!(
            self.retention_ms >= self.period_ms && self.rnic_retention_ms >= self.period_ms,
            "analyzer retention ({} ms, rnic {} ms) must cover at least one period ({} ms)",
            self.retention_ms,
            self.rnic_retention_ms,
            self.period_ms
        );
        ensure!(
            self.retention_ms <= i64::MAX as u64 && self.rnic_retention_ms <= i64::MAX as u64,
            "analyzer retention too large"
        );
        ensure!(
            (100..=3_600_000).contains(&self.registry_refresh_ms),
            "analyzer.registry_refresh_ms must be between 100 ms and 1 h, got {}",
            self.registry_refresh_ms
        );
        self.diagnosis.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        AnalyzerConfig::default().validate().unwrap();
        let c: AnalyzerConfig = serde_json::from_str(r#"{"period_ms": 5000}"#).unwrap();
        assert_eq!((c.period_ms, c.grace_ms), (5_000, 7_000));
        c.validate().unwrap();
        let bad = AnalyzerConfig {
            period_ms: 0,
            ..AnalyzerConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("period_ms")
        );
        let bad = AnalyzerConfig {
            grace_ms: 100_000,
            ..AnalyzerConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("grace_ms"));
        assert!(serde_json::from_str::<AnalyzerConfig>(r#"{"perod_ms": 1}"#).is_err());
        let c: AnalyzerConfig =
            serde_json::from_str(r#"{"diagnosis": {"window_ms": 2000, "tick_ms": 100}}"#).unwrap();
        assert_eq!((c.diagnosis.window_ms, c.diagnosis.min_score), (2_000, 10));
        c.validate().unwrap();
        let mut bad = AnalyzerConfig::default();
        bad.diagnosis.host_silent_ms = 20_000;
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("host_silent_ms")
        );
        let t: AnalyzerConfig = toml::from_str(
            "fabric_map = \"/etc/rocemesh/fabric.toml\"\n[diagnosis]\nresolve_after_ms = 5000\n",
        )
        .unwrap();
        assert_eq!(
            t.fabric_map.as_deref(),
            Some(std::path::Path::new("/etc/rocemesh/fabric.toml"))
        );
        assert_eq!(
            (t.diagnosis.resolve_after_ms, t.diagnosis.tick_ms),
            (5_000, 1_000)
        );
        assert!(toml::from_str::<AnalyzerConfig>("[diagnosis]\nwindow = 1\n").is_err());
        bad.diagnosis = DiagnosisConfig {
            window_ms: 1,
            ..DiagnosisConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("window_ms")
        );
    }
}
