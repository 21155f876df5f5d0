//! Analyzer settings (a section of the rocemesh config file).

use anyhow::ensure;
use serde::Deserialize;

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
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        Self {
            period_ms: 20_000,
            grace_ms: 7_000,
            retention_ms: 86_400_000,
            rnic_retention_ms: 3_600_000,
            registry_refresh_ms: 2_000,
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
        Ok(())
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
    }
}
