//! The fabric's nodes, links and address plan, computed from a [`FabricSpec`] without touching
//! the system (so it is unit-tested without root).
//!
//! Address plan (198.18.0.0/15, RFC 2544 benchmarking range only):
//! - RNIC link k of ToR t: 198.18.t.(2k)/31 on the ToR, 198.18.t.(2k+1)/31 on the host;
//!   198.18.t.0/24 is "ToR t's host prefix" that the spines route to ToR t.
//! - ToR t – spine s link (index i = t·spines + s): 198.19.0.0 + 2i on the ToR, + 2i + 1 on the
//!   spine, /31.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use rocemesh_proto::fabric_map::{LinkDef, LinkEnd, MapFile, SwitchDef};
use serde::{Deserialize, Serialize};

use crate::spec::FabricSpec;

/// Policy-routing table of RNIC i on a host is `RNIC_TABLE_BASE + i`.
pub const RNIC_TABLE_BASE: u32 = 100;

/// Role of a node in the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A server with RNICs.
    Host,
    /// A leaf router.
    Tor,
    /// A spine router.
    Spine,
}

/// One RNIC (a veth in the host namespace) and where it attaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rnic {
    /// Fabric-wide name, e.g. "h3r0"; also the ToR-side interface name.
    pub name: String,
    /// Interface name inside the host namespace, e.g. "r0".
    pub ifname: String,
    /// The RNIC's address (/31 to its ToR).
    pub ip: Ipv4Addr,
    /// Its ToR's address on the same /31: the RNIC's gateway.
    pub gateway: Ipv4Addr,
    /// Index of the ToR it attaches to.
    pub tor: u8,
    /// Rail (RNIC index within the host).
    pub rail: u8,
    /// Policy-routing table used for traffic sourced from this RNIC.
    pub table: u32,
    /// Name of its link, e.g. "h3r0-t0".
    pub link: String,
}

/// A host namespace and its RNICs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Short name, e.g. "h3".
    pub name: String,
    /// Network namespace, e.g. "rmtb-h3" (run agents with `ip netns exec`).
    pub netns: String,
    /// The host's RNICs, by rail.
    pub rnics: Vec<Rnic>,
    /// Its address on the management network (reaches servers in the root namespace).
    pub mgmt_ip: Ipv4Addr,
}

/// A ToR or spine router namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Router {
    /// Short name, e.g. "t0" or "s1".
    pub name: String,
    /// Network namespace, e.g. "rmtb-t0".
    pub netns: String,
    /// Tor or Spine.
    pub kind: NodeKind,
}

/// One end of a point-to-point link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Short node name ("h3", "t0", "s1").
    pub node: String,
    /// The node's namespace.
    pub netns: String,
    /// Interface name inside that namespace.
    pub ifname: String,
    /// Interface address (/31).
    pub ip: Ipv4Addr,
}

/// A veth pair; `a` is the lower tier (host for RNIC links, ToR for ToR–spine links).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// "h3r0-t0" or "t0-s1".
    pub name: String,
    /// Lower-tier end.
    pub a: Endpoint,
    /// Upper-tier end.
    pub b: Endpoint,
}

/// Everything the fabric consists of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// The spec it was computed from.
    pub spec: FabricSpec,
    /// Hosts in index order.
    pub hosts: Vec<Host>,
    /// ToRs in index order.
    pub tors: Vec<Router>,
    /// Spines in index order.
    pub spines: Vec<Router>,
    /// All links: RNIC links first, then ToR–spine links.
    pub links: Vec<Link>,
}

/// ToR t's host prefix (a /24).
pub fn tor_prefix(tor: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, tor, 0)
}

fn tor_spine_ips(index: usize) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::new(198, 19, 0, 0)) + 2 * index as u32;
    (Ipv4Addr::from(base), Ipv4Addr::from(base + 1))
}

