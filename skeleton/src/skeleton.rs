//! The inferred parallel structure of a task and the pairs that really talk.

use std::collections::{BTreeSet, HashMap};

use crate::{
    Endpoint, Error,
    pairs::{Pair, ordered},
};

/// Parallel structure inferred from traffic.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Structure {
    /// DP groups: RNIC ids in the same position across replicas, each sorted,
    /// all of size `dp`, every group on one rail with at most one RNIC per host.
    pub groups: Vec<Vec<u32>>,
    /// Pipeline stage (0 = first to burst) of each group.
    pub stage_of_group: Vec<usize>,
    /// Data-parallel degree (group size, `⌊c̄⌉` of Eq. 2).
    pub dp: usize,
    /// Tensor-parallel degree, `N / DP / PP`.
    pub tp: usize,
    /// Pipeline-parallel degree (stages found in the burst phases).
    pub pp: usize,
    /// Iteration period in samples (see
    /// [`crate::features::TaskFeatures::period_samples`]).
    pub period_samples: f64,
    /// How much tighter the groups are than the next coarser grouping.
    pub separation: f64,
}

/// Pairs that carry the task's network traffic according to `structure`:
/// - DP peers: every pair inside a group (the all-reduce ring/tree order is
///   not visible in throughput, so all pairs; the paper's "nine
///   destinations" of a 512-GPU task are 7 DP peers + 2 PP neighbours);
/// - PP neighbours: for stages `s` and `s + 1`, every same-rail pair between
///   a host holding `s` but not `s + 1` and a host holding `s + 1` but not
///   `s` (a host holding both passes activations over NVLink; which replica
///   pairs with which is not visible in throughput, so all such hosts; the
///   whole rail because cross-rail transfers leave on the receiver's rail);
/// - TP peers across hosts: same-rail pairs between different groups of one
///   stage (only when TP spans hosts).
///
/// Pairs of one host are left out (NVLink). Unordered, sorted, no duplicates.
pub fn skeleton_pairs(endpoints: &[Endpoint], structure: &Structure) -> Result<Vec<Pair>, Error> {
    let by_id: HashMap<u32, &Endpoint> = endpoints.iter().map(|e| (e.id, e)).collect();
    if structure.stage_of_group.len() != structure.groups.len() {
        return Err(Error::InvalidParameter(
            "one stage per group required".into(),
        ));
    }
    let mut groups: Vec<(usize, Vec<&Endpoint>)> = Vec::with_capacity(structure.groups.len());
    for (g, &stage) in structure.groups.iter().zip(&structure.stage_of_group) {
        let members = g
            .iter()
            .map(|id| by_id.get(id).copied().ok_or(Error::UnknownRnic(*id)))
            .collect::<Result<Vec<_>, _>>()?;
        groups.push((stage, members));
    }
    let mut pairs = Vec::new();
    let mut link = |a: &[&Endpoint], b: &[&Endpoint]| {
        for x in a {
            for y in b.iter().filter(|y| y.rail == x.rail && y.host != x.host) {
                pairs.push(ordered(x.id, y.id));
            }
        }
    };
    // DP peers and cross-host TP peers.
    for (i, (stage, members)) in groups.iter().enumerate() {
        link(members, members);
        for (other_stage, others) in &groups[i + 1..] {
            if stage == other_stage {
                link(members, others);
            }
        }
    }
    // PP neighbours, host to host.
    let mut stages_of_host: HashMap<u32, BTreeSet<usize>> = HashMap::new();
    for (stage, members) in &groups {
        for m in members {
            stages_of_host.entry(m.host).or_default().insert(*stage);
        }
    }
    let mut rnics_of_host: HashMap<u32, Vec<&Endpoint>> = HashMap::new();
    for e in endpoints {
        rnics_of_host.entry(e.host).or_default().push(e);
    }
    for s in 0..structure.pp.saturating_sub(1) {
        let holding = |has: usize, lacks: usize| -> Vec<&Endpoint> {
            stages_of_host
                .iter()
                .filter(|(_, st)| st.contains(&has) && !st.contains(&lacks))
                .flat_map(|(h, _)| rnics_of_host.get(h).into_iter().flatten().copied())
                .collect()
        };
        link(&holding(s, s + 1), &holding(s + 1, s));
    }
    pairs.sort_unstable();
    pairs.dedup();
    Ok(pairs)
}
