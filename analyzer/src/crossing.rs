//! What a traced path crosses, named the way problems name components: the switches
//! (fabric-map devices) and the switch-to-switch links between consecutive answering
//! hops. Source-port advice and flow blame both read paths this way.

use crate::diagnosis::fabric::FabricMap;
use rocemesh_proto::path::TracedPath;
use std::net::IpAddr;

/// The switches and links of one traced path, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Crossing {
    /// Devices of the answering hops before the destination.
    pub switches: Vec<String>,
    /// Links between consecutive answering hops (none across a silent hop).
    pub links: Vec<String>,
}

impl Crossing {
    /// Reads `t` against `map`.
    pub fn of(map: &FabricMap, t: &TracedPath) -> Self {
        let mut c = Self::default();
        let mut prev: Option<IpAddr> = None;
        for hop in &t.hops {
            match *hop {
                // The destination answers the last probe: it is no switch.
                Some(ip) if ip == t.dst => break,
                Some(ip) => {
                    c.switches.push(map.device(ip).to_string());
                    if let Some(p) = prev {
                        c.links.push(map.link_into(p, ip).to_string());
                    }
                    prev = Some(ip);
                }
                None => prev = None,
            }
        }
        c
    }

    /// True when the path crosses the switch or link named `component`.
    pub fn crosses(&self, component: &str) -> bool {
        self.switches
            .iter()
            .chain(&self.links)
            .any(|c| c == component)
    }

    /// The top of the path: its middle switch (a spine in a two-tier Clos), by which
    /// advice spreads ports.
    pub fn apex(&self) -> Option<&str> {
        self.switches
            .get(self.switches.len() / 2)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_switches_and_links_and_stops_at_the_destination() {
        let map = FabricMap::parse(crate::diagnosis::fabric::CLOS_2X2).unwrap();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let t = TracedPath {
            src: ip("198.18.0.1"),
            dst: ip("198.18.1.1"),
            src_port: 1000,
            dst_port: 4792,
            traced_at_unix_ns: 0,
            reached: true,
            ack_direction: false,
            hops: vec![
                Some(ip("198.18.0.0")),
                Some(ip("198.19.0.3")),
                Some(ip("198.19.0.6")),
                Some(ip("198.18.1.1")),
            ],
        };
        let c = Crossing::of(&map, &t);
        assert_eq!(c.switches, ["t0", "s1", "t1"]);
        assert_eq!(c.links, ["t0-s1", "t1-s1"]);
        assert_eq!(c.apex(), Some("s1"));
        assert!(c.crosses("t0-s1") && c.crosses("s1") && !c.crosses("t0-s0"));
        let gap = TracedPath {
            hops: vec![Some(ip("198.18.0.0")), None, Some(ip("198.19.0.6"))],
            reached: false,
            ..t
        };
        let c = Crossing::of(&map, &gap);
        assert_eq!((c.switches.len(), c.links.len()), (2, 0));
    }
}