impl Topology {
    /// Computes the topology of a spec (call [`FabricSpec::validate`] first).
    pub fn new(spec: &FabricSpec) -> Topology {
        let p = &spec.prefix;
        let router = |name: String, kind| Router {
            netns: format!("{p}-{name}"),
            name,
            kind,
        };
        let tors: Vec<Router> = (0..spec.tors)
            .map(|t| router(format!("t{t}"), NodeKind::Tor))
            .collect();
        let spines: Vec<Router> = (0..spec.spines)
            .map(|s| router(format!("s{s}"), NodeKind::Spine))
            .collect();
        let mut slots = vec![0u8; usize::from(spec.tors)];
        let mut hosts = Vec::with_capacity(spec.host_count());
        let mut links = Vec::new();
        for h in 0..spec.host_count() {
            let name = format!("h{h}");
            let netns = format!("{p}-{name}");
            let group = h / usize::from(spec.hosts_per_tor);
            let mut rnics = Vec::with_capacity(usize::from(spec.rnics_per_host));
            for rail in 0..spec.rnics_per_host {
                let tor = if spec.rail_optimized {
                    (group * usize::from(spec.rnics_per_host) + usize::from(rail)) as u8
                } else {
                    group as u8
                };
                let slot = &mut slots[usize::from(tor)];
                let gateway = Ipv4Addr::new(198, 18, tor, 2 * *slot);
                let ip = Ipv4Addr::new(198, 18, tor, 2 * *slot + 1);
                *slot += 1;
                let rnic_name = format!("{name}r{rail}");
                let link = format!("{rnic_name}-t{tor}");
                let ifname = format!("r{rail}");
                links.push(Link {
                    name: link.clone(),
                    a: Endpoint {
                        node: name.clone(),
                        netns: netns.clone(),
                        ifname: ifname.clone(),
                        ip,
                    },
                    b: Endpoint {
                        node: format!("t{tor}"),
                        netns: tors[usize::from(tor)].netns.clone(),
                        ifname: rnic_name.clone(),
                        ip: gateway,
                    },
                });
                rnics.push(Rnic {
                    name: rnic_name,
                    ifname,
                    ip,
                    gateway,
                    tor,
                    rail,
                    table: RNIC_TABLE_BASE + u32::from(rail),
                    link,
                });
            }
            hosts.push(Host {
                name,
                netns,
                rnics,
                mgmt_ip: crate::management::host_ip(&spec.prefix, h),
            });
        }
        for (t, tor) in tors.iter().enumerate() {
            for (s, spine) in spines.iter().enumerate() {
                let (tor_ip, spine_ip) = tor_spine_ips(t * spines.len() + s);
                links.push(Link {
                    name: format!("{}-{}", tor.name, spine.name),
                    a: Endpoint {
                        node: tor.name.clone(),
                        netns: tor.netns.clone(),
                        ifname: spine.name.clone(),
                        ip: tor_ip,
                    },
                    b: Endpoint {
                        node: spine.name.clone(),
                        netns: spine.netns.clone(),
                        ifname: tor.name.clone(),
                        ip: spine_ip,
                    },
                });
            }
        }
        Topology {
            spec: spec.clone(),
            hosts,
            tors,
            spines,
            links,
        }
    }

