//! The fabric map: which switch owns a traceroute hop address, and which
//! switch-to-switch link a hop's ingress address names.
//!
//! Routers answer traceroute from the interface the probe came in on, so the
//! address at TTL i+1 names both the device and the link the packet took from
//! the device at TTL i. Addresses the map does not know fall back to the
//! address itself (device) and `"<a>-><b>"` (link).

use super::paths::Name;
use anyhow::{Context, bail, ensure};
use foldhash::HashMap;
use rocemesh_proto::fabric_map::MapFile;
use std::net::IpAddr;
use std::path::Path;

/// Largest fabric map file read (a 100k-link fabric fits in a few MiB).
const MAX_MAP_BYTES: u64 = 64 << 20;

/// A switch-to-switch link of the map. Its names are shared with the components
/// tomography builds from it (cloning one is a reference count, not an allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLink {
    /// Link name (e.g. `"t0-s1"`).
    pub name: Name,
    /// The two switches it joins.
    pub devices: [Name; 2],
}

/// The operator's (or testbed's) map of switches and links; empty when none is configured.
#[derive(Debug, Default)]
pub struct FabricMap {
    device_of: HashMap<IpAddr, Name>,
    link_at: HashMap<IpAddr, usize>,
    links: Vec<MapLink>,
    /// Link index by name: `link(name)` is called per traced hop and per finding.
    link_named: HashMap<Name, usize>,
    links_of: HashMap<Name, Vec<usize>>,
}

impl FabricMap {
    /// Reads and validates a map file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let len = std::fs::metadata(path)
            .with_context(|| format!("fabric map {}", path.display()))?
            .len();
        ensure!(
            len <= MAX_MAP_BYTES,
            "fabric map {} is {len} bytes, more than {MAX_MAP_BYTES}",
            path.display()
        );
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading fabric map {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("fabric map {}", path.display()))
    }

    /// Parses map text; every inconsistency is an error naming the entry.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let file: MapFile = toml::from_str(text).context("invalid TOML")?;
        let mut map = Self::default();
        for s in file.switch {
            ensure!(!s.name.is_empty(), "a switch has an empty name");
            let name: Name = s.name.into();
            ensure!(
                !map.links_of.contains_key(&name),
                "switch {name:?} listed twice"
            );
            for a in s.addresses {
                if let Some(other) = map.device_of.insert(a, Name::clone(&name)) {
                    bail!("address {a} belongs to both {other:?} and {name:?}");
                }
            }
            map.links_of.insert(name, Vec::new());
        }
        for l in file.link {
            let i = map.links.len();
            let name: Name = l.name.into();
            ensure!(
                map.link_named.insert(Name::clone(&name), i).is_none(),
                "link {name:?} listed twice"
            );
            let mut devices: [Name; 2] = Default::default();
            for (end, device) in l.ends.iter().zip(&mut devices) {
                let Some(d) = map.device_of.get(&end.ip).cloned() else {
                    bail!("link {name:?}: {} is not an address of any switch", end.ip);
                };
                ensure!(
                    *d == *end.device,
                    "link {name:?}: {} belongs to {d:?}, not {:?}",
                    end.ip,
                    end.device
                );
                if map.link_at.insert(end.ip, i).is_some() {
                    bail!("link {name:?}: address {} ends two links", end.ip);
                }
                if let Some(of) = map.links_of.get_mut(&d) {
                    of.push(i);
                }
                *device = d;
            }
            map.links.push(MapLink { name, devices });
        }
        Ok(map)
    }

    /// The device owning a hop address (the address itself when unmapped).
    pub fn device(&self, hop: IpAddr) -> Name {
        self.device_of
            .get(&hop)
            .cloned()
            .unwrap_or_else(|| hop.to_string().into())
    }

    /// The map's name of this device, `None` when the map does not know it.
    pub fn switch(&self, device: &str) -> Option<&Name> {
        self.links_of.get_key_value(device).map(|(name, _)| name)
    }

    /// True when the map knows this device.
    pub fn knows_device(&self, device: &str) -> bool {
        self.switch(device).is_some()
    }

    /// Name of the link a packet took into the hop answering from `next`, coming
    /// from the hop that answered from `prev`.
    pub fn link_into(&self, prev: IpAddr, next: IpAddr) -> Name {
        match self.link_at.get(&next) {
            Some(&i) => self.links[i].name.clone(),
            None => format!("{prev}->{next}").into(),
        }
    }

    /// The links of a device.
    pub fn links_of(&self, device: &str) -> impl Iterator<Item = &MapLink> + '_ {
        self.links_of
            .get(device)
            .into_iter()
            .flatten()
            .map(|&i| &self.links[i])
    }

    /// The link joining devices `a` and `b` (none when they are the same device): where a
    /// shortest-path router sends a packet from `a` towards `b`'s hosts.
    pub fn link_between(&self, a: &str, b: &str) -> Option<&MapLink> {
        (a != b)
            .then(|| {
                self.links_of(a)
                    .find(|l| l.devices.iter().any(|d| **d == *b))
            })
            .flatten()
    }

    /// The link with this name.
    pub fn link(&self, name: &str) -> Option<&MapLink> {
        self.link_named.get(name).map(|&i| &self.links[i])
    }
}

