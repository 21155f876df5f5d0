//! Constrained hierarchical clustering of RNICs into DP groups
//! (SkeletonHunter Eq. 1-3).
//!
//! RNICs in the same position of different DP replicas burst alike; they
//! all-reduce over the network, and inter-host traffic stays on its rail, so
//! a group never spans rails. Traffic alone cannot tell the TP ranks of one
//! host apart (they burst together), so rails are a hard constraint. Two
//! RNICs of one host never share a group (Eq. 3). With uniform hosts whole
//! hosts are clustered (a group is then one rail of a cluster of hosts);
//! otherwise RNICs are clustered rail by rail with Eq. 3 as cannot-links.
//!
//! For every candidate group size `d >= 2` dividing every rail's RNIC count (so
//! that `N mod d = 0`, Eq. 2), agglomeration is capped at `d` and leftovers
//! are regrouped, giving equal sizes (zero variance, Eq. 1). The chosen `d`
//! is the one after which the mean within-group distance jumps most,
//! measured against a noise floor below and the distance of unrelated
//! traffic above.

use std::collections::HashMap;

use crate::{
    Endpoint, Error,
    features::TaskFeatures,
    fidelity::FallbackReason,
    linkage::{DistanceMatrix, agglomerate},
};

/// Clustering parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupingConfig {
    /// Weight of the burst-phase term against the spectrum term.
    pub phase_weight: f64,
    /// Distances below this are treated as noise when comparing candidates.
    pub noise_floor: f64,
    /// Distance of unrelated traffic: the jump credited to the largest candidate.
    pub unrelated_distance: f64,
}

impl Default for GroupingConfig {
    fn default() -> Self {
        Self {
            phase_weight: 4.0,
            noise_floor: 0.05,
            unrelated_distance: 1.0,
        }
    }
}

/// Result of the clustering.
#[derive(Debug, Clone, PartialEq)]
pub struct Grouping {
    /// Groups as indices into the observations, each sorted; all of size `dp`.
    pub groups: Vec<Vec<usize>>,
    /// Group size = inferred DP degree.
    pub dp: usize,
    /// Jump of the within-group distance after the chosen size (>= 1 means
    /// the chosen groups are tighter than the next coarser grouping).
    pub separation: f64,
}

/// Most RNICs on one rail that a task may have: the per-rail distance
/// matrix is `n^2` doubles (128 MiB at this limit, 2,048-RNIC tasks use 2 MiB).
pub const MAX_RAIL_RNICS: usize = 4096;

/// Rejects tasks whose per-rail distance matrix would not fit the memory bound.
pub fn check_size(endpoints: &[Endpoint]) -> Result<(), Error> {
    let mut per_rail: HashMap<u16, usize> = HashMap::new();
    for e in endpoints {
        *per_rail.entry(e.rail).or_default() += 1;
    }
    match per_rail.into_iter().find(|(_, n)| *n > MAX_RAIL_RNICS) {
        Some((rail, rnics)) => Err(Error::TooLarge {
            rail,
            rnics,
            limit: MAX_RAIL_RNICS,
        }),
        None => Ok(()),
    }
}

/// Feature distance between two RNICs; infinite for RNICs of one host.
pub fn distance(
    endpoints: &[Endpoint],
    features: &TaskFeatures,
    weight: f64,
    i: usize,
    j: usize,
) -> f64 {
    if endpoints[i].host == endpoints[j].host {
        return f64::INFINITY;
    }
    let (a, b) = (&features.rnics[i], &features.rnics[j]);
    let spectrum: f64 = a
        .spectrum
        .iter()
        .zip(&b.spectrum)
        .map(|(x, y)| (x - y).powi(2))
        .sum();
    let harmonics = a.phases.len().max(1) as f64;
    let phase: f64 = a
        .phases
        .iter()
        .zip(&b.phases)
        .map(|(x, y)| 2.0 - 2.0 * (x - y).cos())
        .sum::<f64>()
        / harmonics;
    (spectrum + weight * phase).sqrt()
}

/// Units clustered together: each unit is a list of RNIC indices (one per
/// rail), and a cluster of units yields one DP group per position in the list.
struct Block {
    units: Vec<Vec<usize>>,
    matrix: DistanceMatrix,
}

/// One feasible group size with its clustering.
struct Candidate {
    size: usize,
    /// Clusters of units, per block.
    clusters: Vec<Vec<Vec<usize>>>,
    /// Mean distance inside the clusters.
    within: f64,
}

