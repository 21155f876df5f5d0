//! Task-service pinglists (SkeletonHunter §5.1): every active pair of every task becomes one
//! target in one prober's `ProbeClass::Service` list, merged per RNIC across tasks.

use super::resolve::Derived;
use crate::hash::stable_hash;
use crate::pinglist::{PortRange, target};
use crate::registry::Registry;
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::ProbeList;
use std::collections::{BTreeSet, HashMap};

/// Rates and ports of task-service lists (fixed at start).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServiceParams {
    /// Probes per second per pair.
    pub(crate) pair_pps: f64,
    /// Cap on one list's rate.
    pub(crate) max_pps: f64,
    pub(crate) ports: PortRange,
}

/// Which end of an unordered RNIC pair probes: a hash of the pair, so probing load spreads
/// evenly over a rail instead of piling on its lowest id, and stays put across rebuilds.
fn direction(a: u32, b: u32) -> (u32, u32) {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    if stable_hash(&[b"task-dir", &lo.to_le_bytes(), &hi.to_le_bytes()]) & 1 == 0 {
        (lo, hi)
    } else {
        (hi, lo)
    }
}

/// The service list of every prober RNIC, by RNIC id; targets sorted by id, each with a
/// source port fixed by (prober, target). List rate = targets x `pair_pps`, capped.
pub(crate) fn lists(
    reg: &Registry,
    derived: &Derived,
    p: ServiceParams,
) -> HashMap<u32, ProbeList> {
    let mut targets: HashMap<u32, BTreeSet<u32>> = HashMap::new();
    for (_, task) in derived.tasks() {
        for &(a, b) in &task.active {
            let rnic = |i: u32| task.resolved.rnic.get(i as usize).copied().flatten();
            if let (Some(x), Some(y)) = (rnic(a), rnic(b)) {
                let (prober, to) = direction(x, y);
                targets.entry(prober).or_default().insert(to);
            }
        }
    }
    targets
        .into_iter()
        .map(|(prober, to)| {
            let entries: Vec<_> = to
                .into_iter()
                .filter_map(|t| reg.rnic(t))
                .map(|t| {
                    let h = stable_hash(&[b"task", &prober.to_le_bytes(), &t.id.to_le_bytes()]);
                    target(t, p.ports.pick(h))
                })
                .collect();
            let pps = (entries.len() as f64 * p.pair_pps).min(p.max_pps);
            (
                prober,
                ProbeList {
                    class: ProbeClass::Service,
                    pps,
                    entries,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_is_symmetric_in_its_input_and_spreads_probers() {
        let mut lower = 0;
        for a in 0..200u32 {
            let b = a + 1000;
            assert_eq!(direction(a, b), direction(b, a));
            let (prober, target) = direction(a, b);
            assert_eq!(BTreeSet::from([prober, target]), BTreeSet::from([a, b]));
            lower += usize::from(prober == a);
        }
        assert!(
            (60..140).contains(&lower),
            "lower id probes {lower} of 200 pairs"
        );
    }
}
