//! Pipeline-stage order and the TP x PP split from burst time shifts.
//!
//! Stage `k` bursts before stage `k + 1` within an iteration (SkeletonHunter
//! §5.1), so a group's burst phase places it on the pipeline. Groups of one
//! stage (its TP ranks) burst together; the number of stages is the group
//! count's divisor whose equal blocks of consecutive phases are most clearly
//! apart.

use std::f64::consts::TAU;

/// Parameters of the stage split.
#[derive(Debug, Clone, PartialEq)]
pub struct StageConfig {
    /// Phase spread (radians) treated as noise inside one stage.
    pub phase_floor: f64,
    /// Phase gap (radians) that always separates two stages.
    pub phase_gap: f64,
}

impl Default for StageConfig {
    fn default() -> Self {
        Self { phase_floor: 0.02, phase_gap: 0.3 }
    }
}

/// Stage of every group and the number of stages.
#[derive(Debug, Clone, PartialEq)]
pub struct Stages {
    /// Stage (0 = first to burst) of each group, in group order.
    pub of_group: Vec<usize>,
    /// Number of pipeline stages (PP).
    pub count: usize,
}

/// Splits groups into stages from their burst phases (radians; a later
/// burst has a smaller phase).
pub fn split(phases: &[f64], config: &StageConfig) -> Stages {
    let k = phases.len();
    if k == 0 {
        return Stages { of_group: Vec::new(), count: 0 };
    }
    // Lag on the circle, cut open at the widest gap so that order is linear.
    let mut lags: Vec<(f64, usize)> =
        phases.iter().enumerate().map(|(g, p)| ((-p).rem_euclid(TAU), g)).collect();
    lags.sort_by(|a, b| a.0.total_cmp(&b.0));
    let widest = (0..k)
        .max_by(|&a, &b| gap(&lags, a).total_cmp(&gap(&lags, b)))
        .unwrap_or(0);
    lags.rotate_left((widest + 1) % k);
    let base = lags[0].0;
    let unwrapped: Vec<f64> = lags.iter().map(|(l, _)| (l - base).rem_euclid(TAU)).collect();

    let mut best = (1, f64::MIN);
    for count in (1..=k).filter(|c| k % c == 0) {
        let block = k / count;
        let spread = (0..count)
            .map(|s| unwrapped[s * block + block - 1] - unwrapped[s * block])
            .fold(0.0, f64::max);
        let apart = (1..count)
            .map(|s| unwrapped[s * block] - unwrapped[s * block - 1])
            .fold(config.phase_gap, f64::min);
        let score = apart / spread.max(config.phase_floor);
        if score > best.1 {
            best = (count, score);
        }
    }
    let (count, _) = best;
    let block = k / count;
    let mut of_group = vec![0; k];
    for (pos, (_, g)) in lags.iter().enumerate() {
        of_group[*g] = pos / block;
    }
    Stages { of_group, count }
}

/// Circular mean of angles (radians); 0 for an empty or balanced set.
pub fn circular_mean(angles: impl Iterator<Item = f64>) -> f64 {
    let (s, c) = angles.fold((0.0, 0.0), |(s, c), a| (s + a.sin(), c + a.cos()));
    if s == 0.0 && c == 0.0 { 0.0 } else { s.atan2(c) }
}

/// Gap on the circle from sorted position `i` to the next.
fn gap(sorted: &[(f64, usize)], i: usize) -> f64 {
    let next = (i + 1) % sorted.len();
    (sorted[next].0 - sorted[i].0).rem_euclid(TAU)
}

#[cfg(test)]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    #[test]
    fn stages_follow_burst_order_across_the_wrap() {
        // Three stages of two groups each, later stages have smaller phase;
        // the middle stage sits across the +-pi boundary.
        let phases = [3.16, -2.68, -3.13, 2.6, -2.7, 2.58];
        let s = split(&phases, &StageConfig::default());
        assert_eq!(s.count, 3);
        assert_eq!(s.of_group, vec![1, 0, 1, 2, 0, 2]);
    }

    #[test]
    fn one_stage_when_all_groups_burst_together() {
        let s = split(&[0.50, 0.51, 0.49, 0.50], &StageConfig::default());
        assert_eq!(s.count, 1);
    }

    #[test]
    fn circular_mean_handles_the_wrap() {
        let m = circular_mean([PI - 0.1, -PI + 0.1].into_iter());
        assert!((m.abs() - PI).abs() < 1e-9, "{m}");
    }
}
