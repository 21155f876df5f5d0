//! What a task means against the current registry: which RNIC each endpoint is, its rail,
//! the same-rail basic pairs, and the pairs probed now. Recomputed only when the registry
//! or the task book changed (see [`Derived::is_for`]).

use super::{Runtime, TaskBook, TaskRecord};
use crate::registry::{Registry, RnicRecord};
use rocemesh_proto::api::TaskEndpoint;
use rocemesh_skeleton::{Endpoint, basic_pairs};
use std::collections::{HashMap, HashSet};

/// A probe pair of endpoint indices within one task, smaller first.
pub(crate) type Pair = rocemesh_skeleton::Pair;

/// Registered RNICs by (host name, ifname): how endpoints are resolved.
pub(crate) struct RnicIndex<'a> {
    by_name: HashMap<(&'a str, &'a str), &'a RnicRecord>,
}

impl<'a> RnicIndex<'a> {
    /// Indexes every registered RNIC.
    pub(crate) fn new(reg: &'a Registry) -> Self {
        let by_name = reg
            .rnics()
            .filter_map(|r| Some(((reg.host(r.host_id)?.name.as_str(), r.ifname.as_str()), r)))
            .collect();
        Self { by_name }
    }

    /// The registered RNIC an endpoint names.
    pub(crate) fn get(&self, e: &TaskEndpoint) -> Option<&'a RnicRecord> {
        self.by_name
            .get(&(e.host.as_str(), e.rnic.as_str()))
            .copied()
    }
}

/// A task's endpoints placed on hosts and rails.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// RNIC id of each endpoint, `None` while it is not registered.
    pub(crate) rnic: Vec<Option<u32>>,
    /// Each endpoint for the skeleton crate: id = endpoint index, host = index of its host
    /// name within the task, rail = the endpoint's rail, else the RNIC's registered rail,
    /// else its rank among the task's endpoints on its host (spec order).
    pub(crate) endpoints: Vec<Endpoint>,
    /// Same-rail pairs across hosts; empty when they would exceed `task_max_pairs`.
    pub(crate) basic: Vec<Pair>,
}

/// Places endpoints (RNIC ids and skeleton endpoints), without the pairs.
pub(crate) fn place(
    endpoints: &[TaskEndpoint],
    index: &RnicIndex<'_>,
) -> (Vec<Option<u32>>, Vec<Endpoint>) {
    let mut hosts: HashMap<&str, (u32, u16)> = HashMap::new();
    let mut rnic = Vec::with_capacity(endpoints.len());
    let mut placed = Vec::with_capacity(endpoints.len());
    for (i, e) in endpoints.iter().enumerate() {
        let next_host = hosts.len() as u32;
        let (host, rank) = hosts.entry(e.host.as_str()).or_insert((next_host, 0));
        let record = index.get(e);
        let rail = e
            .rail
            .or(record.and_then(|r| r.rail))
            .and_then(|r| u16::try_from(r).ok())
            .unwrap_or(*rank);
        *rank = rank.saturating_add(1);
        rnic.push(record.map(|r| r.id));
        placed.push(Endpoint {
            id: i as u32,
            host: *host,
            rail,
        });
    }
    (rnic, placed)
}

/// Number of same-rail, cross-host pairs, without listing them.
pub(crate) fn count_basic(endpoints: &[Endpoint]) -> usize {
    let pairs = |n: usize| n * n.saturating_sub(1) / 2;
    let mut rails: HashMap<u16, usize> = HashMap::new();
    let mut rail_hosts: HashMap<(u16, u32), usize> = HashMap::new();
    for e in endpoints {
        *rails.entry(e.rail).or_default() += 1;
        *rail_hosts.entry((e.rail, e.host)).or_default() += 1;
    }
    rails.values().map(|&n| pairs(n)).sum::<usize>()
        - rail_hosts.values().map(|&n| pairs(n)).sum::<usize>()
}

