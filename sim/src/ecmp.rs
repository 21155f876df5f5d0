//! ECMP as switches do it: an L4 hash of the 5-tuple with a per-switch seed picks one of
//! the equal-cost next hops, so a 5-tuple always takes the same path while different
//! source ports spread over all of them (and one switch's choice says nothing about the
//! next one's).

use crate::rng::{hash, mix};
use crate::topology::{Fabric, Route};
use rocemesh_proto::flow::FiveTuple;
use std::net::IpAddr;

/// IP protocol number of UDP (RoCEv2 and the probes).
const UDP: u64 = 17;

/// The L4 hash a switch seeds: the 5-tuple and the protocol.
fn l4_hash(t: &FiveTuple) -> u64 {
    let ip = |a: IpAddr| match a {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    hash(&[
        ip(t.src),
        ip(t.dst),
        u64::from(t.sport),
        u64::from(t.dport),
        UDP,
    ])
}

/// The hash functions of a fabric's switches (one seed per switch, from the run's seed).
#[derive(Debug, Clone, Copy)]
pub struct Ecmp {
    seed: u64,
}

impl Ecmp {
    /// Seeds every switch from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }

    /// Which of `count` equal-cost next hops switch `switch` gives a tuple whose L4 hash
    /// is `h`.
    pub fn pick(&self, switch: u32, h: u64, count: u32) -> u32 {
        let switch_seed = mix(self.seed ^ mix(u64::from(switch)));
        (mix(h ^ switch_seed) % u64::from(count.max(1))) as u32
    }

    /// The route of `tuple` from ToR `src_tor` to ToR `dst_tor`.
    pub fn route(&self, fabric: &Fabric, src_tor: u32, dst_tor: u32, tuple: &FiveTuple) -> Route {
        self.route_avoiding(fabric, src_tor, dst_tor, tuple, |_, _| false)
    }

    /// [`Self::route`] where a switch leaves out of its equal-cost group the links
    /// `withdrawn(switch, link)` names (a port it saw go down), as long as another
    /// candidate is left; with none withdrawn the route is [`Self::route`]'s.
    pub fn route_avoiding(
        &self,
        fabric: &Fabric,
        src_tor: u32,
        dst_tor: u32,
        tuple: &FiveTuple,
        withdrawn: impl Fn(u32, u32) -> bool,
    ) -> Route {
        let h = l4_hash(tuple);
        fabric.route(src_tor, dst_tor, |sw, first, n| {
            let up = |i: &u32| !withdrawn(sw, first + i);
            let alive = (0..n).filter(up).count() as u32;
            if alive == n || alive == 0 {
                return self.pick(sw, h, n);
            }
            let k = self.pick(sw, h, alive) as usize;
            (0..n).filter(up).nth(k).unwrap_or(0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Shape;

    fn tuple(f: &Fabric, sport: u16) -> FiveTuple {
        FiveTuple {
            src: f.rnic_ip(0),
            dst: f.rnic_ip(f.rnics.len() as u32 - 1),
            sport,
            dport: 4791,
        }
    }

    #[test]
    fn a_tuple_keeps_its_path_and_source_ports_spread_over_all_paths() {
        let f = Fabric::new(Shape::FatTree {
            k: 8,
            rnics_per_host: 1,
        })
        .unwrap();
        let ecmp = Ecmp::new(42);
        let (src, dst) = (f.rnics[0].tor, f.rnics[f.rnics.len() - 1].tor);
        let t = tuple(&f, 50_000);
        let first = ecmp.route(&f, src, dst, &t);
        for _ in 0..10 {
            assert_eq!(ecmp.route(&f, src, dst, &t), first, "stable per 5-tuple");
        }
        // 16 core paths between two pods; 16,000 source ports should hit each ~1,000 times.
        let paths = f.shape().parallel_paths() as usize;
        assert_eq!(paths, 16);
        let mut count: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        let n = 16_000u64;
        for sport in 0..n as u16 {
            let r = ecmp.route(&f, src, dst, &tuple(&f, 49_152 + sport % 16_384));
            *count.entry(r.switches()[2]).or_default() += 1;
        }
        assert_eq!(count.len(), paths, "every core is used");
        let expected = n as f64 / paths as f64;
        let chi2: f64 = count
            .values()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 15 degrees of freedom: P(chi² > 37.7) < 0.001 for a uniform hash.
        assert!(chi2 < 37.7, "chi² {chi2} over {count:?}");
        // Another seed (another fabric) hashes the same tuple independently.
        let other = Ecmp::new(43);
        let moved = (0..64u16)
            .filter(|&p| {
                let t = tuple(&f, 50_000 + p);
                other.route(&f, src, dst, &t) != ecmp.route(&f, src, dst, &t)
            })
            .count();
        assert!(
            moved > 32,
            "only {moved} of 64 tuples changed path with the seed"
        );
    }

    #[test]
    fn a_withdrawn_link_is_left_only_by_the_switch_that_withdrew_it() {
        let f = Fabric::new(Shape::LeafSpine {
            tors: 4,
            spines: 3,
            hosts_per_tor: 1,
            rnics_per_host: 1,
        })
        .unwrap();
        let ecmp = Ecmp::new(7);
        let dead = f.link_by_name("t1-s2").unwrap();
        let lower = f.links[dead as usize].lower;
        let withdrawn = |sw: u32, l: u32| sw == lower && l == dead;
        let (mut up, mut down, mut before) = (0, 0, 0);
        for sport in 49_152..51_152u16 {
            let t = |src: u32, dst: u32| FiveTuple {
                src: f.rnic_ip(src),
                dst: f.rnic_ip(dst),
                sport,
                dport: 4791,
            };
            let (a, b) = (f.rnics[1].tor, f.rnics[3].tor);
            let out = ecmp.route_avoiding(&f, a, b, &t(1, 3), withdrawn);
            assert!(!out.links().contains(&dead), "the ToR routes around it");
            before += usize::from(ecmp.route(&f, a, b, &t(1, 3)).links().contains(&dead));
            let back = ecmp.route_avoiding(&f, b, a, &t(3, 1), withdrawn);
            down += usize::from(back.links().contains(&dead));
            up += usize::from(out.links()[0] != f.link_by_name("t1-s0").unwrap());
        }
        // The far end still hashes a third of its traffic into the dead link, the ToR
        // spreads its own over the two links left.
        assert!(
            (500..830).contains(&down),
            "{down} of 2000 into the dead link"
        );
        assert!(
            (500..830).contains(&before),
            "{before} of 2000 used it before"
        );
        assert!((800..1200).contains(&up), "{up} of 2000 over t1-s1");
    }
}
