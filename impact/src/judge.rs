//! Is a task's performance degraded? Medians over consecutive samples, so one noisy
//! sample neither raises nor clears a degradation.

/// Median of `v` (not necessarily sorted); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Relative degradation of `value` from `baseline` (positive = worse).
pub fn degradation(value: f64, baseline: f64, higher_is_better: bool) -> f64 {
    if higher_is_better {
        (baseline - value) / baseline
    } else {
        (value - baseline) / baseline
    }
}

/// The worst median of `k` consecutive samples of `chronological` (all of them when
/// fewer than `k`); `None` when empty.
pub fn worst_window(chronological: &[f64], k: usize, higher_is_better: bool) -> Option<f64> {
    let k = k.clamp(1, chronological.len().max(1));
    chronological.windows(k).filter_map(median).reduce(|a, b| {
        let a_worse = if higher_is_better { a < b } else { a > b };
        if a_worse { a } else { b }
    })
}

/// Degradation of the worst window from `baseline`, and whether it exceeds `tolerable`.
/// `None` when there are no samples or no usable baseline.
pub fn judge(
    chronological: &[f64],
    k: usize,
    baseline: Option<f64>,
    higher_is_better: bool,
    tolerable: f64,
) -> Option<(f64, bool)> {
    let baseline = baseline.filter(|b| b.is_finite() && *b > 0.0)?;
    let worst = worst_window(chronological, k, higher_is_better)?;
    let d = degradation(worst, baseline, higher_is_better);
    Some((d, d > tolerable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn one_bad_sample_is_noise_a_run_is_degradation() {
        let spike = [100.0, 100.0, 10.0, 100.0, 100.0];
        assert_eq!(judge(&spike, 3, Some(100.0), true, 0.1), Some((0.0, false)));
        let run = [100.0, 60.0, 55.0, 58.0, 100.0];
        let (d, degraded) = judge(&run, 3, Some(100.0), true, 0.1).unwrap();
        assert!(degraded && (d - 0.42).abs() < 1e-9, "{d}");
    }

    #[test]
    fn lower_is_better_and_missing_inputs() {
        let step_time = [1.0, 1.5, 1.6];
        let (d, degraded) = judge(&step_time, 3, Some(1.0), false, 0.2).unwrap();
        assert!(degraded && (d - 0.5).abs() < 1e-9);
        assert_eq!(judge(&[], 3, Some(1.0), true, 0.1), None);
        assert_eq!(judge(&[1.0], 3, None, true, 0.1), None);
        assert_eq!(judge(&[1.0], 3, Some(0.0), true, 0.1), None);
    }
}
