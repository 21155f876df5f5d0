//! What the probes can see of a fabric, for the ground truth: components no probe
//! crosses (every RNIC beyond them is on a host that is down), and components no probe
//! can tell apart, those that lie on exactly the same routes between live RNICs. A
//! loss or delay on one of them affects exactly the packets one on another would (a
//! 2-ToR fabric's spine and both its links; one direction of a link there and the
//! opposite direction of its twin; a ToR and its only RNIC), so no diagnosis can single
//! out one of them and the scorer accepts any of them that lists the truth beside it.
//!
//! A component's routes are fingerprinted, not listed: each route between two ToRs (one
//! per ECMP choice) and each ToR's own traffic between its RNICs gets a random 64-bit
//! word, and a component's fingerprint is the XOR of the words of the routes crossing it
//! with their count. Equal sets give equal fingerprints; unequal ones collide with
//! probability 2^-64.

use crate::rng::{hash, mix};
use crate::topology::{Fabric, Route};
use rocemesh_proto::api::{Component, ComponentKind};

/// Routes fingerprinted at most: past this (a fat-tree beyond k = 16, a leaf-spine beyond
/// about 250 ToRs of 32 spines) the fabric is too large to enumerate, and no twins are named
/// (the scorer is then only stricter) and every fault counts as observed.
const MAX_ROUTES: usize = 2_000_000;

/// A component of the fabric, as a fault targets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A switch.
    Switch(u32),
    /// A link, both directions.
    Link(u32),
    /// A link, the packets crossing it into switch `toward` only.
    Direction {
        /// The link.
        link: u32,
        /// The switch the packets head to.
        toward: u32,
    },
    /// An RNIC.
    Rnic(u32),
}

/// The routes crossing one component: XOR of their words and how many.
type Print = (u64, u32);

fn add(p: &mut Print, word: u64) {
    p.0 ^= word;
    p.1 += 1;
}

/// Fingerprints of every switch, and of every link per direction (index 0: into the
/// link's lower switch, 1: into its upper one), over the routes between live RNICs.
struct Prints {
    switches: Vec<Print>,
    directions: Vec<[Print; 2]>,
    /// Live RNICs per switch (non-zero for ToRs with one).
    rnics: Vec<u32>,
}

impl Prints {
    fn new(fabric: &Fabric, live: &[bool]) -> Option<Self> {
        let mut rnics = vec![0u32; fabric.switches.len()];
        for (rnic, _) in fabric.rnics.iter().zip(live).filter(|(_, l)| **l) {
            rnics[rnic.tor as usize] += 1;
        }
        let tors: Vec<u32> = (0..rnics.len() as u32)
            .filter(|&t| rnics[t as usize] > 0)
            .collect();
        // At most this many routes (fewer within a fat-tree's pod): give up before
        // enumerating any of them.
        let bound = tors.len() * tors.len() * fabric.shape().parallel_paths() as usize;
        if bound > MAX_ROUTES {
            return None;
        }
        let mut p = Prints {
            switches: vec![(0, 0); fabric.switches.len()],
            directions: vec![[(0, 0); 2]; fabric.links.len()],
            rnics,
        };
        for &src in &tors {
            if p.rnics[src as usize] >= 2 {
                add(
                    &mut p.switches[src as usize],
                    hash(&[u64::from(src), u64::from(src)]),
                );
            }
            for &dst in tors.iter().filter(|&&d| d != src) {
                for (i, route) in every_route(fabric, src, dst).iter().enumerate() {
                    let word = hash(&[u64::from(src), u64::from(dst), mix(i as u64)]);
                    for &s in route.switches() {
                        add(&mut p.switches[s as usize], word);
                    }
                    for (k, &l) in route.links().iter().enumerate() {
                        let into = route.switches()[k + 1];
                        let upward = usize::from(fabric.links[l as usize].upper == into);
                        add(&mut p.directions[l as usize][upward], word);
                    }
                }
            }
        }
        Some(p)
    }

    fn of(&self, fabric: &Fabric, live: &[bool], part: Part) -> Option<Print> {
        Some(match part {
            Part::Switch(s) => self.switches[s as usize],
            Part::Link(l) => {
                let [a, b] = self.directions[l as usize];
                (a.0 ^ b.0, a.1 + b.1)
            }
            Part::Direction { link, toward } => {
                let upward = usize::from(fabric.links[link as usize].upper == toward);
                self.directions[link as usize][upward]
            }
            // An RNIC is crossed by its ToR's routes only when it is the ToR's only live
            // one; a dead one by none.
            Part::Rnic(r) if !live[r as usize] => (0, 0),
            Part::Rnic(r) => {
                let tor = fabric.rnics[r as usize].tor;
                (self.rnics[tor as usize] == 1).then(|| self.switches[tor as usize])?
            }
        })
    }
}

