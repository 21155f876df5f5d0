//! The analyzer's fabric map (switch interface addresses, switch-to-switch links) written
//! from a testbed topology, as an operator would write it from the fabric's IP plan.

use anyhow::Result;
use rocemesh_analyzer::diagnosis::fabric::{LinkDef, LinkEnd, MapFile, SwitchDef};
use rocemesh_testbed::Topology;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Renders the map of `t` as TOML.
pub fn render(t: &Topology) -> Result<String> {
    let is_switch = |node: &str| t.tors.iter().chain(&t.spines).any(|r| r.name == node);
    let is_spine = |node: &str| t.spines.iter().any(|s| s.name == node);
    let mut addresses: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for l in &t.links {
        for e in [&l.a, &l.b].into_iter().filter(|e| is_switch(&e.node)) {
            addresses
                .entry(e.node.clone())
                .or_default()
                .push(IpAddr::V4(e.ip));
        }
    }
    let end = |e: &rocemesh_testbed::Endpoint| LinkEnd {
        device: e.node.clone(),
        ip: IpAddr::V4(e.ip),
    };
    let map = MapFile {
        switch: addresses
            .into_iter()
            .map(|(name, addresses)| SwitchDef { name, addresses })
            .collect(),
        link: t
            .links
            .iter()
            .filter(|l| is_switch(&l.a.node) && is_spine(&l.b.node))
            .map(|l| LinkDef {
                name: l.name.clone(),
                ends: [end(&l.a), end(&l.b)],
            })
            .collect(),
    };
    Ok(toml::to_string(&map)?)
}

#[cfg(test)]
mod tests {
    use rocemesh_analyzer::diagnosis::fabric::FabricMap;
    use rocemesh_testbed::{FabricSpec, Topology};

    #[test]
    fn the_rendered_map_is_what_the_analyzer_reads() {
        let t = Topology::new(&FabricSpec {
            tors: 3,
            ..FabricSpec::default()
        });
        let map = FabricMap::parse(&super::render(&t).unwrap()).unwrap();
        let link = t.link("t2-s1").unwrap();
        assert!(map.link("t2-s1").is_some());
        assert_eq!(map.device(link.b.ip.into()), "s1");
        assert_eq!(map.device(link.a.ip.into()), "t2");
        assert!(
            map.link("h0r0-t0").is_none(),
            "RNIC links belong to the RNIC, not the map"
        );
    }
}
