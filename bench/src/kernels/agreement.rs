//! How closely rocemesh's kernels agree with the Python references on the same inputs.

use anyhow::{Result, ensure};
use std::collections::HashMap;

/// Largest `|ours - reference| / |reference|` over paired values: for LOF scores, which
/// are about 1 or more and computed by the same exact algorithm on both sides, so any
/// gap beyond rounding is a bug (a rank comparison would hide a constant-factor one).
pub(super) fn max_relative_difference(ours: &[f64], reference: &[f64]) -> Result<f64> {
    ensure!(
        ours.len() == reference.len(),
        "{} values vs {} reference values",
        ours.len(),
        reference.len()
    );
    Ok(ours
        .iter()
        .zip(reference)
        .map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / b.abs() })
        .fold(0.0, nan_max))
}

/// Largest `|ours - reference|` within each run of `group` values (one series' STFT
/// magnitudes) over the largest reference magnitude of that run. Relative to the peak
/// because most bins of a spectrum are near zero, where a per-value ratio is noise.
pub(super) fn max_error_over_peak(ours: &[f64], reference: &[f64], group: usize) -> Result<f64> {
    ensure!(
        group > 0 && ours.len() == reference.len(),
        "{} values vs {} reference values",
        ours.len(),
        reference.len()
    );
    ensure!(
        ours.len().is_multiple_of(group),
        "{} values are not runs of {group}",
        ours.len()
    );
    Ok(ours
        .chunks(group)
        .zip(reference.chunks(group))
        .map(|(a, b)| {
            let peak = b.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
            let err = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, nan_max);
            if err == 0.0 { 0.0 } else { err / peak }
        })
        .fold(0.0, nan_max))
}

/// Largest difference between the two sets of merge heights once both are sorted
/// (merge order between equal heights is arbitrary), over the largest reference height.
pub(super) fn merge_height_error(ours: &[f64], reference: &[f64]) -> Result<f64> {
    ensure!(
        ours.len() == reference.len(),
        "{} merges vs {} reference merges",
        ours.len(),
        reference.len()
    );
    let sorted = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    let (a, b) = (sorted(ours), sorted(reference));
    let top = b.last().copied().unwrap_or(0.0).abs();
    let err = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, nan_max);
    Ok(if err == 0.0 { 0.0 } else { err / top })
}

/// Adjusted Rand index of two flat clusterings given as one label per point: 1 for the
/// same partition (whatever the label names), about 0 for unrelated ones.
pub(super) fn adjusted_rand_index(a: &[usize], b: &[usize]) -> Result<f64> {
    ensure!(
        a.len() == b.len() && a.len() >= 2,
        "label vectors of {} and {} points",
        a.len(),
        b.len()
    );
    let pairs = |n: u64| (n * n.saturating_sub(1) / 2) as f64;
    let mut joint: HashMap<(usize, usize), u64> = HashMap::new();
    let (mut rows, mut cols): (HashMap<usize, u64>, HashMap<usize, u64>) = Default::default();
    for (&x, &y) in a.iter().zip(b) {
        *joint.entry((x, y)).or_default() += 1;
        *rows.entry(x).or_default() += 1;
        *cols.entry(y).or_default() += 1;
    }
    let index: f64 = joint.values().map(|&n| pairs(n)).sum();
    let row: f64 = rows.values().map(|&n| pairs(n)).sum();
    let col: f64 = cols.values().map(|&n| pairs(n)).sum();
    let expected = row * col / pairs(a.len() as u64);
    let max = (row + col) / 2.0;
    Ok(if max == expected {
        1.0
    } else {
        (index - expected) / (max - expected)
    })
}

/// One label per point from clusters given as lists of point indices.
pub(super) fn labels(clusters: &[Vec<usize>], points: usize) -> Result<Vec<usize>> {
    let mut out = vec![usize::MAX; points];
    for (label, members) in clusters.iter().enumerate() {
        for &p in members {
            ensure!(
                p < points && out[p] == usize::MAX,
                "point {p} out of range or in two clusters"
            );
            out[p] = label;
        }
    }
    ensure!(!out.contains(&usize::MAX), "some point is in no cluster");
    Ok(out)
}

/// `f64::max` that lets a NaN through, so a NaN on either side shows as disagreement.
fn nan_max(m: f64, v: f64) -> f64 {
    if m.is_nan() || v.is_nan() {
        f64::NAN
    } else {
        m.max(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_difference_of_scores() {
        assert_eq!(
            max_relative_difference(&[1.0, 2.0], &[1.0, 2.0]).expect("same length"),
            0.0
        );
        let d = max_relative_difference(&[1.0, 2.2, 10.0], &[1.0, 2.0, 10.5]).expect("same length");
        assert!((d - 0.1).abs() < 1e-12, "{d}");
        assert!(
            max_relative_difference(&[f64::NAN], &[1.0])
                .expect("same length")
                .is_nan()
        );
        assert!(max_relative_difference(&[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn error_over_peak_is_per_series() {
        // Series 1: peak 100, error 1 -> 0.01; series 2: peak 2, error 0.1 -> 0.05.
        let ours = [100.0, 1.0, 0.0, 2.0, 0.1, 0.0];
        let reference = [100.0, 0.0, 0.0, 2.0, 0.0, 0.0];
        let e = max_error_over_peak(&ours, &reference, 3).expect("runs of 3");
        assert!((e - 0.05).abs() < 1e-12, "{e}");
        assert!(max_error_over_peak(&ours, &reference, 4).is_err());
    }

    #[test]
    fn merge_heights_compare_sorted() {
        assert_eq!(
            merge_height_error(&[3.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).expect("same count"),
            0.0
        );
        let e = merge_height_error(&[1.0, 2.0, 4.2], &[1.0, 2.0, 4.0]).expect("same count");
        assert!((e - 0.05).abs() < 1e-12, "{e}");
        assert!(merge_height_error(&[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn rand_index_ignores_label_names() {
        let a = [0, 0, 1, 1, 2, 2];
        assert_eq!(
            adjusted_rand_index(&a, &[5, 5, 3, 3, 9, 9]).expect("same length"),
            1.0
        );
        // One point moved: well below 1. Value from sklearn.metrics.adjusted_rand_score.
        let moved = adjusted_rand_index(&a, &[0, 0, 1, 2, 2, 2]).expect("same length");
        assert!((moved - 0.444_444_444_444_444_4).abs() < 1e-12, "{moved}");
        assert!(adjusted_rand_index(&a, &[0, 1]).is_err());
    }

    #[test]
    fn labels_from_clusters() {
        let l = labels(&[vec![2, 0], vec![1]], 3).expect("a partition");
        assert_eq!(l, vec![0, 1, 0]);
        assert!(labels(&[vec![0, 1]], 3).is_err(), "point 2 missing");
        assert!(labels(&[vec![0], vec![0, 1]], 2).is_err(), "point 0 twice");
    }
}
