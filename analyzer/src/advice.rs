//! Path catalog and source-port advice (C4P; R-Pingmesh §7.3): for a (source RNIC,
//! destination RNIC) pair, every source port whose path is traced — probes and ECMP hash
//! a 5-tuple alike, so a traced port is a known path — and the ports whose forward path
//! and ACK path (both traced to the end) avoid every switch and link with an open
//! problem, ordered so that
//! consecutive ports take different spines. A service that sets these ports on its
//! connections (`modify_qp` flow label) routes around the fault and spreads its load.

use crate::crossing::Crossing;
use crate::diagnosis::fabric::FabricMap;
use rocemesh_proto::api::{ComponentKind, Problem, ProblemState};
use rocemesh_proto::path::TracedPath;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

/// The components open problems put on the avoid list.
#[derive(Debug, Default, Clone)]
pub(crate) struct Avoid {
    /// Switches and links of switch, link and latency problems, and the link and switch
    /// suspects of flow problems (a flow problem cannot single one out: avoid them all).
    fabric: HashSet<String>,
    /// RNICs and hosts with a problem: no port routes around these.
    endpoints: Vec<(ComponentKind, String)>,
}

impl Avoid {
    /// The avoid list of the active problems among `problems`.
    pub(crate) fn from_problems(problems: &[Problem]) -> Self {
        let mut avoid = Self::default();
        for p in problems.iter().filter(|p| p.state == ProblemState::Active) {
            match p.component_kind {
                ComponentKind::Switch | ComponentKind::Link => {
                    avoid.fabric.insert(p.component.clone());
                }
                ComponentKind::Flow => avoid.fabric.extend(
                    p.evidence
                        .candidates
                        .iter()
                        .filter(|c| {
                            matches!(
                                c.component_kind,
                                ComponentKind::Switch | ComponentKind::Link
                            )
                        })
                        .map(|c| c.component.clone()),
                ),
                ComponentKind::Rnic | ComponentKind::Host | ComponentKind::Agent => {
                    avoid
                        .endpoints
                        .push((p.component_kind, p.component.clone()));
                }
            }
        }
        avoid
    }

    fn crossed(&self, c: &Crossing) -> Vec<String> {
        let mut hit: Vec<String> = c
            .switches
            .iter()
            .chain(&c.links)
            .filter(|x| self.fabric.contains(*x))
            .cloned()
            .collect();
        hit.dedup();
        hit
    }
}

/// One end of the pair, as advice names it.
#[derive(Debug, Clone)]
pub(crate) struct PairEnd {
    /// `host/ifname`.
    pub name: String,
    /// Host name.
    pub host: String,
    /// Address (traced paths name their ends by it).
    pub ip: IpAddr,
}

/// One traced source port of the pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CatalogPath {
    /// UDP source port (RoCEv2: derived from the connection's flow label).
    pub src_port: u16,
    /// Switches of the forward path, in order.
    pub path: Vec<String>,
    /// Switches of the ACK path (responder to prober), when traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_path: Option<Vec<String>>,
    /// True when the forward trace reached the destination.
    pub reached: bool,
    /// When the forward path was traced (ms since the Unix epoch).
    pub traced_at_ms: i64,
    /// Components with an open problem this port's paths cross.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crosses: Vec<String>,
    /// True when this port is advised.
    pub advised: bool,
}

/// `GET /api/v1/paths/advice` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PortAdvice {
    /// Source RNIC (`host/ifname`).
    pub src: String,
    /// Destination RNIC.
    pub dst: String,
    /// Advised source ports, consecutive ones on different spines where the catalog
    /// allows; empty when no traced port avoids the open problems.
    pub ports: Vec<u16>,
    /// Spines (apex switches) the advised ports cover.
    pub spines: Vec<String>,
    /// Every traced port of the pair, advised first.
    pub catalog: Vec<CatalogPath>,
    /// Open problems on the pair's own RNICs or hosts, which no source port avoids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_problems: Vec<String>,
}

/// The advice for `src` -> `dst` from the traces among `traces` between their addresses
/// (either direction: ACK traces run from `dst` back to `src`).
pub(crate) fn advise(
    map: &FabricMap,
    src: &PairEnd,
    dst: &PairEnd,
    traces: &[TracedPath],
    avoid: &Avoid,
) -> PortAdvice {
    // Newest trace per (direction, port); forward ports key the catalog.
    let mut forward: BTreeMap<u16, &TracedPath> = BTreeMap::new();
    let mut acks: BTreeMap<u16, &TracedPath> = BTreeMap::new();
    for t in traces {
        let side = match (t.ack_direction, t.src == src.ip && t.dst == dst.ip) {
            (false, true) => &mut forward,
            (true, false) if t.src == dst.ip && t.dst == src.ip => &mut acks,
            _ => continue,
        };
        let e = side.entry(t.src_port).or_insert(t);
        if t.traced_at_unix_ns > e.traced_at_unix_ns {
            *e = t;
        }
    }
    let mut catalog: Vec<(CatalogPath, Option<String>)> = forward
        .iter()
        .map(|(&port, t)| {
            let fwd = Crossing::of(map, t);
            let ack = acks.get(&port).map(|a| Crossing::of(map, a));
            let mut crosses = avoid.crossed(&fwd);
            if let Some(a) = &ack {
                for x in avoid.crossed(a) {
                    if !crosses.contains(&x) {
                        crosses.push(x);
                    }
                }
            }
            // A broken-off or missing trace does not show the whole way there and back:
            // such a port is never advised.
            let ack_reached = acks.get(&port).is_some_and(|a| a.reached);
            let advised = t.reached && ack_reached && crosses.is_empty();
            let apex = fwd.apex().map(str::to_string);
            let path = CatalogPath {
                src_port: port,
                path: fwd.switches,
                ack_path: ack.map(|a| a.switches),
                reached: t.reached,
                traced_at_ms: i64::try_from(t.traced_at_unix_ns / 1_000_000).unwrap_or(i64::MAX),
                crosses,
                advised,
            };
            (path, apex)
        })
        .collect();
    // Round-robin over the spines: the first port of each spine, then the second, ...
    let mut by_spine: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for (c, apex) in catalog.iter().filter(|(c, _)| c.advised) {
        by_spine
            .entry(apex.clone().unwrap_or_default())
            .or_default()
            .push(c.src_port);
    }
    let mut ports = Vec::new();
    for round in 0.. {
        let before = ports.len();
        ports.extend(by_spine.values().filter_map(|v| v.get(round)));
        if ports.len() == before {
            break;
        }
    }
    catalog.sort_by_key(|(c, _)| (!c.advised, c.src_port));
    let endpoint_problems = avoid
        .endpoints
        .iter()
        .filter(|(kind, name)| match kind {
            ComponentKind::Rnic => *name == src.name || *name == dst.name,
            _ => *name == src.host || *name == dst.host,
        })
        .map(|(_, name)| name.clone())
        .collect();
    PortAdvice {
        src: src.name.clone(),
        dst: dst.name.clone(),
        ports,
        spines: by_spine.into_keys().filter(|s| !s.is_empty()).collect(),
        catalog: catalog.into_iter().map(|(c, _)| c).collect(),
        endpoint_problems,
    }
}

#[cfg(test)]
mod tests;
