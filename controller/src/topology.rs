//! Which ToR each RNIC hangs off: the topology file first (per RNIC, then per host), then
//! the agent's hint, then the host's node labels (Kubernetes; per RNIC, then per node), then
//! gateway inference (RNICs behind the same gateway share a ToR), else `"unknown"`. The rail
//! of an RNIC: the agent's hint, then the node labels (per RNIC, then per node).

use crate::config::validate_parallel_paths;
use anyhow::Context;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

/// ToR name given to RNICs nothing else places.
pub const UNKNOWN_TOR: &str = "unknown";

/// The parsed topology file.
#[derive(Debug, Default, Clone)]
pub struct Topology {
    by_rnic: HashMap<(String, String), String>,
    by_host: HashMap<String, String>,
    /// Placement the hosts' Kubernetes node labels give.
    by_node_label: HashMap<String, NodeLabels>,
    /// N of Eq. 1 as the file states it.
    pub parallel_paths: Option<u32>,
}

/// Where a host's Kubernetes node labels put its RNICs: per RNIC (by interface name) ahead
/// of the node-wide value. Used only where the topology file and the agent say nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabels {
    /// ToR of every RNIC of the node.
    pub tor: Option<String>,
    /// ToR by RNIC interface name.
    pub rnic_tors: BTreeMap<String, String>,
    /// Rail of every RNIC of the node.
    pub rail: Option<u32>,
    /// Rail by RNIC interface name.
    pub rnic_rails: BTreeMap<String, u32>,
}

impl NodeLabels {
    /// True when the labels place nothing.
    pub fn is_empty(&self) -> bool {
        self.tor.is_none()
            && self.rnic_tors.is_empty()
            && self.rail.is_none()
            && self.rnic_rails.is_empty()
    }

    fn tor_of(&self, ifname: &str) -> Option<&str> {
        self.rnic_tors
            .get(ifname)
            .or(self.tor.as_ref())
            .map(String::as_str)
    }

    fn rail_of(&self, ifname: &str) -> Option<u32> {
        self.rnic_rails.get(ifname).copied().or(self.rail)
    }

    /// Every ToR name the labels give, for validation.
    pub fn tors(&self) -> impl Iterator<Item = &str> {
        self.tor
            .iter()
            .chain(self.rnic_tors.values())
            .map(String::as_str)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    parallel_paths: Option<u32>,
    #[serde(default)]
    tor: Vec<TorEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TorEntry {
    name: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    rnics: Vec<String>,
}

impl Topology {
    /// Reads and checks a topology file; errors name the file and the offending entry.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read topology file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("malformed topology file {}", path.display()))
    }

    /// Parses topology TOML. A host or RNIC listed under two ToRs is an error.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let file: TopologyFile = toml::from_str(text)?;
        if let Some(n) = file.parallel_paths {
            validate_parallel_paths(n)?;
        }
        let mut topo = Topology {
            parallel_paths: file.parallel_paths,
            ..Default::default()
        };
        for tor in file.tor {
            crate::registry::validate::name("ToR name", &tor.name).map_err(anyhow::Error::msg)?;
            for host in tor.hosts {
                if let Some(prev) = topo.by_host.insert(host.clone(), tor.name.clone()) {
                    anyhow::bail!("host {host:?} is under both {prev:?} and {:?}", tor.name);
                }
            }
            for rnic in tor.rnics {
                let (host, ifname) = rnic.split_once('/').with_context(|| {
                    format!("RNIC {rnic:?} under {:?} is not \"host/ifname\"", tor.name)
                })?;
                if let Some(prev) = topo
                    .by_rnic
                    .insert((host.to_string(), ifname.to_string()), tor.name.clone())
                {
                    anyhow::bail!("RNIC {rnic:?} is under both {prev:?} and {:?}", tor.name);
                }
            }
        }
        Ok(topo)
    }

    /// Records what a host's node labels say (empty: no labels); true when it changed.
    pub(crate) fn set_node_labels(&mut self, host: &str, labels: NodeLabels) -> bool {
        if labels.is_empty() {
            self.by_node_label.remove(host).is_some()
        } else {
            self.by_node_label.insert(host.to_string(), labels.clone()) != Some(labels)
        }
    }

    /// What a host's node labels say now (empty when nothing).
    pub(crate) fn node_labels(&self, host: &str) -> NodeLabels {
        self.by_node_label.get(host).cloned().unwrap_or_default()
    }

    /// The rail of one RNIC: the agent's hint, then the node labels.
    pub fn rail(&self, host: &str, ifname: &str, hint: Option<u32>) -> Option<u32> {
        hint.or_else(|| self.by_node_label.get(host)?.rail_of(ifname))
    }

