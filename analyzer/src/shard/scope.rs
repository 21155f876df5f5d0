//! What one analyzer instance answers for: the hosts whose home ToR falls into its
//! shards (their RNICs, hosts and agents), and the fabric (links, switches) while it
//! holds the tomography lease.

use crate::diagnosis::engine::Candidate;
use crate::registry::Registry;
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind};
use rocemesh_store::coord::shard_of;
use std::collections::{BTreeMap, HashMap};

/// This instance's shards (with when each was taken) and tomography lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Shards held, each with the time it was taken.
    pub shards: BTreeMap<u32, i64>,
    /// Shards in the deployment.
    pub count: u32,
    /// True while this instance runs the cross-shard tomography.
    pub tomography: bool,
}

/// Per host name, its shard; per RNIC name, its host's shard (the shard of the host's
/// home ToR: the ToR of its lowest-id RNIC, as the controller computes it).
#[derive(Debug, Default)]
pub struct ShardMap {
    hosts: HashMap<String, u32>,
    rnics: HashMap<String, u32>,
}

impl ShardMap {
    /// Maps every registered host and RNIC to its shard among `count`.
    pub fn new(registry: &Registry, count: u32) -> Self {
        let mut home: HashMap<u32, u32> = HashMap::new();
        for id in registry.rnic_ids() {
            if let Some(e) = registry.get(id) {
                home.entry(e.host_id)
                    .or_insert_with(|| shard_of(registry.tor_name(e.tor), count));
            }
        }
        let mut map = Self::default();
        for id in registry.rnic_ids() {
            let (Some(e), Some(m)) = (registry.get(id), registry.meta(id)) else {
                continue;
            };
            if let Some(&s) = home.get(&e.host_id) {
                map.rnics.insert(m.name.clone(), s);
                map.hosts.insert(m.host.clone(), s);
            }
        }
        map
    }
}

impl Scope {
    /// True when this instance answers for problems of `kind` on component `name` at
    /// `now_ms`. A host-down verdict waits `host_grace_ms` after its shard was taken
    /// (its agent may not have moved here yet).
    pub fn keeps(
        &self,
        map: &ShardMap,
        (kind, ck, name): (ProblemKind, ComponentKind, &str),
        now_ms: i64,
        host_grace_ms: i64,
    ) -> bool {
        let shard = match ck {
            ComponentKind::Link | ComponentKind::Switch | ComponentKind::Flow => {
                return self.tomography;
            }
            ComponentKind::Rnic => map.rnics.get(name),
            _ => map.hosts.get(name),
        };
        let Some(taken) = shard.and_then(|s| self.shards.get(s)) else {
            return false;
        };
        kind != ProblemKind::HostDown || now_ms - taken >= host_grace_ms
    }

    /// [`Self::keeps`] for a finding of this tick.
    pub fn keeps_candidate(&self, map: &ShardMap, c: &Candidate, now_ms: i64, grace: i64) -> bool {
        self.keeps(map, (c.kind, c.component_kind, &c.component), now_ms, grace)
    }

    /// [`Self::keeps`] for a tracked or stored problem (never delayed: it exists already).
    pub fn keeps_problem(&self, map: &ShardMap, p: &Problem) -> bool {
        self.keeps(map, (p.kind, p.component_kind, &p.component), i64::MAX, 0)
    }
}
