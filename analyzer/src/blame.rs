//! Flow blame on hot links (Vedrfolnir §III-D, R-Pingmesh §7.3): for a link, switch or
//! latency problem on a switch or link, the tasks and service flows whose traced 5-tuples
//! cross that component, ranked by their share of its traffic, go into the problem's
//! evidence — who is hurting the hot link, and whom the broken one hurts.
//!
//! A service flow is a 5-tuple probed with class `Service` (task skeleton pairs and the
//! RC connections service tracing found): ingest notes them ([`ServiceFlows`]), the path
//! store knows their current paths. A flow's traffic is estimated from its source RNIC's
//! sampled throughput spread evenly over that RNIC's service flows (per-flow counters are
//! not sampled); with no throughput known on the component, shares are by flow count.
//! Runs as an enrichment step on each diagnosis tick's findings, outside the localization.

use crate::crossing::Crossing;
use crate::diagnosis::Diagnosis;
use crate::diagnosis::engine::Candidate;
use crate::registry::Registry;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{BlamedFlow, ComponentKind, ProblemKind};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

/// Service 5-tuples remembered at most.
pub(crate) const MAX_SERVICE_FLOWS: usize = 200_000;
/// A service 5-tuple not probed for this long is no longer a flow.
pub(crate) const FLOW_TTL_MS: i64 = 60_000;
/// Entries of one problem's blame list at most.
pub(crate) const MAX_BLAMED: usize = 10;
/// Traced 5-tuples one enrichment reads at most.
const MAX_TRACES: usize = 200_000;

/// Bytes per second of an RNIC, when known (the controller's throughput samples).
pub(crate) type RateSource = dyn Fn(u32) -> Option<f64> + Send + Sync;

/// Service 5-tuples (prober RNIC, target RNIC, source port) with when they were last
/// probed; bounded by [`MAX_SERVICE_FLOWS`]. Hashed with foldhash: ingest looks up every
/// service-class result.
#[derive(Debug, Default)]
pub(crate) struct ServiceFlows {
    seen: foldhash::HashMap<(u32, u32, u16), i64>,
}

impl ServiceFlows {
    /// Notes a service-class probe result at `now_ms`.
    #[inline]
    pub(crate) fn note(&mut self, r: &ProbeResult, now_ms: i64) {
        let key = (r.prober_rnic, r.target_rnic, r.src_port);
        if let Some(t) = self.seen.get_mut(&key) {
            *t = now_ms;
            return;
        }
        if self.seen.len() >= MAX_SERVICE_FLOWS {
            self.seen.retain(|_, t| now_ms - *t < FLOW_TTL_MS);
            if self.seen.len() >= MAX_SERVICE_FLOWS {
                return;
            }
        }
        self.seen.insert(key, now_ms);
    }

    /// The 5-tuples probed within [`FLOW_TTL_MS`] of `now_ms`.
    pub(crate) fn live(&self, now_ms: i64) -> Vec<(u32, u32, u16)> {
        self.seen
            .iter()
            .filter(|(_, t)| now_ms - **t < FLOW_TTL_MS)
            .map(|(k, _)| *k)
            .collect()
    }
}

/// One service flow and the path it takes now.
#[derive(Debug, Clone)]
pub(crate) struct Flow {
    /// Prober (source) RNIC id.
    pub src: u32,
    /// Target RNIC id.
    pub dst: u32,
    /// UDP source port.
    pub sport: u16,
    /// What its current path crosses.
    pub crossing: Crossing,
}

/// True for the problems whose component carries traffic worth apportioning.
pub(crate) fn applies(kind: ProblemKind, component: ComponentKind) -> bool {
    matches!(
        kind,
        ProblemKind::LinkFault | ProblemKind::SwitchFault | ProblemKind::HighLatency
    ) && matches!(component, ComponentKind::Link | ComponentKind::Switch)
}

