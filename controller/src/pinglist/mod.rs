//! Pinglists: pure functions of (registry, settings, rotation number), cached per
//! registry generation and rotation, versioned by a hash of their content so an agent's
//! poll is a cheap 304 unless its own lists changed.

pub mod coverage;
pub(crate) mod intertor;
mod tormesh;

use crate::hash::{port_in_range, stable_hash};
use crate::registry::{Registry, RnicRecord};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{PingTarget, Pinglist, ProbeList, RnicPinglist, TorInfo};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Inclusive UDP source-port range pinglists draw from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PortRange {
    pub(crate) min: u16,
    pub(crate) max: u16,
}

impl PortRange {
    /// The port a hash selects.
    pub(crate) fn pick(self, h: u64) -> u16 {
        port_in_range(h, self.min, self.max)
    }
}

/// Everything besides the registry that shapes pinglists (fixed at start).
#[derive(Debug, Clone)]
pub(crate) struct PinglistParams {
    pub(crate) tormesh_pps: f64,
    pub(crate) intertor_link_pps: f64,
    /// k of Eq. 1.
    pub(crate) tuples_per_tor: u32,
    /// Slots refreshed per rotation: ceil(rotation_fraction * k).
    pub(crate) rotated_per_period: u32,
    pub(crate) ports: PortRange,
    pub(crate) timeout_ms: u64,
    /// Longest ToR-mesh list of one RNIC (a larger ToR is sampled, rotating).
    pub(crate) tormesh_max_targets: usize,
}

/// The probe target of an RNIC with a chosen source port.
pub(crate) fn target(t: &RnicRecord, src_port: u16) -> PingTarget {
    PingTarget {
        rnic_id: t.id,
        ip: t.ip,
        port: t.port,
        qpn: t.qpn,
        src_port,
    }
}

/// RNICs grouped by resolved ToR, each group sorted by id.
pub(crate) fn tor_groups(reg: &Registry) -> BTreeMap<&str, Vec<&RnicRecord>> {
    let mut groups: BTreeMap<&str, Vec<&RnicRecord>> = BTreeMap::new();
    for r in reg.rnics() {
        groups.entry(r.tor.as_str()).or_default().push(r);
    }
    groups
}

/// The ToRs as the API shows them.
pub(crate) fn tor_infos(reg: &Registry) -> Vec<TorInfo> {
    tor_groups(reg)
        .into_iter()
        .map(|(name, g)| TorInfo {
            name: name.to_string(),
            rnics: g.iter().map(|r| r.id).collect(),
        })
        .collect()
}

/// Every host's pinglist; `service` holds the task-service list of each prober RNIC.
pub(crate) fn build_all(
    reg: &Registry,
    p: &PinglistParams,
    rotation: u64,
    mut service: HashMap<u32, ProbeList>,
) -> HashMap<u32, Arc<Pinglist>> {
    let groups = tor_groups(reg);
    let mut intertor: HashMap<u32, Vec<PingTarget>> = HashMap::new();
    for t in intertor::tuples(
        &groups,
        p.tuples_per_tor,
        p.rotated_per_period,
        rotation,
        p.ports,
    ) {
        intertor
            .entry(t.src.id)
            .or_default()
            .push(target(t.dst, t.src_port));
    }
    let mut per_host: HashMap<u32, Vec<RnicPinglist>> =
        reg.hosts().map(|h| (h.id, Vec::new())).collect();
    for group in groups.values() {
        for (index, r) in group.iter().enumerate() {
            let mut lists = Vec::new();
            let mesh = tormesh::targets(group, index, p.ports, p.tormesh_max_targets, rotation);
            if !mesh.is_empty() {
                lists.push(ProbeList {
                    class: ProbeClass::TorMesh,
                    pps: p.tormesh_pps,
                    entries: mesh,
                });
            }
            if let Some(entries) = intertor.remove(&r.id) {
                let pps = entries.len() as f64 * p.intertor_link_pps;
                lists.push(ProbeList {
                    class: ProbeClass::InterTor,
                    pps,
                    entries,
                });
            }
            if let Some(list) = service.remove(&r.id).filter(|l| !l.entries.is_empty()) {
                lists.push(list);
            }
            per_host.entry(r.host_id).or_default().push(RnicPinglist {
                rnic_id: r.id,
                lists,
            });
        }
    }
    per_host
        .into_iter()
        .map(|(host_id, mut rnics)| {
            rnics.sort_by_key(|r| r.rnic_id);
            (host_id, Arc::new(versioned(host_id, p.timeout_ms, rnics)))
        })
        .collect()
}