/// What the probes between the RNICs of live hosts can see of a fabric's components.
pub struct Twins<'a> {
    fabric: &'a Fabric,
    /// Whether each RNIC's host is up.
    live: Vec<bool>,
    /// `None`: too many routes to enumerate.
    prints: Option<Prints>,
}

impl<'a> Twins<'a> {
    /// Fingerprints the routes between the RNICs of the hosts not in `down`.
    pub fn new(fabric: &'a Fabric, down: &[u32]) -> Self {
        let live: Vec<bool> = fabric
            .rnics
            .iter()
            .map(|r| !down.contains(&r.host))
            .collect();
        Self {
            fabric,
            prints: Prints::new(fabric, &live),
            live,
        }
    }

    /// False when no route between live RNICs crosses `part` (an RNIC: when it is
    /// dead): nothing can observe a fault of it. True when the fabric is too large to
    /// tell.
    pub fn observed(&self, part: Part) -> bool {
        self.prints
            .as_ref()
            .is_none_or(|p| p.of(self.fabric, &self.live, part).is_none_or(|x| x.1 > 0))
    }

    /// Whether RNIC `r`'s host is up.
    pub fn live(&self, r: u32) -> bool {
        self.live[r as usize]
    }

    /// The components other than `part` (links named once, whatever direction matched)
    /// that lie on exactly the routes `part` lies on; empty when the fabric is too large
    /// to enumerate or nothing crosses `part`.
    pub fn of(&self, part: Part) -> Vec<Component> {
        let fabric = self.fabric;
        let Some(prints) = &self.prints else {
            return Vec::new();
        };
        let print = |p| prints.of(fabric, &self.live, p);
        let Some(want) = print(part).filter(|p| p.1 > 0) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut push = |other: Part, kind: ComponentKind, name: &str| {
            let c = Component::new(kind, name);
            if other != part && print(other) == Some(want) && !out.contains(&c) {
                out.push(c);
            }
        };
        for (s, sw) in fabric.switches.iter().enumerate() {
            push(Part::Switch(s as u32), ComponentKind::Switch, &sw.name);
        }
        for (l, link) in fabric.links.iter().enumerate() {
            let l = l as u32;
            let own = |p: Part| match (p, part) {
                (Part::Link(a) | Part::Direction { link: a, .. }, Part::Link(b))
                | (
                    Part::Link(a) | Part::Direction { link: a, .. },
                    Part::Direction { link: b, .. },
                ) => a == b,
                _ => false,
            };
            for p in [
                Part::Link(l),
                Part::Direction {
                    link: l,
                    toward: link.lower,
                },
                Part::Direction {
                    link: l,
                    toward: link.upper,
                },
            ] {
                if !own(p) {
                    push(p, ComponentKind::Link, &link.name);
                }
            }
        }
        for r in 0..fabric.rnics.len() as u32 {
            push(Part::Rnic(r), ComponentKind::Rnic, &fabric.rnic_name(r));
        }
        out
    }
}

