//! Fabrics built from a [`Shape`]: switches, switch-to-switch links, hosts and their
//! RNICs, with every id and address computed arithmetically so a 50,000-RNIC fabric
//! builds in well under a second and holds nothing per RNIC pair. Routes are computed on
//! demand ([`Fabric::route`]), one ECMP decision per switch ([`crate::ecmp`]).
//!
//! Names follow the lab's fabric map conventions: ToRs `t<i>` and spines `s<j>`
//! (leaf-spine), links `<lower>-<upper>` (e.g. `t0-s1`), hosts `h<n>`, RNICs `r<i>` on
//! their host (component `h<n>/r<i>`). Fat-trees name edge, aggregation and core
//! switches `p<pod>e<i>`, `p<pod>a<j>` and `c<m>`; rail-optimized fabrics name the rail
//! ToR `i` of group `g` `g<g>t<i>`.
//!
//! Addresses: RNIC `j` is 10.0.0.0 + 2j + 1 behind its ToR port 10.0.0.0 + 2j; link `l`
//! is 100.64.0.0 + 2l on its lower switch and + 1 on its upper switch.

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// Most RNICs a fabric may have (the address plan holds 4 M; the analyzer's dense
/// registry far fewer).
pub const MAX_RNICS: u64 = 1_000_000;
/// Most RNICs per host (the controller's limit).
pub const MAX_RNICS_PER_HOST: u32 = rocemesh_proto::api::MAX_RNICS_PER_HOST as u32;
/// Most switches on a route (ToR, aggregation, core, aggregation, ToR).
pub const MAX_ROUTE_SWITCHES: usize = 5;

const RNIC_BASE: u32 = u32::from_be_bytes([10, 0, 0, 0]);
const LINK_BASE: u32 = u32::from_be_bytes([100, 64, 0, 0]);

/// The kind and size of a fabric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "topology", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Shape {
    /// Two-tier Clos: every ToR linked to every spine.
    LeafSpine {
        /// ToR switches.
        tors: u32,
        /// Spine switches (the parallel paths between two ToRs).
        spines: u32,
        /// Hosts under each ToR.
        hosts_per_tor: u32,
        /// RNICs per host, all under the host's ToR.
        rnics_per_host: u32,
    },
    /// k-ary three-tier fat-tree: k pods of k/2 edge (ToR) and k/2 aggregation switches,
    /// (k/2)² cores, k/2 hosts per edge switch.
    FatTree {
        /// Arity (even).
        k: u32,
        /// RNICs per host, all under the host's edge switch.
        rnics_per_host: u32,
    },
    /// Rail-optimized: RNIC i of every host of a group sits on rail ToR i of the group;
    /// every rail ToR is linked to every spine.
    Rail {
        /// Host groups.
        groups: u32,
        /// Hosts per group.
        hosts_per_group: u32,
        /// Rails = RNICs per host.
        rails: u32,
        /// Spine switches.
        spines: u32,
    },
}

impl Shape {
    fn check(&self) -> anyhow::Result<()> {
        let (rnics, per_host) = match *self {
            Shape::LeafSpine {
                tors,
                spines,
                hosts_per_tor,
                rnics_per_host,
            } => {
                ensure!(
                    tors >= 1 && spines >= 1 && hosts_per_tor >= 1,
                    "leaf-spine needs at least one ToR, spine and host per ToR"
                );
                (
                    u64::from(tors) * u64::from(hosts_per_tor) * u64::from(rnics_per_host),
                    rnics_per_host,
                )
            }
            Shape::FatTree { k, rnics_per_host } => {
                ensure!(
                    (2..=128).contains(&k) && k % 2 == 0,
                    "fat-tree arity k must be even and 2..=128, got {k}"
                );
                let h = u64::from(k / 2);
                (
                    u64::from(k) * h * h * u64::from(rnics_per_host),
                    rnics_per_host,
                )
            }
            Shape::Rail {
                groups,
                hosts_per_group,
                rails,
                spines,
            } => {
                ensure!(
                    groups >= 1 && hosts_per_group >= 1 && spines >= 1,
                    "rail needs at least one group, host per group and spine"
                );
                (
                    u64::from(groups) * u64::from(hosts_per_group) * u64::from(rails),
                    rails,
                )
            }
        };
        ensure!(
            (1..=MAX_RNICS_PER_HOST).contains(&per_host),
            "RNICs per host must be 1..={MAX_RNICS_PER_HOST}, got {per_host}"
        );
        ensure!(
            rnics <= MAX_RNICS,
            "{rnics} RNICs exceed the simulator's limit of {MAX_RNICS}"
        );
        Ok(())
    }