/// Resolves one task; its basic list is left empty (and logged) above `max_pairs`.
pub(crate) fn resolve(task: &TaskRecord, index: &RnicIndex<'_>, max_pairs: usize) -> Resolved {
    let (rnic, endpoints) = place(&task.endpoints, index);
    let count = count_basic(&endpoints);
    let basic = if count > max_pairs {
        tracing::warn!(task = %task.name, pairs = count, max_pairs, "task has more basic pairs than task_max_pairs: not probed");
        Vec::new()
    } else {
        // The spec was validated (>= 2 endpoints, distinct indices), so this cannot fail.
        basic_pairs(&endpoints).unwrap_or_default()
    };
    Resolved {
        rnic,
        endpoints,
        basic,
    }
}

/// Derived data of one task.
#[derive(Debug, Clone)]
pub(crate) struct TaskDerived {
    /// Placement and basic pairs.
    pub(crate) resolved: Resolved,
    /// Pairs probed now: of the skeleton (runtime) or the basic list, with both endpoints
    /// ready and registered.
    pub(crate) active: Vec<Pair>,
}

/// Derived data of every task for one (registry, task book) generation pair.
#[derive(Debug, Default)]
pub(crate) struct Derived {
    registry_generation: u64,
    book_generation: u64,
    per_task: HashMap<u32, TaskDerived>,
    /// RNIC ids that belong to some task (whose throughput is kept).
    pub(crate) members: HashSet<u32>,
}

impl Derived {
    /// Derives everything from the registry and the book.
    pub(crate) fn build(reg: &Registry, book: &TaskBook, max_pairs: usize) -> Self {
        let index = RnicIndex::new(reg);
        let mut per_task = HashMap::new();
        let mut members = HashSet::new();
        for task in book.tasks() {
            let resolved = resolve(task, &index, max_pairs);
            members.extend(resolved.rnic.iter().flatten());
            let live =
                |i: u32| task.endpoints[i as usize].ready && resolved.rnic[i as usize].is_some();
            let source = match &task.runtime {
                Runtime::Skeleton { pairs, .. } => pairs,
                Runtime::Preload | Runtime::Fallback { .. } => &resolved.basic,
            };
            let active = source
                .iter()
                .filter(|(a, b)| live(*a) && live(*b))
                .copied()
                .collect();
            per_task.insert(task.id, TaskDerived { resolved, active });
        }
        Self {
            registry_generation: reg.generation(),
            book_generation: book.generation(),
            per_task,
            members,
        }
    }

    /// Whether this was derived from exactly these generations.
    pub(crate) fn is_for(&self, reg: &Registry, book: &TaskBook) -> bool {
        self.registry_generation == reg.generation() && self.book_generation == book.generation()
    }

    /// One task's derived data.
    pub(crate) fn task(&self, id: u32) -> Option<&TaskDerived> {
        self.per_task.get(&id)
    }

    /// Every task's derived data.
    pub(crate) fn tasks(&self) -> impl Iterator<Item = (&u32, &TaskDerived)> {
        self.per_task.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, rnic: &str, rail: Option<u32>) -> TaskEndpoint {
        TaskEndpoint {
            host: host.into(),
            rnic: rnic.into(),
            rail,
            namespace: None,
            pod: None,
            ready: false,
        }
    }

    #[test]
    fn rails_default_to_rank_on_host_and_counts_match_the_listing() {
        let reg = Registry::default();
        let index = RnicIndex::new(&reg);
        // 4 hosts x 8 RNICs, no rails given: rank on host is the rail.
        let eps: Vec<TaskEndpoint> = (0..4)
            .flat_map(|h| (0..8).map(move |r| ep(&format!("h{h}"), &format!("mlx5_{r}"), None)))
            .collect();
        let (rnic, placed) = place(&eps, &index);
        assert!(rnic.iter().all(Option::is_none));
        assert_eq!(
            placed[9],
            Endpoint {
                id: 9,
                host: 1,
                rail: 1
            }
        );
        let basic = basic_pairs(&placed).unwrap();
        assert_eq!(count_basic(&placed), basic.len());
        assert_eq!(basic.len(), 8 * 6, "8 rails x C(4,2)");
        // An explicit rail wins over the rank; two RNICs of one host on a rail are not paired.
        let eps = vec![
            ep("a", "x", Some(3)),
            ep("a", "y", Some(3)),
            ep("b", "x", Some(3)),
        ];
        let (_, placed) = place(&eps, &index);
        assert_eq!(count_basic(&placed), 2);
        assert_eq!(basic_pairs(&placed).unwrap(), vec![(0, 2), (1, 2)]);
    }
}