/// A pinglist with its version: a hash of everything in it, so equal content keeps its ETag.
fn versioned(host_id: u32, timeout_ms: u64, rnics: Vec<RnicPinglist>) -> Pinglist {
    let mut list = Pinglist {
        host_id,
        version: String::new(),
        timeout_ms,
        rnics,
        probe_auth: None,
    };
    list.version = format!("{:016x}", stable_hash(&[&content_bytes(&list)]));
    list
}

/// Every field of a pinglist but its version and keys, fixed-width: what the version
/// hashes. A rebuild hashes every host's lists, and their JSON was most of its cost (a
/// quarter of the controller's CPU in a 1,000-agent registration storm).
fn content_bytes(l: &Pinglist) -> Vec<u8> {
    let targets: usize = l
        .rnics
        .iter()
        .flat_map(|r| &r.lists)
        .map(|p| p.entries.len())
        .sum();
    let mut b = Vec::with_capacity(16 + 16 * l.rnics.len() + 29 * targets);
    b.extend(l.host_id.to_le_bytes());
    b.extend(l.timeout_ms.to_le_bytes());
    for r in &l.rnics {
        b.extend(r.rnic_id.to_le_bytes());
        b.extend((r.lists.len() as u32).to_le_bytes());
        for p in &r.lists {
            b.push(p.class as u8);
            b.extend(p.pps.to_bits().to_le_bytes());
            b.extend((p.entries.len() as u32).to_le_bytes());
            for t in &p.entries {
                b.extend(t.rnic_id.to_le_bytes());
                match t.ip {
                    IpAddr::V4(ip) => {
                        b.push(4);
                        b.extend(ip.octets());
                    }
                    IpAddr::V6(ip) => {
                        b.push(6);
                        b.extend(ip.octets());
                    }
                }
                b.extend(t.port.to_le_bytes());
                b.extend(t.qpn.to_le_bytes());
                b.extend(t.src_port.to_le_bytes());
            }
        }
    }
    b
}

/// What pinglists are a function of: (registry generation, task book generation, rotation).
pub(crate) type CacheKey = (u64, u64, u64);

/// Pinglists of the last [`CacheKey`] asked for.
#[derive(Default)]
pub(crate) struct PinglistCache {
    built: Mutex<Option<Built>>,
}

struct Built {
    key: CacheKey,
    /// When their build began (the registry was read at this time or later).
    read_at: Instant,
    lists: HashMap<u32, Arc<Pinglist>>,
}

impl PinglistCache {
    /// The pinglist of `host_id` for a caller that arrived at `arrived`, rebuilding every
    /// host's lists with `build` (which reads the registry and returns the key it read)
    /// unless the cached ones are current (`key_now`) or were read after the caller
    /// arrived (at least as fresh as anything it could have asked for, and naming its
    /// host). One caller rebuilds, holding the registry only while it does; the others
    /// wait for it without holding the registry, so registrations wait for one build at
    /// most. In a registration storm the polls queued behind one rebuild share the next
    /// one instead of rebuilding once each.
    pub(crate) fn get(
        &self,
        arrived: Instant,
        host_id: u32,
        key_now: impl FnOnce() -> CacheKey,
        build: impl FnOnce() -> (CacheKey, HashMap<u32, Arc<Pinglist>>),
    ) -> Option<Arc<Pinglist>> {
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let fresh = built.as_ref().is_some_and(|b| {
            (b.read_at >= arrived && b.lists.contains_key(&host_id)) || b.key == key_now()
        });
        if !fresh {
            let read_at = Instant::now();
            let (key, lists) = build();
            *built = Some(Built {
                key,
                read_at,
                lists,
            });
        }
        built.as_ref().and_then(|b| b.lists.get(&host_id).cloned())
    }
}

#[cfg(test)]
mod tests;