    /// Equal-cost paths between two ToRs in different pods (N of R-Pingmesh Eq. 1).
    pub fn parallel_paths(&self) -> u32 {
        match *self {
            Shape::LeafSpine { spines, .. } | Shape::Rail { spines, .. } => spines,
            Shape::FatTree { k, .. } => (k / 2) * (k / 2),
        }
    }
}

/// Tier of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Top of rack (edge): RNICs hang off it.
    Tor,
    /// Aggregation (fat-tree only).
    Agg,
    /// Spine or core.
    Spine,
}

/// A switch.
#[derive(Debug, Clone)]
pub struct Switch {
    /// Name, as the fabric map and problems name it.
    pub name: String,
    /// Tier.
    pub tier: Tier,
}

/// A switch-to-switch link.
#[derive(Debug, Clone)]
pub struct Link {
    /// Name `<lower>-<upper>`.
    pub name: String,
    /// Lower-tier switch id.
    pub lower: u32,
    /// Upper-tier switch id.
    pub upper: u32,
}

/// An RNIC.
#[derive(Debug, Clone, Copy)]
pub struct Rnic {
    /// Host id (index into [`Fabric::hosts`]).
    pub host: u32,
    /// Index on its host (interface `r<index>`).
    pub index: u32,
    /// Its ToR's switch id.
    pub tor: u32,
}

/// A host and its RNICs (consecutive RNIC ids).
#[derive(Debug, Clone)]
pub struct Host {
    /// Name `h<n>`.
    pub name: String,
    /// Its first RNIC id.
    pub first_rnic: u32,
    /// How many RNICs it has.
    pub rnics: u32,
}

/// One step of a route: where a switch may forward a packet for a destination ToR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// One link.
    Single(u32),
    /// Equal-cost choice among the links `first..first + count` (ECMP).
    Choice {
        /// First link id.
        first: u32,
        /// Number of candidates.
        count: u32,
    },
}

/// A route between two ToRs: the switches in order and the links between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    switches: [u32; MAX_ROUTE_SWITCHES],
    links: [u32; MAX_ROUTE_SWITCHES - 1],
    len: u8,
}

impl Route {
    /// Switch ids, source ToR first.
    pub fn switches(&self) -> &[u32] {
        &self.switches[..usize::from(self.len)]
    }

    /// Link ids between consecutive switches.
    pub fn links(&self) -> &[u32] {
        &self.links[..usize::from(self.len.saturating_sub(1))]
    }
}

/// A built fabric.
#[derive(Debug)]
pub struct Fabric {
    shape: Shape,
    /// Switches by id.
    pub switches: Vec<Switch>,
    /// Links by id.
    pub links: Vec<Link>,
    /// RNICs by id.
    pub rnics: Vec<Rnic>,
    /// Hosts by id.
    pub hosts: Vec<Host>,
    switch_by_name: HashMap<String, u32>,
    link_by_name: HashMap<String, u32>,
    host_by_name: HashMap<String, u32>,
}

impl Fabric {
    /// Builds the fabric of `shape`; refuses sizes beyond the limits.
    pub fn new(shape: Shape) -> anyhow::Result<Self> {
        shape.check()?;
        let mut f = Fabric {
            shape: shape.clone(),
            switches: Vec::new(),
            links: Vec::new(),
            rnics: Vec::new(),
            hosts: Vec::new(),
            switch_by_name: HashMap::new(),
            link_by_name: HashMap::new(),
            host_by_name: HashMap::new(),
        };
        match shape {
            Shape::LeafSpine {
                tors,
                spines,
                hosts_per_tor,
                rnics_per_host,
            } => {
                f.two_tier(tors, spines, |t| format!("t{t}"));
                for t in 0..tors {
                    for _ in 0..hosts_per_tor {
                        f.add_host(rnics_per_host, |_| t);
                    }
                }
            }
            Shape::Rail {
                groups,
                hosts_per_group,
                rails,
                spines,
            } => {
                f.two_tier(groups * rails, spines, |t| {
                    format!("g{}t{}", t / rails, t % rails)
                });
                for g in 0..groups {
                    for _ in 0..hosts_per_group {
                        f.add_host(rails, |i| g * rails + i);
                    }
                }
            }
            Shape::FatTree { k, rnics_per_host } => {
                let h = k / 2;
                for p in 0..k {
                    for e in 0..h {
                        f.add_switch(format!("p{p}e{e}"), Tier::Tor);
                    }
                }
                for p in 0..k {
                    for a in 0..h {
                        f.add_switch(format!("p{p}a{a}"), Tier::Agg);
                    }
                }
                for c in 0..h * h {
                    f.add_switch(format!("c{c}"), Tier::Spine);
                }
                for edge in 0..k * h {
                    let pod = edge / h;
                    for a in 0..h {
                        f.add_link(edge, k * h + pod * h + a);
                    }
                }
                for agg in 0..k * h {
                    let a = agg % h;
                    for j in 0..h {
                        f.add_link(k * h + agg, 2 * k * h + a * h + j);
                    }
                }
                for edge in 0..k * h {
                    for _ in 0..h {
                        f.add_host(rnics_per_host, |_| edge);
                    }
                }
            }
        }
        Ok(f)
    }

