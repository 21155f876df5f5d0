//! The `[impact]` section of the server configuration.

use anyhow::ensure;
use serde::Deserialize;

/// How often and against what the impact loop judges problems and task performance.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpactConfig {
    /// Interval between two assessments of every active problem.
    #[serde(rename = "tick", with = "rocemesh_proto::duration::millis")]
    pub tick_ms: u64,
    /// Resolved problems keep being re-assessed this long after they resolved (late
    /// metric samples can still make them P0).
    #[serde(
        rename = "reassess_resolved",
        with = "rocemesh_proto::duration::millis"
    )]
    pub reassess_resolved_ms: i64,
    /// Metric samples older than this are deleted.
    #[serde(rename = "retention", with = "rocemesh_proto::duration::millis")]
    pub retention_ms: i64,
    /// Most samples kept per task (the oldest go first).
    pub max_samples_per_task: u32,
    /// Samples whose median becomes the baseline when the objective names none.
    pub baseline_samples: u32,
    /// Consecutive samples whose median must be degraded: a single bad sample is noise.
    pub window_samples: u32,
    /// Most samples one judgement reads (the newest of its interval).
    pub max_judged_samples: u32,
}

impl Default for ImpactConfig {
    fn default() -> Self {
        Self {
            tick_ms: 2_000,
            reassess_resolved_ms: 10 * 60_000,
            retention_ms: 7 * 24 * 3_600_000,
            max_samples_per_task: 100_000,
            baseline_samples: 5,
            window_samples: 3,
            max_judged_samples: 10_000,
        }
    }
}

impl ImpactConfig {
    /// Rejects values the loop cannot work with.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            (100..=600_000).contains(&self.tick_ms),
            "impact.tick must be 100ms..=10m, got {} ms",
            self.tick_ms
        );
        ensure!(
            self.reassess_resolved_ms >= 0,
            "impact.reassess_resolved must not be negative"
        );
        ensure!(
            self.retention_ms >= 60_000,
            "impact.retention must be at least 1m"
        );
        ensure!(
            self.max_samples_per_task >= 10,
            "impact.max_samples_per_task must be at least 10"
        );
        ensure!(
            (1..=1_000).contains(&self.baseline_samples),
            "impact.baseline_samples must be 1..=1000"
        );
        ensure!(
            (1..=100).contains(&self.window_samples),
            "impact.window_samples must be 1..=100"
        );
        ensure!(
            self.max_judged_samples >= self.window_samples,
            "impact.max_judged_samples must be at least impact.window_samples"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_named() {
        ImpactConfig::default().validate().unwrap();
        let c: ImpactConfig = toml_like("tick", "10ms");
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("impact.tick"), "{e}");
    }

    fn toml_like(key: &str, v: &str) -> ImpactConfig {
        serde_json::from_value(serde_json::json!({ key: v })).unwrap()
    }
}