    /// The ToR of one RNIC, first match wins (see the module doc).
    pub fn resolve(
        &self,
        host: &str,
        ifname: &str,
        hint: Option<&str>,
        gateway: Option<IpAddr>,
    ) -> String {
        if let Some(tor) = self.by_rnic.get(&(host.to_string(), ifname.to_string())) {
            return tor.clone();
        }
        if let Some(tor) = self.by_host.get(host) {
            return tor.clone();
        }
        if let Some(hint) = hint {
            return hint.to_string();
        }
        if let Some(tor) = self.by_node_label.get(host).and_then(|l| l.tor_of(ifname)) {
            return tor.to_string();
        }
        match gateway {
            Some(gw) => format!("gw-{gw}"),
            None => UNKNOWN_TOR.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
parallel_paths = 8
[[tor]]
name = "tor-1"
hosts = ["host-a", "host-b"]
rnics = ["host-c/eth1"]
[[tor]]
name = "tor-2"
hosts = ["host-c"]
"#;

    #[test]
    fn first_match_wins() {
        let t = Topology::parse(FILE).unwrap();
        assert_eq!(t.parallel_paths, Some(8));
        let gw: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        assert_eq!(t.resolve("host-c", "eth1", Some("hint"), gw), "tor-1");
        assert_eq!(t.resolve("host-c", "eth0", Some("hint"), gw), "tor-2");
        assert_eq!(t.resolve("host-a", "eth9", None, None), "tor-1");
        assert_eq!(t.resolve("host-z", "eth0", Some("hint"), gw), "hint");
        assert_eq!(t.resolve("host-z", "eth0", None, gw), "gw-10.0.0.1");
        assert_eq!(t.resolve("host-z", "eth0", None, None), UNKNOWN_TOR);
    }

    fn node(tor: Option<&str>, rnic_tors: &[(&str, &str)], rail: Option<u32>) -> NodeLabels {
        NodeLabels {
            tor: tor.map(Into::into),
            rnic_tors: rnic_tors
                .iter()
                .map(|(i, t)| (i.to_string(), t.to_string()))
                .collect(),
            rail,
            rnic_rails: [("eth1".to_string(), 7)].into(),
        }
    }

    #[test]
    fn node_labels_rank_below_the_file_and_the_agent_hint() {
        let mut t = Topology::parse(FILE).unwrap();
        let gw: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        assert!(t.set_node_labels("host-z", node(Some("tor-9"), &[], None)));
        assert!(!t.set_node_labels("host-z", node(Some("tor-9"), &[], None)));
        assert!(t.set_node_labels("host-a", node(Some("tor-9"), &[], None)));
        assert_eq!(t.resolve("host-z", "eth0", None, gw), "tor-9");
        assert_eq!(t.resolve("host-z", "eth0", Some("hint"), gw), "hint");
        assert_eq!(t.resolve("host-a", "eth0", None, gw), "tor-1");
        assert!(t.set_node_labels("host-z", NodeLabels::default()));
        assert_eq!(t.resolve("host-z", "eth0", None, gw), "gw-10.0.0.1");
    }

    #[test]
    fn per_rnic_labels_win_over_node_wide_ones_and_rails_follow_the_hint_first() {
        let mut t = Topology::default();
        assert!(t.set_node_labels("h", node(Some("tor-a"), &[("eth1", "rail-tor-1")], Some(2))));
        assert_eq!(t.resolve("h", "eth1", None, None), "rail-tor-1");
        assert_eq!(t.resolve("h", "eth0", None, None), "tor-a");
        assert_eq!(t.rail("h", "eth1", None), Some(7), "per-RNIC rail label");
        assert_eq!(t.rail("h", "eth0", None), Some(2), "node-wide rail label");
        assert_eq!(
            t.rail("h", "eth0", Some(4)),
            Some(4),
            "the agent's rail first"
        );
        assert_eq!(t.rail("other", "eth0", None), None);
        // Per-RNIC labels alone place only their RNIC.
        assert!(t.set_node_labels("h", node(None, &[("eth1", "rail-tor-1")], None)));
        assert_eq!(t.resolve("h", "eth0", None, None), UNKNOWN_TOR);
        assert_eq!(t.rail("h", "eth0", None), None);
    }

    #[test]
    fn malformed_files_are_refused_with_a_reason() {
        for (text, why) in [
            (
                "[[tor]]\nname = \"t\"\nrnics = [\"noslash\"]",
                "host/ifname",
            ),
            (
                "[[tor]]\nname = \"a\"\nhosts = [\"h\"]\n[[tor]]\nname = \"b\"\nhosts = [\"h\"]",
                "both",
            ),
            ("parallel_paths = 0", "parallel_paths"),
            ("[[tor]]\nname = \"t\"\nhostz = []", "hostz"),
            ("[[tor]]\nname = \"\"", "empty"),
            ("parallel_paths = \"four\"", "invalid type"),
        ] {
            let err = format!("{:#}", Topology::parse(text).unwrap_err());
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn load_names_the_file() {
        let err = format!(
            "{:#}",
            Topology::load(Path::new("/nonexistent/topo.toml")).unwrap_err()
        );
        assert!(err.contains("/nonexistent/topo.toml"), "{err}");
    }
}