    /// ToRs `0..tors` (named by `tor_name`) each linked to spines `tors..tors + spines`.
    fn two_tier(&mut self, tors: u32, spines: u32, tor_name: impl Fn(u32) -> String) {
        for t in 0..tors {
            self.add_switch(tor_name(t), Tier::Tor);
        }
        for s in 0..spines {
            self.add_switch(format!("s{s}"), Tier::Spine);
        }
        for t in 0..tors {
            for s in 0..spines {
                self.add_link(t, tors + s);
            }
        }
    }

    fn add_switch(&mut self, name: String, tier: Tier) {
        self.switch_by_name
            .insert(name.clone(), self.switches.len() as u32);
        self.switches.push(Switch { name, tier });
    }

    fn add_link(&mut self, lower: u32, upper: u32) {
        let name = format!(
            "{}-{}",
            self.switches[lower as usize].name, self.switches[upper as usize].name
        );
        self.link_by_name
            .insert(name.clone(), self.links.len() as u32);
        self.links.push(Link { name, lower, upper });
    }

    fn add_host(&mut self, rnics: u32, tor_of: impl Fn(u32) -> u32) {
        let host = self.hosts.len() as u32;
        let name = format!("h{host}");
        self.host_by_name.insert(name.clone(), host);
        self.hosts.push(Host {
            name,
            first_rnic: self.rnics.len() as u32,
            rnics,
        });
        for index in 0..rnics {
            self.rnics.push(Rnic {
                host,
                index,
                tor: tor_of(index),
            });
        }
    }

    /// The shape it was built from.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Address of RNIC `r`.
    pub fn rnic_ip(&self, r: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(RNIC_BASE + 2 * r + 1))
    }

    /// Address of the ToR port RNIC `r` plugs into (what its ToR answers traceroute from).
    pub fn tor_port_ip(&self, r: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(RNIC_BASE + 2 * r))
    }

    /// Address of link `l` on switch `sw` (one of its ends).
    pub fn link_ip(&self, l: u32, sw: u32) -> IpAddr {
        let upper = u32::from(self.links[l as usize].upper == sw);
        IpAddr::V4(Ipv4Addr::from(LINK_BASE + 2 * l + upper))
    }

    /// `"<host>/r<index>"`: the analyzer's component name of RNIC `r`.
    pub fn rnic_name(&self, r: u32) -> String {
        let n = &self.rnics[r as usize];
        format!("{}/r{}", self.hosts[n.host as usize].name, n.index)
    }

    /// The RNIC named `"<host>/r<index>"`.
    pub fn rnic_by_name(&self, name: &str) -> anyhow::Result<u32> {
        let (host, ifname) = name
            .split_once('/')
            .with_context(|| format!("RNIC {name:?} is not \"<host>/r<index>\""))?;
        let h = &self.hosts[self.host_by_name(host)? as usize];
        let index: u32 = ifname
            .strip_prefix('r')
            .and_then(|i| i.parse().ok())
            .with_context(|| format!("RNIC {name:?}: interface is not r<index>"))?;
        ensure!(
            index < h.rnics,
            "RNIC {name:?}: {host} has {} RNICs",
            h.rnics
        );
        Ok(h.first_rnic + index)
    }

    /// The host of this name.
    pub fn host_by_name(&self, name: &str) -> anyhow::Result<u32> {
        match self.host_by_name.get(name) {
            Some(&h) => Ok(h),
            None => bail!("no host {name:?} in this fabric"),
        }
    }

    /// The link of this name.
    pub fn link_by_name(&self, name: &str) -> anyhow::Result<u32> {
        match self.link_by_name.get(name) {
            Some(&l) => Ok(l),
            None => bail!("no link {name:?} in this fabric"),
        }
    }

    /// The switch of this name.
    pub fn switch_by_name(&self, name: &str) -> anyhow::Result<u32> {
        match self.switch_by_name.get(name) {
            Some(&s) => Ok(s),
            None => bail!("no switch {name:?} in this fabric"),
        }
    }

    /// Where switch `at` forwards towards ToR `dst` (`None` at `dst` itself).
    pub fn step(&self, at: u32, dst: u32) -> Option<Step> {
        if at == dst {
            return None;
        }
        Some(match self.shape {
            Shape::LeafSpine { tors, spines, .. } => two_tier_step(at, dst, tors, spines),
            Shape::Rail {
                groups,
                rails,
                spines,
                ..
            } => two_tier_step(at, dst, groups * rails, spines),
            Shape::FatTree { k, .. } => {
                let h = k / 2;
                let edges = k * h;
                let core_links = k * h * h;
                if at < edges {
                    Step::Choice {
                        first: at * h,
                        count: h,
                    }
                } else if at < 2 * edges {
                    let agg = at - edges;
                    let (pod, a) = (agg / h, agg % h);
                    if dst / h == pod {
                        Step::Single(dst * h + a)
                    } else {
                        Step::Choice {
                            first: core_links + agg * h,
                            count: h,
                        }
                    }
                } else {
                    let c = at - 2 * edges;
                    let (a, j) = (c / h, c % h);
                    Step::Single(core_links + ((dst / h) * h + a) * h + j)
                }
            }
        })
    }

    /// The other end of link `l` from switch `sw`.
    pub fn across(&self, l: u32, sw: u32) -> u32 {
        let link = &self.links[l as usize];
        if link.lower == sw {
            link.upper
        } else {
            link.lower
        }
    }

    /// The route from ToR `src` to ToR `dst`, `pick(switch, first link, candidates)`
    /// choosing the index of each equal-cost step among links `first..first + candidates`.
    pub fn route(&self, src: u32, dst: u32, mut pick: impl FnMut(u32, u32, u32) -> u32) -> Route {
        let mut r = Route {
            switches: [0; MAX_ROUTE_SWITCHES],
            links: [0; MAX_ROUTE_SWITCHES - 1],
            len: 1,
        };
        r.switches[0] = src;
        let mut at = src;
        while let Some(step) = self.step(at, dst) {
            let link = match step {
                Step::Single(l) => l,
                Step::Choice { first, count } => first + pick(at, first, count).min(count - 1),
            };
            let i = usize::from(r.len);
            if i >= MAX_ROUTE_SWITCHES {
                break; // unreachable with the shapes above; never loop
            }
            at = self.across(link, at);
            r.links[i - 1] = link;
            r.switches[i] = at;
            r.len += 1;
        }
        r
    }
}

