//! Average-linkage agglomerative clustering with cannot-link pairs and a
//! cluster size cap, by the nearest-neighbour chain algorithm (O(n^2)).
//!
//! Written here rather than taken from a crate (e.g. `kodama`) because the
//! constraints must act during agglomeration: a merge that would put two
//! RNICs of one host together (Eq. 3) or exceed the group size is forbidden.
//! Forbidden merges have infinite distance; average linkage stays reducible
//! under both constraints (a merged cluster is never closer to a third than
//! the nearer of its parts), so the chain algorithm remains exact.

/// Symmetric pairwise distances; `f64::INFINITY` marks a cannot-link pair.
#[derive(Debug, Clone)]
pub struct DistanceMatrix {
    n: usize,
    d: Vec<f64>,
}

impl DistanceMatrix {
    /// Builds the matrix from a distance function over `0..n`.
    pub fn new(n: usize, mut dist: impl FnMut(usize, usize) -> f64) -> Self {
        let mut d = vec![0.0; n * n];
        for i in 0..n {
            for j in i + 1..n {
                let v = dist(i, j);
                d[i * n + j] = v;
                d[j * n + i] = v;
            }
        }
        Self { n, d }
    }

    /// Distance between points `i` and `j`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.d[i * self.n + j]
    }
}

/// Merges clusters, closest first, until no allowed merge is left; returns
/// the clusters (point indices, sorted). No cluster exceeds `cap` points.
pub fn agglomerate(base: &DistanceMatrix, cap: usize) -> Vec<Vec<usize>> {
    agglomerate_with_heights(base, cap).0
}

/// [`agglomerate`], also returning the height (average-linkage distance) of
/// every merge in the order the chain made them (not sorted), so the
/// dendrogram can be checked against `scipy.cluster.hierarchy.linkage`.
pub fn agglomerate_with_heights(base: &DistanceMatrix, cap: usize) -> (Vec<Vec<usize>>, Vec<f64>) {
    let n = base.n;
    let mut heights = Vec::with_capacity(n.saturating_sub(1));
    let mut d = base.d.clone();
    let mut members: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    // Clusters that may still merge; a cluster with no allowed partner never
    // gets one later (sizes only grow, conflicts stay), so it leaves for good.
    let mut open: Vec<bool> = vec![cap > 1; n];
    let mut open_count = open.iter().filter(|o| **o).count();
    let mut chain: Vec<usize> = Vec::new();
    let effective = |d: &[f64], members: &[Vec<usize>], a: usize, b: usize| {
        if members[a].len() + members[b].len() > cap {
            f64::INFINITY
        } else {
            d[a * n + b]
        }
    };
    while open_count > 1 {
        if chain.is_empty() {
            chain.push(open.iter().position(|o| *o).unwrap_or(0));
        }
        let a = chain[chain.len() - 1];
        let previous = chain.len().checked_sub(2).map(|i| chain[i]);
        let mut best: Option<(usize, f64)> = previous
            .map(|p| (p, effective(&d, &members, a, p)))
            .filter(|(_, v)| v.is_finite());
        for c in (0..n).filter(|&c| c != a && open[c]) {
            let v = effective(&d, &members, a, c);
            if v.is_finite() && best.is_none_or(|(_, bv)| v < bv) {
                best = Some((c, v));
            }
        }
        match best {
            None => {
                open[a] = false;
                open_count -= 1;
                chain.pop();
            }
            Some((b, height)) if Some(b) == previous => {
                heights.push(height);
                chain.truncate(chain.len() - 2);
                merge(&mut d, &mut members, n, a, b);
                open[b] = false;
                open_count -= 1;
            }
            Some((b, _)) => chain.push(b),
        }
    }
    let mut clusters: Vec<Vec<usize>> = members.into_iter().filter(|m| !m.is_empty()).collect();
    clusters.iter_mut().for_each(|c| c.sort_unstable());
    clusters.sort();
    (clusters, heights)
}

/// Merges cluster `b` into `a` with the Lance-Williams average-linkage update.
fn merge(d: &mut [f64], members: &mut [Vec<usize>], n: usize, a: usize, b: usize) {
    let (sa, sb) = (members[a].len() as f64, members[b].len() as f64);
    for c in 0..n {
        if c == a || c == b || members[c].is_empty() {
            continue;
        }
        let v = (sa * d[a * n + c] + sb * d[b * n + c]) / (sa + sb);
        d[a * n + c] = v;
        d[c * n + a] = v;
    }
    let moved = std::mem::take(&mut members[b]);
    members[a].extend(moved);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(points: &[f64]) -> DistanceMatrix {
        DistanceMatrix::new(points.len(), |i, j| (points[i] - points[j]).abs())
    }

    #[test]
    fn size_cap_splits_natural_clusters_evenly() {
        let m = line(&[0.0, 0.1, 0.2, 0.3, 10.0, 10.1, 10.2, 10.3]);
        assert_eq!(agglomerate(&m, 4), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(
            agglomerate(&m, 2),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        assert_eq!(agglomerate(&m, 1).len(), 8);
    }

    #[test]
    fn merge_heights_are_average_linkage_distances() {
        // 0-1 at 1, 3-4 at 1, then {0,1}-2 at mean(4, 3) = 3.5, last the two
        // halves at the mean of the six cross distances (10 + 12 + 6.5 * 4) / 6.
        let m = line(&[0.0, 1.0, 4.0, 10.0, 11.0]);
        let (clusters, mut heights) = agglomerate_with_heights(&m, 5);
        assert_eq!(clusters, vec![vec![0, 1, 2, 3, 4]]);
        heights.sort_by(f64::total_cmp);
        let last = (10.0 + 11.0 + 9.0 + 10.0 + 6.0 + 7.0) / 6.0;
        assert_eq!(heights, vec![1.0, 1.0, 3.5, last]);
    }

    #[test]
    fn cannot_link_pairs_never_share_a_cluster() {
        // 0 and 1 are closest but forbidden together.
        let pts: [f64; 4] = [0.0, 0.05, 5.0, 5.05];
        let m = DistanceMatrix::new(4, |i, j| {
            if (i, j) == (0, 1) {
                f64::INFINITY
            } else {
                (pts[i] - pts[j]).abs()
            }
        });
        let clusters = agglomerate(&m, 2);
        assert!(clusters.iter().all(|c| !(c.contains(&0) && c.contains(&1))));
        assert_eq!(clusters.len(), 3, "{clusters:?}");
    }
}