/// Every route from ToR `src` to ToR `dst`, one per combination of ECMP choices.
fn every_route(fabric: &Fabric, src: u32, dst: u32) -> Vec<Route> {
    let mut out = Vec::new();
    // The choice at each equal-cost step, and how many candidates that step had.
    let mut digits: Vec<u32> = Vec::new();
    loop {
        let mut radices = Vec::new();
        let route = fabric.route(src, dst, |_, _, n| {
            let d = digits.get(radices.len()).copied().unwrap_or(0);
            radices.push(n);
            d
        });
        out.push(route);
        digits.resize(radices.len(), 0);
        // The next combination: the last step that has a choice left moves on, and
        // the steps after it start over (their candidates may differ).
        loop {
            let Some(k) = digits.len().checked_sub(1) else {
                return out;
            };
            digits[k] += 1;
            if digits[k] < radices[k] {
                break;
            }
            digits.pop();
            radices.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    fn leaf_spine(tors: u32, hosts_per_tor: u32, rnics_per_host: u32) -> Fabric {
        Fabric::new(Shape::LeafSpine {
            tors,
            spines: 3,
            hosts_per_tor,
            rnics_per_host,
        })
        .unwrap()
    }

    fn names(v: &[Component]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(Component::label).collect();
        v.sort();
        v
    }

    fn link(f: &Fabric, name: &str) -> u32 {
        f.links.iter().position(|l| l.name == name).unwrap() as u32
    }

    fn switch(f: &Fabric, name: &str) -> u32 {
        f.switches.iter().position(|s| s.name == name).unwrap() as u32
    }

    #[test]
    fn a_two_tor_fabric_cannot_tell_a_spine_from_its_links() {
        let f = leaf_spine(2, 2, 1);
        let l = link(&f, "t0-s1");
        assert_eq!(
            names(&Twins::new(&f, &[]).of(Part::Link(l))),
            ["link:t1-s1", "switch:s1"]
        );
        assert_eq!(
            names(&Twins::new(&f, &[]).of(Part::Switch(switch(&f, "s2")))),
            ["link:t0-s2", "link:t1-s2"]
        );
        // Into s1 from t0 is the t0 -> t1 route over s1, as is s1 into t1.
        let up = Part::Direction {
            link: l,
            toward: switch(&f, "s1"),
        };
        assert_eq!(names(&Twins::new(&f, &[]).of(up)), ["link:t1-s1"]);
    }

    #[test]
    fn more_tors_or_rnics_tell_every_component_apart() {
        let f = leaf_spine(3, 2, 1);
        for l in 0..f.links.len() as u32 {
            assert!(Twins::new(&f, &[]).of(Part::Link(l)).is_empty());
        }
        for s in 0..f.switches.len() as u32 {
            assert!(Twins::new(&f, &[]).of(Part::Switch(s)).is_empty());
        }
        for r in 0..f.rnics.len() as u32 {
            assert!(Twins::new(&f, &[]).of(Part::Rnic(r)).is_empty());
        }
    }

    #[test]
    fn a_tor_with_one_rnic_is_that_rnic() {
        let f = leaf_spine(3, 1, 1);
        assert_eq!(
            names(&Twins::new(&f, &[]).of(Part::Switch(switch(&f, "t2")))),
            ["rnic:h2/r0"]
        );
        assert_eq!(names(&Twins::new(&f, &[]).of(Part::Rnic(0))), ["switch:t0"]);
        // Two RNICs under it: their own traffic crosses the ToR alone.
        let f = leaf_spine(3, 1, 2);
        assert!(
            Twins::new(&f, &[])
                .of(Part::Switch(switch(&f, "t2")))
                .is_empty()
        );
    }

    #[test]
    fn a_host_down_hides_what_only_its_probes_cross_and_makes_new_twins() {
        // One host (one RNIC) per ToR, h0 under t0 down.
        let f = leaf_spine(3, 1, 1);
        let all = Twins::new(&f, &[]);
        let t = Twins::new(&f, &[0]);
        let t0_s1 = Part::Link(link(&f, "t0-s1"));
        assert!(all.observed(t0_s1) && !t.observed(t0_s1));
        assert!(!t.observed(Part::Switch(switch(&f, "t0"))));
        assert!(!t.observed(Part::Rnic(0)) && t.observed(Part::Rnic(1)));
        assert!(!t.live(0) && t.live(2));
        // Only t1 <-> t2 is probed: over s1 it crosses s1 and both links.
        let t1_s1 = Part::Link(link(&f, "t1-s1"));
        assert!(all.of(t1_s1).is_empty());
        assert_eq!(names(&t.of(t1_s1)), ["link:t2-s1", "switch:s1"]);
    }

    #[test]
    fn a_fabric_too_large_to_enumerate_names_no_twins_and_hides_nothing() {
        let f = Fabric::new(Shape::FatTree {
            k: 20,
            rnics_per_host: 1,
        })
        .unwrap();
        // Every host of the first edge switch down: enumerated, it would be unobserved.
        let edge = f.rnics[0].tor;
        let down: Vec<u32> = (0..f.hosts.len() as u32)
            .filter(|&h| f.rnics[f.hosts[h as usize].first_rnic as usize].tor == edge)
            .collect();
        assert_eq!(down.len(), 10);
        let t = Twins::new(&f, &down);
        assert!(t.observed(Part::Switch(edge)));
        assert!(t.of(Part::Switch(edge)).is_empty());
    }

    #[test]
    fn every_route_covers_each_ecmp_choice_once() {
        let f = Fabric::new(Shape::FatTree {
            k: 4,
            rnics_per_host: 1,
        })
        .unwrap();
        let (src, dst) = (f.rnics[0].tor, f.rnics[f.rnics.len() - 1].tor);
        let routes = every_route(&f, src, dst);
        assert_eq!(routes.len(), f.shape().parallel_paths() as usize);
        for (i, a) in routes.iter().enumerate() {
            assert!(routes[i + 1..].iter().all(|b| b != a), "distinct routes");
        }
    }
}
