//! Pipeline-stage order and the TP x PP split from burst time shifts.
//!
//! Stage `k` bursts before stage `k + 1` within an iteration (SkeletonHunter
//! §5.1), so a group's burst phase places it on the pipeline. Groups of one
//! stage (its TP ranks) burst together; the number of stages is the group
//! count's divisor whose equal blocks of consecutive phases are most clearly
//! apart.

use std::f64::consts::TAU;

/// Parameters of the stage split.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StageConfig {
    /// Phase spread (radians) treated as noise inside one stage.
    pub phase_floor: f64,
    /// Phase gap (radians) that always separates two stages.
    pub phase_gap: f64,
}

impl Default for StageConfig {
    fn default() -> Self {
        Self {
            phase_floor: 0.02,
            phase_gap: 0.3,
        }
    }
}

/// Stage of every group and the number of stages.
#[derive(Debug, Clone, PartialEq)]
pub struct Stages {
    /// Stage (0 = first to burst) of each group, in group order.
    pub of_group: Vec<usize>,
    /// Number of pipeline stages (PP).
    pub count: usize,
    /// Narrowest gap between stages over widest gap inside one (> 1 when
    /// the stages are clearly apart).
    pub separation: f64,
}

/// Splits groups into stages from their burst phases: per group, the phase
/// (radians) at the iteration frequency and its first harmonics; at the
/// iteration frequency a later burst has a smaller phase.
///
/// Groups are ordered by the iteration-frequency phase (cut open at its
/// widest gap); the stage count is the divisor of the group count whose
/// equal blocks have the largest ratio of the narrowest gap between blocks to
/// the widest gap inside a block. Gaps are chord distances over all
/// harmonics, which multiply the shift between close stages.
pub fn split(phases: &[Vec<f64>], config: &StageConfig) -> Stages {
    let k = phases.len();
    if k == 0 {
        return Stages {
            of_group: Vec::new(),
            count: 0,
            separation: 0.0,
        };
    }
    let lag = |g: usize| (-phases[g].first().copied().unwrap_or(0.0)).rem_euclid(TAU);
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| lag(a).total_cmp(&lag(b)));
    let circular_gap = |i: usize| (lag(order[(i + 1) % k]) - lag(order[i])).rem_euclid(TAU);
    let widest = (0..k)
        .max_by(|&a, &b| circular_gap(a).total_cmp(&circular_gap(b)))
        .unwrap_or(0);
    order.rotate_left((widest + 1) % k);
    // gaps[i]: distance between the i-th and (i+1)-th group in burst order.
    let gaps: Vec<f64> = order
        .windows(2)
        .map(|w| chord(&phases[w[0]], &phases[w[1]]))
        .collect();

    let mut best = (1, f64::MIN);
    for count in (1..=k).filter(|c| k.is_multiple_of(*c)) {
        let block = k / count;
        let is_boundary = |i: usize| (i + 1).is_multiple_of(block);
        let inside = (0..gaps.len())
            .filter(|&i| !is_boundary(i))
            .map(|i| gaps[i])
            .fold(0.0, f64::max);
        let apart = (0..gaps.len())
            .filter(|&i| is_boundary(i))
            .map(|i| gaps[i])
            .fold(config.phase_gap, f64::min);
        let score = apart / inside.max(config.phase_floor);
        if score > best.1 {
            best = (count, score);
        }
    }
    let (count, separation) = best;
    let block = k / count;
    let mut of_group = vec![0; k];
    for (pos, &g) in order.iter().enumerate() {
        of_group[g] = pos / block;
    }
    Stages {
        of_group,
        count,
        separation,
    }
}

/// Chord distance between two phase vectors: root mean square of
/// `|e^{ia} - e^{ib}|` over harmonics.
fn chord(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()).max(1) as f64;
    (a.iter()
        .zip(b)
        .map(|(x, y)| 2.0 - 2.0 * (x - y).cos())
        .sum::<f64>()
        / n)
        .sqrt()
}

/// Circular mean of angles (radians); 0 for an empty or balanced set.
pub fn circular_mean(angles: impl Iterator<Item = f64>) -> f64 {
    let (s, c) = angles.fold((0.0, 0.0), |(s, c), a| (s + a.sin(), c + a.cos()));
    if s == 0.0 && c == 0.0 {
        0.0
    } else {
        s.atan2(c)
    }
}

#[cfg(test)]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    #[test]
    fn stages_follow_burst_order_across_the_wrap() {
        // Three stages of two groups each, later stages have smaller phase;
        // the middle stage sits across the +-pi boundary.
        let phases = [3.16, -2.68, -3.13, 2.6, -2.7, 2.58].map(|p| vec![p]);
        let s = split(&phases, &StageConfig::default());
        assert_eq!(s.count, 3);
        assert_eq!(s.of_group, vec![1, 0, 1, 2, 0, 2]);
    }

    #[test]
    fn one_stage_when_all_groups_burst_together() {
        let s = split(
            &[0.50, 0.51, 0.49, 0.50].map(|p| vec![p]),
            &StageConfig::default(),
        );
        assert_eq!(s.count, 1);
    }

    #[test]
    fn circular_mean_handles_the_wrap() {
        let m = circular_mean([PI - 0.1, -PI + 0.1].into_iter());
        assert!((m.abs() - PI).abs() < 1e-9, "{m}");
    }
}
