//! The inferred parallel structure of a task and the pairs that really talk.

use std::collections::HashMap;

use crate::{
    Endpoint, Error,
    pairs::{Pair, ordered},
};

/// Parallel structure inferred from traffic.
#[derive(Debug, Clone, PartialEq)]
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
    /// Iteration period in samples.
    pub period_samples: f64,
    /// How much tighter the groups are than the next coarser grouping.
    pub separation: f64,
}

/// Pairs that carry the task's network traffic according to `structure`:
/// - DP peers: every pair inside a group (the all-reduce ring/tree order is
///   not visible in throughput, so all pairs; the paper's "nine
///   destinations" of a 512-GPU task are 7 DP peers + 2 PP neighbours);
/// - PP neighbours: RNICs on one rail, different hosts, in groups of
///   adjacent stages (which replica pairs with which is not visible either,
///   so all such pairs of the two groups);
/// - TP peers across hosts: RNICs on one rail, different hosts, in different
///   groups of the same stage.
///
/// Pairs of one host are left out (NVLink). Unordered, sorted, no duplicates.
pub fn skeleton_pairs(endpoints: &[Endpoint], structure: &Structure) -> Result<Vec<Pair>, Error> {
    let by_id: HashMap<u32, &Endpoint> = endpoints.iter().map(|e| (e.id, e)).collect();
    if structure.stage_of_group.len() != structure.groups.len() {
        return Err(Error::InvalidParameter("one stage per group required".into()));
    }
    let mut groups: Vec<(u16, usize, Vec<&Endpoint>)> = Vec::with_capacity(structure.groups.len());
    for (g, &stage) in structure.groups.iter().zip(&structure.stage_of_group) {
        let members = g
            .iter()
            .map(|id| by_id.get(id).copied().ok_or(Error::UnknownRnic(*id)))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = members.first() else { continue };
        groups.push((first.rail, stage, members));
    }
    let mut pairs = Vec::new();
    let mut link = |a: &[&Endpoint], b: &[&Endpoint]| {
        for x in a {
            for y in b {
                if x.host != y.host && x.id != y.id {
                    pairs.push(ordered(x.id, y.id));
                }
            }
        }
    };
    for (i, (rail, stage, members)) in groups.iter().enumerate() {
        link(members, members);
        for (other_rail, other_stage, others) in &groups[i + 1..] {
            let adjacent = stage.abs_diff(*other_stage) <= 1;
            if rail == other_rail && adjacent {
                link(members, others);
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    Ok(pairs)
}