    /// All namespaces of the fabric (hosts, ToRs, spines).
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        let hosts = self.hosts.iter().map(|h| h.netns.as_str());
        hosts.chain(
            self.tors
                .iter()
                .chain(&self.spines)
                .map(|r| r.netns.as_str()),
        )
    }

    /// The link with this name ("t0-s1", "h3r0-t0").
    pub fn link(&self, name: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.name == name)
    }

    /// The RNIC with this name ("h3r0") and its host.
    pub fn rnic(&self, name: &str) -> Option<(&Host, &Rnic)> {
        self.hosts
            .iter()
            .find_map(|h| h.rnics.iter().find(|r| r.name == name).map(|r| (h, r)))
    }

    /// The RNIC owning this address and its host.
    pub fn rnic_by_ip(&self, ip: impl Into<IpAddr>) -> Option<(&Host, &Rnic)> {
        let ip = ip.into();
        self.hosts.iter().find_map(|h| {
            h.rnics
                .iter()
                .find(|r| IpAddr::V4(r.ip) == ip)
                .map(|r| (h, r))
        })
    }

    /// The router (ToR or spine) with this short name.
    pub fn router(&self, name: &str) -> Option<&Router> {
        self.tors
            .iter()
            .chain(&self.spines)
            .find(|r| r.name == name)
    }

    /// Links attached to a node (by short name).
    pub fn links_of<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Link> + 'a {
        self.links
            .iter()
            .filter(move |l| l.a.node == node || l.b.node == node)
    }

    /// The analyzer's fabric map of this fabric (switch interface addresses, switch-to-switch
    /// links), as an operator would write it from the fabric's IP plan.
    pub fn fabric_map(&self) -> MapFile {
        let is_switch = |node: &str| self.tors.iter().chain(&self.spines).any(|r| r.name == node);
        let is_spine = |node: &str| self.spines.iter().any(|s| s.name == node);
        let mut addresses: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for l in &self.links {
            for e in [&l.a, &l.b].into_iter().filter(|e| is_switch(&e.node)) {
                addresses
                    .entry(e.node.clone())
                    .or_default()
                    .push(IpAddr::V4(e.ip));
            }
        }
        let end = |e: &Endpoint| LinkEnd {
            device: e.node.clone(),
            ip: IpAddr::V4(e.ip),
        };
        MapFile {
            switch: addresses
                .into_iter()
                .map(|(name, addresses)| SwitchDef { name, addresses })
                .collect(),
            link: self
                .links
                .iter()
                .filter(|l| is_switch(&l.a.node) && is_spine(&l.b.node))
                .map(|l| LinkDef {
                    name: l.name.clone(),
                    ends: [end(&l.a), end(&l.b)],
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_fabric_plan() {
        let t = Topology::new(&FabricSpec::default());
        assert_eq!(t.hosts.len(), 4);
        assert_eq!(t.links.len(), 4 + 4);
        assert_eq!(t.namespaces().count(), 8);
        let (_, r) = t.rnic("h3r0").unwrap();
        assert_eq!(
            (r.tor, r.ip, r.gateway),
            (
                1,
                Ipv4Addr::new(198, 18, 1, 3),
                Ipv4Addr::new(198, 18, 1, 2)
            )
        );
        let l = t.link("t1-s0").unwrap();
        assert_eq!((l.a.ifname.as_str(), l.b.ifname.as_str()), ("s0", "t1"));
        assert_eq!(
            (l.a.ip, l.b.ip),
            (Ipv4Addr::new(198, 19, 0, 4), Ipv4Addr::new(198, 19, 0, 5))
        );
        assert_eq!(t.link("h3r0-t1").unwrap().b.ifname, "h3r0");
        assert_eq!(t.links_of("s1").count(), 2);
    }

    #[test]
    fn addresses_are_unique_and_in_benchmark_range() {
        let spec = FabricSpec {
            tors: 4,
            spines: 3,
            hosts_per_tor: 5,
            rnics_per_host: 2,
            ..FabricSpec::default()
        };
        let t = Topology::new(&spec);
        let mut ips: Vec<Ipv4Addr> = t.links.iter().flat_map(|l| [l.a.ip, l.b.ip]).collect();
        assert!(
            ips.iter()
                .all(|ip| ip.octets()[0] == 198 && (ip.octets()[1] & 0xfe) == 18)
        );
        let n = ips.len();
        ips.sort();
        ips.dedup();
        assert_eq!(ips.len(), n);
        // Non-rail: both RNICs of a host on the host's ToR.
        assert!(t.hosts[7].rnics.iter().all(|r| r.tor == 1));
    }

    #[test]
    fn rail_optimized_puts_rail_i_on_tor_i_of_pod() {
        let spec = FabricSpec {
            tors: 4,
            rnics_per_host: 2,
            rail_optimized: true,
            ..FabricSpec::default()
        };
        let t = Topology::new(&spec);
        let tors: Vec<Vec<u8>> = t
            .hosts
            .iter()
            .map(|h| h.rnics.iter().map(|r| r.tor).collect())
            .collect();
        assert_eq!(tors, vec![vec![0, 1], vec![0, 1], vec![2, 3], vec![2, 3]]);
        assert_eq!(t.hosts[1].rnics[1].link, "h1r1-t1");
    }
}
