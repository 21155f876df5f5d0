//! The analyzer's fabric map (switch interface addresses, switch-to-switch links) written
//! from a testbed topology, as an operator would write it from the fabric's IP plan.

use anyhow::Result;
use rocemesh_testbed::{NodeKind, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Map {
    switch: Vec<Switch>,
    link: Vec<Link>,
}

#[derive(Serialize)]
struct Switch {
    name: String,
    addresses: Vec<String>,
}

#[derive(Serialize)]
struct Link {
    name: String,
    ends: Vec<End>,
}

#[derive(Serialize)]
struct End {
    device: String,
    ip: String,
}

/// Renders the map of `t` as TOML.
pub fn render(t: &Topology) -> Result<String> {
    let is_switch = |node: &str| t.tors.iter().chain(&t.spines).any(|r| r.name == node);
    let mut addresses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &t.links {
        for e in [&l.a, &l.b].into_iter().filter(|e| is_switch(&e.node)) {
            addresses
                .entry(e.node.clone())
                .or_default()
                .push(e.ip.to_string());
        }
    }
    let spine = |node: &str| {
        t.spines
            .iter()
            .any(|s| s.name == node && s.kind == NodeKind::Spine)
    };
    let map = Map {
        switch: addresses
            .into_iter()
            .map(|(name, addresses)| Switch { name, addresses })
            .collect(),
        link: t
            .links
            .iter()
            .filter(|l| is_switch(&l.a.node) && spine(&l.b.node))
            .map(|l| Link {
                name: l.name.clone(),
                ends: [&l.a, &l.b]
                    .iter()
                    .map(|e| End {
                        device: e.node.clone(),
                        ip: e.ip.to_string(),
                    })
                    .collect(),
            })
            .collect(),
    };
    Ok(toml::to_string(&map)?)
}
