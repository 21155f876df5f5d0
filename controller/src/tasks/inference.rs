//! Runtime skeleton of a task (SkeletonHunter §5.1): its RNICs' aligned throughput goes
//! through `rocemesh_skeleton::infer`, and the outcome becomes the task's [`Runtime`].

use super::resolve::{Pair, TaskDerived};
use super::{Runtime, TaskRecord};
use crate::throughput::ThroughputStore;
use rocemesh_proto::api::SkeletonInfo;
use rocemesh_skeleton::{Endpoint, InferenceConfig, Observation, Outcome, infer};
use std::collections::HashMap;

/// A snapshot to infer on, taken under the locks and run outside them.
#[derive(Debug)]
pub(crate) struct Input {
    /// Task id.
    pub(crate) task_id: u32,
    /// The spec the snapshot belongs to.
    pub(crate) spec_version: u64,
    observations: Vec<Observation>,
    /// Endpoint index of each RNIC id.
    index_of: HashMap<u32, u32>,
}

/// Gathers a task's observations: every endpoint registered, every RNIC with at least
/// `min_samples` samples over common intervals; else why not.
pub(crate) fn prepare(
    task: &TaskRecord,
    derived: &TaskDerived,
    store: &ThroughputStore,
    min_samples: usize,
) -> Result<Input, String> {
    let resolved = &derived.resolved;
    let mut rnics = Vec::with_capacity(task.endpoints.len());
    for (e, rnic) in task.endpoints.iter().zip(&resolved.rnic) {
        rnics
            .push(rnic.ok_or_else(|| format!("endpoint {}/{} is not registered", e.host, e.rnic))?);
    }
    let series = store.aligned(&rnics, min_samples)?;
    let observations = rnics
        .iter()
        .zip(&resolved.endpoints)
        .zip(series)
        .map(|((&id, placed), bytes)| Observation {
            endpoint: Endpoint { id, ..*placed },
            bytes,
        })
        .collect();
    let index_of = rnics
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i as u32))
        .collect();
    Ok(Input {
        task_id: task.id,
        spec_version: task.spec_version,
        observations,
        index_of,
    })
}

/// The basic list stays, for `reason`.
fn fallback(reason: String) -> Runtime {
    Runtime::Fallback {
        info: SkeletonInfo {
            dp: 0,
            tp_pp: 0,
            groups: Vec::new(),
            pairs: 0,
            fallback_reason: Some(reason),
        },
    }
}

/// Infers the skeleton (CPU-heavy: run it off the async workers). Input the skeleton
/// crate refuses also keeps the basic list, with its error as the reason.
pub(crate) fn run(input: &Input, cfg: &InferenceConfig) -> Runtime {
    let inference = match infer(&input.observations, cfg) {
        Ok(inference) => inference,
        Err(e) => return fallback(e.to_string()),
    };
    match inference.outcome {
        Outcome::Fallback { reason } => fallback(reason.to_string()),
        Outcome::Skeleton { structure, pairs } => {
            let index = |id: &u32| input.index_of.get(id).copied();
            let mut pairs: Vec<Pair> = pairs
                .iter()
                .filter_map(|(a, b)| Some((index(a)?, index(b)?)))
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect();
            pairs.sort_unstable();
            let info = SkeletonInfo {
                dp: structure.dp as u32,
                tp_pp: (structure.tp * structure.pp) as u32,
                groups: structure.groups,
                pairs: pairs.len(),
                fallback_reason: None,
            };
            Runtime::Skeleton { info, pairs }
        }
    }
}
