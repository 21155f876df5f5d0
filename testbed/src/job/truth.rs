//! The ground truth of a job, exported so skeleton inference is scored, never assumed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::plan::{Phase, Plan, RnicRef};

/// Position of the GPU an RNIC serves (RNIC i of a host serves local GPU i).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RnicRole {
    /// Global rank `((dp_index · pp) + stage) · tp + tp_index`.
    pub rank: u32,
    /// Data-parallel replica.
    pub dp_index: u32,
    /// Pipeline stage.
    pub stage: u32,
    /// Rank inside the tensor-parallel group.
    pub tp_index: u32,
}

/// What the job really is: roles, DP groups and the RNIC pairs that carry its traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTruth {
    /// Role of every RNIC of the job, by RNIC name ("h3r0").
    pub rnics: BTreeMap<String, RnicRole>,
    /// RNICs holding the same (stage, tp_index) across replicas, ordered by stage, tp_index,
    /// then members by dp_index: the groups inference must find.
    pub dp_groups: Vec<Vec<String>>,
    /// RNIC pairs carrying pipeline (activation) traffic, each once, lower fabric index first.
    pub pp_pairs: Vec<[String; 2]>,
    /// RNIC pairs carrying DP all-reduce (ring) traffic, each once, lower fabric index first.
    pub dp_pairs: Vec<[String; 2]>,
}

fn pairs<'a>(transfers: impl Iterator<Item = (&'a RnicRef, &'a RnicRef)>) -> Vec<[String; 2]> {
    let place = |r: &RnicRef| (r.host, r.rail);
    let mut v: Vec<[&RnicRef; 2]> = transfers
        .map(|(a, b)| if place(a) <= place(b) { [a, b] } else { [b, a] })
        .collect();
    v.sort_by_key(|[a, b]| (place(a), place(b)));
    v.dedup_by_key(|[a, b]| (place(a), place(b)));
    v.into_iter()
        .map(|[a, b]| [a.name.clone(), b.name.clone()])
        .collect()
}

impl JobTruth {
    /// Derives the truth from the same plan the helpers send.
    pub(crate) fn of(plan: &Plan) -> JobTruth {
        let s = &plan.spec;
        let role = |rank: usize| {
            let g = plan.gpu(rank);
            RnicRole {
                rank: rank as u32,
                dp_index: g.dp_index,
                stage: g.stage,
                tp_index: g.tp_index,
            }
        };
        let rnics = plan
            .ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| (r.name.clone(), role(rank)))
            .collect();
        let mut dp_groups = Vec::new();
        for stage in 0..s.pp {
            for tp_index in 0..s.tp {
                let members = (0..s.dp)
                    .map(|dp_index| {
                        plan.rank(super::plan::Gpu {
                            dp_index,
                            stage,
                            tp_index,
                        })
                    })
                    .map(|rank| plan.ranks[rank].name.clone())
                    .collect();
                dp_groups.push(members);
            }
        }
        let of_phase = |want: fn(Phase) -> bool| {
            pairs(
                plan.transfers
                    .iter()
                    .filter(move |t| want(t.phase))
                    .map(|t| (&t.from, &t.to)),
            )
        };
        JobTruth {
            rnics,
            dp_groups,
            pp_pairs: of_phase(|p| p != Phase::AllReduce),
            dp_pairs: of_phase(|p| p == Phase::AllReduce),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::spec::tests::{fabric, job};
    use super::*;
    use crate::job::JobSpec;
    use crate::topology::Topology;

    fn truth(spec: &JobSpec) -> JobTruth {
        JobTruth::of(&Plan::new(&Topology::new(&fabric(true)), spec).unwrap())
    }

    #[test]
    fn reference_job_groups_are_rails() {
        let t = truth(&job());
        assert_eq!(t.rnics.len(), 16);
        assert_eq!(
            t.rnics["h1r3"],
            RnicRole {
                rank: 7,
                dp_index: 1,
                stage: 1,
                tp_index: 1
            }
        );
        assert_eq!(t.dp_groups.len(), 4);
        assert_eq!(t.dp_groups[0], vec!["h0r0", "h1r0", "h2r0", "h3r0"]);
        assert_eq!(t.dp_groups[3], vec!["h0r3", "h1r3", "h2r3", "h3r3"]);
        assert!(t.pp_pairs.is_empty(), "pipeline stays on NVLink");
        // A ring of 4 has 4 undirected edges; 4 rings.
        assert_eq!(t.dp_pairs.len(), 16);
        assert!(
            t.dp_pairs
                .contains(&["h0r2".to_string(), "h3r2".to_string()])
        );
    }

    #[test]
    fn two_replica_ring_is_one_pair_and_pipeline_pairs_are_listed() {
        let t = truth(&JobSpec {
            tp: 4,
            dp: 2,
            ..job()
        });
        assert_eq!(t.dp_pairs.len(), 8, "{:?}", t.dp_pairs);
        assert_eq!(t.pp_pairs.len(), 8);
        assert!(
            t.pp_pairs
                .contains(&["h0r1".to_string(), "h1r1".to_string()])
        );
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<JobTruth>(&json).unwrap(), t);
    }
}