/// The 2x2 Clos the unit tests use: ToRs t0, t1 (RNIC k of ToR t at 198.18.t.(2k+1),
/// its ToR port at 198.18.t.(2k)), spines s0, s1, link i = 2t + s at 198.19.0.(2i) on the
/// ToR and 198.19.0.(2i + 1) on the spine (the testbed's address plan).
#[cfg(test)]
pub(crate) const CLOS_2X2: &str = r#"
[[switch]]
name = "t0"
addresses = ["198.18.0.0", "198.18.0.2", "198.18.0.4", "198.18.0.6", "198.19.0.0", "198.19.0.2"]
[[switch]]
name = "t1"
addresses = ["198.18.1.0", "198.18.1.2", "198.18.1.4", "198.18.1.6", "198.19.0.4", "198.19.0.6"]
[[switch]]
name = "s0"
addresses = ["198.19.0.1", "198.19.0.5"]
[[switch]]
name = "s1"
addresses = ["198.19.0.3", "198.19.0.7"]
[[link]]
name = "t0-s0"
ends = [{ device = "t0", ip = "198.19.0.0" }, { device = "s0", ip = "198.19.0.1" }]
[[link]]
name = "t0-s1"
ends = [{ device = "t0", ip = "198.19.0.2" }, { device = "s1", ip = "198.19.0.3" }]
[[link]]
name = "t1-s0"
ends = [{ device = "t1", ip = "198.19.0.4" }, { device = "s0", ip = "198.19.0.5" }]
[[link]]
name = "t1-s1"
ends = [{ device = "t1", ip = "198.19.0.6" }, { device = "s1", ip = "198.19.0.7" }]
"#;

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = r#"
[[switch]]
name = "t0"
addresses = ["198.18.0.0", "198.19.0.0"]
[[switch]]
name = "s1"
addresses = ["198.19.0.1"]
[[link]]
name = "t0-s1"
ends = [{ device = "t0", ip = "198.19.0.0" }, { device = "s1", ip = "198.19.0.1" }]
"#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_devices_and_links_with_fallbacks() {
        let m = FabricMap::parse(MAP).unwrap();
        assert_eq!(&*m.device(ip("198.18.0.0")), "t0");
        assert_eq!(&*m.device(ip("10.9.9.9")), "10.9.9.9");
        assert_eq!(&*m.link_into(ip("198.18.0.0"), ip("198.19.0.1")), "t0-s1");
        assert_eq!(
            &*m.link_into(ip("10.0.0.1"), ip("10.0.0.2")),
            "10.0.0.1->10.0.0.2"
        );
        assert_eq!(
            m.links_of("t0").map(|l| &*l.name).collect::<Vec<_>>(),
            ["t0-s1"]
        );
        let link = m.link("t0-s1").unwrap();
        assert_eq!(link.devices, ["t0".into(), "s1".into()]);
        // One name per switch, shared by the map and every link of it.
        let t0 = m.switch("t0").unwrap();
        assert!(std::sync::Arc::ptr_eq(t0, &link.devices[0]));
        assert!(std::sync::Arc::ptr_eq(t0, &m.device(ip("198.18.0.0"))));
        assert!(m.knows_device("s1") && !m.knows_device("s9"));
        assert_eq!(m.switch("s9"), None);
    }

    #[test]
    fn inconsistent_maps_are_refused_with_the_entry_named() {
        let dup = MAP.replace("198.19.0.1\"]", "198.19.0.0\"]");
        assert!(
            FabricMap::parse(&dup)
                .unwrap_err()
                .to_string()
                .contains("198.19.0.0")
        );
        let wrong = MAP.replace("device = \"s1\"", "device = \"t0\"");
        assert!(format!("{:#}", FabricMap::parse(&wrong).unwrap_err()).contains("t0-s1"));
        let twice = MAP.replace("198.19.0.1\" }]", "198.19.0.1\" }]\n[[link]]\nname = \"t0-s1\"\nends = [{ device = \"t0\", ip = \"198.18.0.0\" }, { device = \"s1\", ip = \"198.19.0.1\" }]");
        assert!(format!("{:#}", FabricMap::parse(&twice).unwrap_err()).contains("listed twice"));
        assert!(FabricMap::parse("[[switch]]\nname = 1").is_err());
        assert!(FabricMap::parse("[[router]]").is_err());
        assert!(FabricMap::load(Path::new("/nonexistent/map.toml")).is_err());
    }
}
