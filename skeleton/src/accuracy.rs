//! Scoring an inferred grouping against the truth.

use std::collections::HashSet;

/// Share of true groups that the inferred grouping contains exactly (same
/// member set). 1.0 for an empty truth with an empty inference.
pub fn grouping_accuracy(truth: &[Vec<u32>], inferred: &[Vec<u32>]) -> f64 {
    if truth.is_empty() {
        return if inferred.is_empty() { 1.0 } else { 0.0 };
    }
    let canonical = |g: &Vec<u32>| {
        let mut g = g.clone();
        g.sort_unstable();
        g
    };
    let found: HashSet<Vec<u32>> = inferred.iter().map(canonical).collect();
    let exact = truth
        .iter()
        .filter(|g| found.contains(&canonical(g)))
        .count();
    exact as f64 / truth.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_exact_groups_only() {
        let truth = vec![vec![1, 2], vec![3, 4], vec![5, 6], vec![7, 8]];
        let inferred = vec![vec![2, 1], vec![3, 5], vec![4, 6], vec![8, 7]];
        assert_eq!(grouping_accuracy(&truth, &inferred), 0.5);
        assert_eq!(grouping_accuracy(&truth, &truth), 1.0);
        assert_eq!(grouping_accuracy(&truth, &[]), 0.0);
        assert_eq!(grouping_accuracy(&[], &[]), 1.0);
    }
}