/// The tasks and task-less flows among `flows` that cross `component`, largest share
/// first, at most [`MAX_BLAMED`].
pub(crate) fn rank(
    component: &str,
    flows: &[Flow],
    registry: &Registry,
    rate: &RateSource,
) -> Vec<BlamedFlow> {
    let mut per_src: HashMap<u32, u32> = HashMap::new();
    for f in flows {
        *per_src.entry(f.src).or_default() += 1;
    }
    let mut rates: HashMap<u32, Option<f64>> = HashMap::new();
    // (task id or none, name) -> (flows, known bytes/s, any rate known)
    let mut groups: BTreeMap<(Option<u32>, String), (u32, f64, bool)> = BTreeMap::new();
    for f in flows.iter().filter(|f| f.crossing.crosses(component)) {
        let r = *rates.entry(f.src).or_insert_with(|| rate(f.src));
        let bytes = r.map(|r| r / f64::from(per_src[&f.src]));
        let theirs = registry.tasks_of(f.dst);
        let mut keys: Vec<(Option<u32>, String)> = registry
            .tasks_of(f.src)
            .iter()
            .filter(|t| theirs.contains(t))
            .map(|&t| (registry.task_id(t), registry.task_name(t).to_string()))
            .collect();
        if keys.is_empty() {
            let name = |id: u32| {
                registry
                    .meta(id)
                    .map_or_else(|| id.to_string(), |m| m.name.clone())
            };
            keys.push((
                None,
                format!("{} -> {} sport {}", name(f.src), name(f.dst), f.sport),
            ));
        }
        for k in keys {
            let g = groups.entry(k).or_default();
            g.0 += 1;
            g.1 += bytes.unwrap_or(0.0);
            g.2 |= bytes.is_some();
        }
    }
    let by_bytes = groups.values().any(|g| g.2 && g.1 > 0.0);
    let total: f64 = groups
        .values()
        .map(|g| if by_bytes { g.1 } else { f64::from(g.0) })
        .sum();
    let mut out: Vec<BlamedFlow> = groups
        .into_iter()
        .map(|((task_id, name), (n, bytes, known))| BlamedFlow {
            name,
            task_id,
            flows: n,
            bytes_per_s: known.then_some(bytes),
            share: if total > 0.0 {
                (if by_bytes { bytes } else { f64::from(n) }) / total
            } else {
                0.0
            },
        })
        .collect();
    out.sort_by(|a, b| {
        b.share
            .total_cmp(&a.share)
            .then_with(|| a.name.cmp(&b.name))
    });
    out.truncate(MAX_BLAMED);
    out
}

/// The current paths of `live` service flows in the diagnosis' path store: the latest
/// trace when it reached the destination, else the last one that did.
pub(crate) fn flows(d: &Diagnosis, registry: &Registry, live: &[(u32, u32, u16)]) -> Vec<Flow> {
    let ip = |id: u32| registry.meta(id).map(|m| m.ip);
    let mut wanted: HashMap<(IpAddr, IpAddr, u16), (u32, u32)> = HashMap::new();
    for &(src, dst, sport) in live {
        if let (Some(a), Some(b)) = (ip(src), ip(dst)) {
            wanted.insert((a, b, sport), (src, dst));
        }
    }
    if wanted.is_empty() {
        return Vec::new();
    }
    let mut seen = HashSet::new();
    d.traces(
        |t| !t.ack_direction && wanted.contains_key(&(t.src, t.dst, t.src_port)),
        MAX_TRACES,
    )
    .into_iter()
    .filter_map(|t| {
        let key = (t.latest.src, t.latest.dst, t.latest.src_port);
        let (src, dst) = wanted[&key];
        let path = if t.latest.reached {
            Some(&t.latest)
        } else {
            t.complete.as_ref()
        };
        // One flow per 5-tuple (traces with other destination ports are the same flow).
        (seen.insert(key)).then_some(())?;
        Some(Flow {
            src,
            dst,
            sport: key.2,
            crossing: Crossing::of(d.map(), path.unwrap_or(&t.latest)),
        })
    })
    .collect()
}

/// Puts the blame list on every finding it applies to.
pub(crate) fn enrich(
    d: &Diagnosis,
    registry: &Registry,
    live: impl FnOnce() -> Vec<(u32, u32, u16)>,
    rate: &RateSource,
    candidates: &mut [Candidate],
) {
    if !candidates.iter().any(|c| applies(c.kind, c.component_kind)) {
        return;
    }
    let flows = flows(d, registry, &live());
    for c in candidates
        .iter_mut()
        .filter(|c| applies(c.kind, c.component_kind))
    {
        c.evidence.blamed = rank(&c.component, &flows, registry, rate);
    }
}

#[cfg(test)]
mod tests;