fn two_tier_step(at: u32, dst: u32, tors: u32, spines: u32) -> Step {
    if at < tors {
        Step::Choice {
            first: at * spines,
            count: spines,
        }
    } else {
        Step::Single(dst * spines + (at - tors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_48_has_27648_hosts_and_valid_routes() {
        let f = Fabric::new(Shape::FatTree {
            k: 48,
            rnics_per_host: 2,
        })
        .unwrap();
        assert_eq!(f.hosts.len(), 27_648);
        assert_eq!(f.rnics.len(), 55_296);
        assert_eq!(f.switches.len(), 48 * 24 * 2 + 24 * 24);
        // Inter-pod: edge, agg, core, agg, edge, each link joining its neighbours.
        let (src, dst) = (f.rnics[0].tor, f.rnics[55_295].tor);
        let r = f.route(src, dst, |_, _, n| n - 1);
        assert_eq!(r.switches().len(), 5);
        for (i, &l) in r.links().iter().enumerate() {
            let link = &f.links[l as usize];
            let ends = [r.switches()[i], r.switches()[i + 1]];
            assert!(ends.contains(&link.lower) && ends.contains(&link.upper));
        }
        assert_eq!(f.switches[r.switches()[2] as usize].tier, Tier::Spine);
        // Intra-pod: edge, agg, edge.
        let r = f.route(0, 1, |_, _, _| 0);
        assert_eq!(
            r.switches()
                .iter()
                .map(|&s| f.switches[s as usize].name.as_str())
                .collect::<Vec<_>>(),
            ["p0e0", "p0a0", "p0e1"]
        );
        assert_eq!(f.route(3, 3, |_, _, _| 0).switches(), [3]);
    }

    #[test]
    fn names_resolve_and_rail_rnics_sit_on_their_rails() {
        let f = Fabric::new(Shape::Rail {
            groups: 2,
            hosts_per_group: 4,
            rails: 8,
            spines: 4,
        })
        .unwrap();
        let r = f.rnic_by_name("h5/r3").unwrap();
        assert_eq!(f.rnic_name(r), "h5/r3");
        assert_eq!(f.switches[f.rnics[r as usize].tor as usize].name, "g1t3");
        assert_eq!(
            f.links[f.link_by_name("g1t3-s2").unwrap() as usize].upper,
            16 + 2
        );
        assert!(f.rnic_by_name("h5/r8").is_err() && f.link_by_name("t0-s9").is_err());
        assert!(
            Fabric::new(Shape::FatTree {
                k: 5,
                rnics_per_host: 1
            })
            .is_err()
        );
        let l = f.link_by_name("g0t0-s1").unwrap();
        assert_ne!(f.link_ip(l, 0), f.link_ip(l, 17));
    }
}
