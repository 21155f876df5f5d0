//! Pair lists: full mesh size and the same-rail basic pinglist (preload phase).

use crate::{Endpoint, Error, endpoint::validate_endpoints};

/// An unordered probe pair of RNIC ids, smaller id first.
pub type Pair = (u32, u32);

/// Orders a pair so that each unordered pair has one spelling.
pub fn ordered(a: u32, b: u32) -> Pair {
    if a <= b { (a, b) } else { (b, a) }
}

/// Number of unordered pairs in a full mesh of `n` endpoints: the baseline
/// every reduction is measured against.
pub fn full_mesh_len(n: usize) -> usize {
    n * n.saturating_sub(1) / 2
}

/// Preload pinglist (SkeletonHunter §5.1): every pair of RNICs on the same
/// rail and different hosts. Known as soon as the task is submitted, before
/// any traffic; 8x smaller than the full mesh with 8 RNICs per host.
/// Pairs are unordered (smaller id first) and sorted.
pub fn basic_pairs(endpoints: &[Endpoint]) -> Result<Vec<Pair>, Error> {
    validate_endpoints(endpoints)?;
    let mut by_rail: Vec<&Endpoint> = endpoints.iter().collect();
    by_rail.sort_by_key(|e| (e.rail, e.id));
    let mut pairs = Vec::new();
    for rail in by_rail.chunk_by(|a, b| a.rail == b.rail) {
        for (i, a) in rail.iter().enumerate() {
            for b in &rail[i + 1..] {
                if a.host != b.host {
                    pairs.push(ordered(a.id, b.id));
                }
            }
        }
    }
    pairs.sort_unstable();
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(id: u32, host: u32, rail: u16) -> Endpoint {
        Endpoint { id, host, rail }
    }

    #[test]
    fn basic_pairs_are_same_rail_across_hosts() {
        // Two hosts with two rails, plus a host with a second RNIC on rail 0.
        let endpoints = [
            ep(4, 1, 1),
            ep(1, 0, 0),
            ep(2, 0, 1),
            ep(3, 1, 0),
            ep(5, 2, 0),
            ep(6, 2, 0),
        ];
        assert_eq!(
            basic_pairs(&endpoints),
            Ok(vec![(1, 3), (1, 5), (1, 6), (2, 4), (3, 5), (3, 6)])
        );
    }

    #[test]
    fn basic_is_eight_times_smaller_with_eight_rails() {
        let endpoints: Vec<Endpoint> = (0..64u32)
            .flat_map(|h| (0..8u16).map(move |r| ep(h * 8 + r as u32, h, r)))
            .collect();
        let basic = basic_pairs(&endpoints).expect("valid endpoints");
        assert_eq!(basic.len(), 8 * full_mesh_len(64));
        assert_eq!(full_mesh_len(512), 130_816);
        assert!(full_mesh_len(512) as f64 / basic.len() as f64 >= 8.0);
    }
}
