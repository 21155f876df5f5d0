//! Exact local outlier factor (Breunig et al., SIGMOD 2000) of one query point
//! against a small reference set, written out because the sets are tiny
//! (10 windows x 7 features): a k-d tree or a crate would cost more than the
//! brute-force distance matrix, and this keeps every buffer reusable.
//!
//! Neighbourhoods are exactly k points (ties broken arbitrarily, as in
//! scikit-learn); reference points' neighbours are taken among the other
//! reference points, the query's among all of them ("novelty" LOF).

use crate::features::FEATURE_DIM;

/// A point in the (scaled) feature space.
pub type Point = [f64; FEATURE_DIM];

/// Added to mean reachability distances so that duplicate points give a large
/// finite density instead of infinity (same guard as scikit-learn).
const DENSITY_EPS: f64 = 1e-10;

/// Buffers reused across LOF evaluations, so scoring a window allocates
/// nothing once they have grown to the look-back size.
#[derive(Debug, Default, Clone)]
pub struct LofScratch {
    dist: Vec<f64>,
    kdist: Vec<f64>,
    knn: Vec<usize>,
    order: Vec<(f64, usize)>,
}

/// LOF of `query` against `reference` with neighbourhood size `k`.
/// Requires `1 <= k < reference.len()` (checked by the caller); the result is
/// finite and about 1 for a point inside a cluster, larger for outliers.
pub fn lof(reference: &[Point], query: &Point, k: usize, scratch: &mut LofScratch) -> f64 {
    let n = reference.len();
    debug_assert!(k >= 1 && k < n);
    let LofScratch {
        dist,
        kdist,
        knn,
        order,
    } = scratch;
    dist.clear();
    dist.resize(n * n, 0.0);
    for i in 0..n {
        for j in (i + 1)..n {
            let d = euclidean(&reference[i], &reference[j]);
            dist[i * n + j] = d;
            dist[j * n + i] = d;
        }
    }
    kdist.clear();
    knn.clear();
    for i in 0..n {
        let row = &dist[i * n..(i + 1) * n];
        let kd = nearest(
            row.iter().copied().enumerate().filter(|&(j, _)| j != i),
            k,
            order,
        );
        kdist.push(kd);
        knn.extend(order.iter().map(|&(_, j)| j));
    }
    let lrd_of = |i: usize| {
        let row = &dist[i * n..(i + 1) * n];
        let neigh = &knn[i * k..(i + 1) * k];
        let reach: f64 = neigh.iter().map(|&o| row[o].max(kdist[o])).sum();
        1.0 / (reach / k as f64 + DENSITY_EPS)
    };
    nearest(
        reference.iter().map(|p| euclidean(p, query)).enumerate(),
        k,
        order,
    );
    let reach_q: f64 = order.iter().map(|&(d, o)| d.max(kdist[o])).sum();
    let lrd_q = 1.0 / (reach_q / k as f64 + DENSITY_EPS);
    let mean_lrd_neigh = order.iter().map(|&(_, o)| lrd_of(o)).sum::<f64>() / k as f64;
    mean_lrd_neigh / lrd_q
}

/// Leaves the k nearest `(distance, index)` pairs in `order` (unsorted) and
/// returns the k-distance (the largest of them).
fn nearest(
    candidates: impl Iterator<Item = (usize, f64)>,
    k: usize,
    order: &mut Vec<(f64, usize)>,
) -> f64 {
    order.clear();
    order.extend(candidates.map(|(j, d)| (d, j)));
    order.select_nth_unstable_by(k - 1, |a, b| a.0.total_cmp(&b.0));
    order.truncate(k);
    order.iter().map(|&(d, _)| d).fold(0.0, f64::max)
}

fn euclidean(a: &Point, b: &Point) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(x: f64, y: f64) -> Point {
        [x, y, 0.0, 0.0, 0.0, 0.0, 0.0]
    }

    #[test]
    fn matches_hand_computed_value() {
        // Reference on a line at 0, 1, 2, 3 (k = 1): each k-distance is 1,
        // every lrd is 1. Query at 5: nearest is 3 at distance 2,
        // reach = max(2, 1) = 2, lrd = 0.5, LOF = 1 / 0.5 = 2.
        let reference = [pt(0.0, 0.0), pt(1.0, 0.0), pt(2.0, 0.0), pt(3.0, 0.0)];
        let v = lof(&reference, &pt(5.0, 0.0), 1, &mut LofScratch::default());
        assert!((v - 2.0).abs() < 1e-9, "{v}");
    }

    #[test]
    fn inlier_near_one_outlier_large() {
        let reference: Vec<Point> = (0..10)
            .map(|i| pt((i % 3) as f64 * 0.1, (i / 3) as f64 * 0.1))
            .collect();
        let mut s = LofScratch::default();
        let inlier = lof(&reference, &pt(0.1, 0.1), 5, &mut s);
        let outlier = lof(&reference, &pt(3.0, 3.0), 5, &mut s);
        assert!((0.8..1.3).contains(&inlier), "{inlier}");
        assert!(outlier > 10.0, "{outlier}");
    }

    #[test]
    fn duplicates_stay_finite() {
        let reference = [pt(1.0, 1.0); 6];
        let mut s = LofScratch::default();
        let same = lof(&reference, &pt(1.0, 1.0), 3, &mut s);
        assert!((same - 1.0).abs() < 1e-9, "{same}");
        let away = lof(&reference, &pt(2.0, 1.0), 3, &mut s);
        assert!(away.is_finite() && away > 1e6, "{away}");
    }
}