/// Groups RNICs into groups of at least two (a task whose RNICs all look
/// different has no DP groups to find and keeps the basic pinglist).
///
/// When every host has the same rails, whole hosts are clustered: replicas
/// lay out their ranks alike, so the hosts at the same place in different
/// replicas match rail by rail, and a host distance averaged over its rails
/// is far less noisy than one RNIC's. Otherwise each rail's RNICs are
/// clustered on their own.
pub fn group(
    endpoints: &[Endpoint],
    features: &TaskFeatures,
    config: &GroupingConfig,
) -> Result<Grouping, FallbackReason> {
    let dist = |i: usize, j: usize| distance(endpoints, features, config.phase_weight, i, j);
    let blocks = match uniform_hosts(endpoints) {
        Some(hosts) => {
            let rails = hosts[0].len() as f64;
            let matrix = DistanceMatrix::new(hosts.len(), |a, b| {
                hosts[a]
                    .iter()
                    .zip(&hosts[b])
                    .map(|(&i, &j)| dist(i, j))
                    .sum::<f64>()
                    / rails
            });
            vec![Block {
                units: hosts,
                matrix,
            }]
        }
        None => per_rail(endpoints)
            .into_iter()
            .map(|rail| {
                let matrix = DistanceMatrix::new(rail.len(), |a, b| dist(rail[a], rail[b]));
                Block {
                    units: rail.into_iter().map(|i| vec![i]).collect(),
                    matrix,
                }
            })
            .collect(),
    };
    let common = blocks.iter().map(|b| b.units.len()).fold(0, gcd);
    if common < 2 {
        return Err(FallbackReason::NoReplicas);
    }

    let candidates: Vec<Candidate> = (2..=common)
        .filter(|d| common.is_multiple_of(*d))
        .filter_map(|d| {
            let clusters = blocks
                .iter()
                .map(|b| regroup(agglomerate(&b.matrix, d), d, &b.matrix))
                .collect::<Option<Vec<_>>>()?;
            let count: usize = clusters.iter().map(Vec::len).sum();
            let within: f64 = blocks
                .iter()
                .zip(&clusters)
                .map(|(b, c)| mean_within(c, |i, j| b.matrix.get(i, j)) * c.len() as f64)
                .sum::<f64>()
                / count as f64;
            Some(Candidate {
                size: d,
                clusters,
                within,
            })
        })
        .collect();

    let floor = |w: f64| w.max(config.noise_floor);
    let mut best: Option<(usize, f64)> = None;
    for (k, candidate) in candidates.iter().enumerate() {
        let next = candidates
            .get(k + 1)
            .map_or(config.unrelated_distance, |c| c.within);
        let score = floor(next) / floor(candidate.within);
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((k, score));
        }
    }
    let (k, separation) = best.ok_or(FallbackReason::ConstraintsUnsatisfiable)?;
    let Candidate {
        size: dp, clusters, ..
    } = candidates
        .into_iter()
        .nth(k)
        .ok_or(FallbackReason::ConstraintsUnsatisfiable)?;
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (block, block_clusters) in blocks.iter().zip(clusters) {
        for cluster in block_clusters {
            for position in 0..block.units[cluster[0]].len() {
                let mut g: Vec<usize> = cluster.iter().map(|&u| block.units[u][position]).collect();
                g.sort_unstable();
                groups.push(g);
            }
        }
    }
    groups.sort();
    Ok(Grouping {
        groups,
        dp,
        separation,
    })
}

/// RNIC indices per host, ordered by rail, if every host has the same rails
/// (each once); `None` for mixed hosts.
fn uniform_hosts(endpoints: &[Endpoint]) -> Option<Vec<Vec<usize>>> {
    let mut by_host: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, e) in endpoints.iter().enumerate() {
        by_host.entry(e.host).or_default().push(i);
    }
    let mut hosts: Vec<(u32, Vec<usize>)> = by_host.into_iter().collect();
    hosts.sort_by_key(|(h, _)| *h);
    for (_, rnics) in hosts.iter_mut() {
        rnics.sort_by_key(|&i| endpoints[i].rail);
    }
    let rails = |rnics: &[usize]| rnics.iter().map(|&i| endpoints[i].rail).collect::<Vec<_>>();
    let first = rails(&hosts.first()?.1);
    let distinct = first.windows(2).all(|w| w[0] != w[1]);
    (distinct && hosts.iter().all(|(_, r)| rails(r) == first))
        .then(|| hosts.into_iter().map(|(_, r)| r).collect())
}

/// RNIC indices per rail.
fn per_rail(endpoints: &[Endpoint]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..endpoints.len()).collect();
    order.sort_by_key(|&i| (endpoints[i].rail, endpoints[i].id));
    order
        .chunk_by(|&a, &b| endpoints[a].rail == endpoints[b].rail)
        .map(<[usize]>::to_vec)
        .collect()
}

/// Keeps clusters of exactly `size` points and regroups the rest greedily:
/// each leftover seeds a group with its nearest compatible leftovers.
/// `None` if the cannot-link pairs make that impossible.
fn regroup(clusters: Vec<Vec<usize>>, size: usize, m: &DistanceMatrix) -> Option<Vec<Vec<usize>>> {
    let (mut full, partial): (Vec<_>, Vec<_>) = clusters.into_iter().partition(|c| c.len() == size);
    let mut leftovers: Vec<usize> = partial.into_iter().flatten().collect();
    while let Some(seed) = leftovers.pop() {
        let mut group = vec![seed];
        let mut by_distance = leftovers.clone();
        by_distance.sort_by(|&a, &b| m.get(seed, a).total_cmp(&m.get(seed, b)));
        for cand in by_distance {
            if group.len() == size {
                break;
            }
            if group.iter().all(|&g| m.get(g, cand).is_finite()) {
                group.push(cand);
            }
        }
        if group.len() < size {
            return None;
        }
        leftovers.retain(|l| !group.contains(l));
        full.push(group);
    }
    Some(full)
}

/// Mean over groups of the mean pairwise distance inside the group
/// (singletons count as 0).
pub fn mean_within(groups: &[Vec<usize>], mut dist: impl FnMut(usize, usize) -> f64) -> f64 {
    if groups.is_empty() {
        return 0.0;
    }
    let total: f64 = groups
        .iter()
        .map(|g| {
            let mut sum = 0.0;
            let mut count = 0usize;
            for (i, &a) in g.iter().enumerate() {
                for &b in &g[i + 1..] {
                    sum += dist(a, b);
                    count += 1;
                }
            }
            if count == 0 { 0.0 } else { sum / count as f64 }
        })
        .sum();
    total / groups.len() as f64
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}
