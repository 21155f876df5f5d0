//! Fidelity check (SkeletonHunter §7.3): a skeleton is only used when the
//! inferred structure explains the traffic; otherwise the task keeps the
//! basic pinglist and the reason is reported.

use crate::{Observation, features::TaskFeatures, grouping::Grouping, stages::Stages};

/// Thresholds of the fidelity check.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FidelityConfig {
    /// Minimum median comb enrichment (1 = white noise).
    pub min_periodicity: f64,
    /// Minimum median phase coherence of the iteration frequency.
    pub min_coherence: f64,
    /// Minimum jump of the within-group distance at the chosen group size.
    pub min_separation: f64,
    /// Minimum ratio of the gap between pipeline stages to the spread inside one.
    pub min_stage_separation: f64,
    /// Minimum mean Pearson correlation of neighbouring group members' series.
    pub min_member_correlation: f64,
}

impl Default for FidelityConfig {
    fn default() -> Self {
        Self {
            min_periodicity: 1.5,
            min_coherence: 0.5,
            min_separation: 3.0,
            min_stage_separation: 1.5,
            min_member_correlation: 0.5,
        }
    }
}

/// Why a task keeps the basic pinglist instead of a skeleton.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum FallbackReason {
    /// Throughput shows no clear iteration cycle.
    WeakPeriodicity {
        /// Median comb enrichment found.
        median: f64,
    },
    /// Bursts do not keep a stable position within the iteration.
    UnstablePhase {
        /// Median phase coherence found.
        median: f64,
    },
    /// No equal-size grouping respects the rail and host constraints.
    ConstraintsUnsatisfiable,
    /// No group size of two or more divides every rail's RNIC count.
    NoReplicas,
    /// The chosen groups are not clearly tighter than coarser groupings.
    GroupsNotSeparated {
        /// Separation found.
        separation: f64,
    },
    /// Groups do not fall into clearly distinct pipeline stages.
    StagesNotSeparated {
        /// Stage separation found.
        separation: f64,
    },
    /// Members of a group do not burst together in the time domain.
    LowMemberCorrelation {
        /// Mean correlation found.
        mean: f64,
    },
}

impl std::fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::WeakPeriodicity { median } => {
                write!(f, "weak periodicity (median comb enrichment {median:.2})")
            }
            Self::UnstablePhase { median } => {
                write!(f, "unstable burst phase (median coherence {median:.2})")
            }
            Self::ConstraintsUnsatisfiable => {
                write!(f, "no equal-size grouping respects rails and hosts")
            }
            Self::NoReplicas => write!(f, "no group size >= 2 divides every rail's RNIC count"),
            Self::GroupsNotSeparated { separation } => {
                write!(f, "groups not separated (separation {separation:.2})")
            }
            Self::StagesNotSeparated { separation } => {
                write!(
                    f,
                    "pipeline stages not separated (separation {separation:.2})"
                )
            }
            Self::LowMemberCorrelation { mean } => {
                write!(f, "group members barely correlate (mean {mean:.2})")
            }
        }
    }
}

/// Checks that the series are periodic enough to be grouped at all.
pub fn check_features(
    features: &TaskFeatures,
    config: &FidelityConfig,
) -> Result<(), FallbackReason> {
    let periodicity = median(features.rnics.iter().map(|r| r.periodicity));
    if periodicity < config.min_periodicity {
        return Err(FallbackReason::WeakPeriodicity {
            median: periodicity,
        });
    }
    let coherence = median(features.rnics.iter().map(|r| r.coherence));
    if coherence < config.min_coherence {
        return Err(FallbackReason::UnstablePhase { median: coherence });
    }
    Ok(())
}

/// Checks that the groups explain the traffic.
pub fn check_grouping(
    grouping: &Grouping,
    observations: &[Observation],
    config: &FidelityConfig,
) -> Result<(), FallbackReason> {
    if grouping.separation < config.min_separation {
        return Err(FallbackReason::GroupsNotSeparated {
            separation: grouping.separation,
        });
    }
    // Ring neighbours within each group: O(N * samples) whatever DP is.
    let mut sum = 0.0;
    let mut count = 0usize;
    for g in &grouping.groups {
        for (k, &a) in g.iter().enumerate() {
            let b = g[(k + 1) % g.len()];
            if g.len() > 2 || k == 0 {
                sum += pearson(&observations[a].bytes, &observations[b].bytes);
                count += 1;
            }
        }
    }
    let mean = if count == 0 { 0.0 } else { sum / count as f64 };
    if mean < config.min_member_correlation {
        return Err(FallbackReason::LowMemberCorrelation { mean });
    }
    Ok(())
}

/// Checks that the stage split is clear.
pub fn check_stages(stages: &Stages, config: &FidelityConfig) -> Result<(), FallbackReason> {
    if stages.separation < config.min_stage_separation {
        return Err(FallbackReason::StagesNotSeparated {
            separation: stages.separation,
        });
    }
    Ok(())
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Pearson correlation; 0 when either series is constant.
fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        cov += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    if va > 0.0 && vb > 0.0 {
        cov / (va * vb).sqrt()
    } else {
        0.0
    }
}
