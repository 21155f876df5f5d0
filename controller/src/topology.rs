//! Which ToR each RNIC hangs off: the topology file first (per RNIC, then per host), then
//! the agent's hint, then the host's node label (Kubernetes), then gateway inference (RNICs
//! behind the same gateway share a ToR), else `"unknown"`.

use crate::config::validate_parallel_paths;
use anyhow::Context;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

/// ToR name given to RNICs nothing else places.
pub const UNKNOWN_TOR: &str = "unknown";

/// The parsed topology file.
#[derive(Debug, Default, Clone)]
pub struct Topology {
    by_rnic: HashMap<(String, String), String>,
    by_host: HashMap<String, String>,
    /// ToRs named by the hosts' Kubernetes node labels.
    by_node_label: HashMap<String, String>,
    /// N of Eq. 1 as the file states it.
    pub parallel_paths: Option<u32>,
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

    /// Records the ToR a host's node label names (`None`: no label); true when it changed.
    pub(crate) fn set_node_label(&mut self, host: &str, tor: Option<String>) -> bool {
        match tor {
            Some(tor) => self.by_node_label.insert(host.to_string(), tor.clone()) != Some(tor),
            None => self.by_node_label.remove(host).is_some(),
        }
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
        if let Some(tor) = self.by_node_label.get(host) {
            return tor.clone();
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

    #[test]
    fn node_labels_rank_below_the_file_and_the_agent_hint() {
        let mut t = Topology::parse(FILE).unwrap();
        let gw: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        assert!(t.set_node_label("host-z", Some("tor-9".into())));
        assert!(!t.set_node_label("host-z", Some("tor-9".into())));
        assert!(t.set_node_label("host-a", Some("tor-9".into())));
        assert_eq!(t.resolve("host-z", "eth0", None, gw), "tor-9");
        assert_eq!(t.resolve("host-z", "eth0", Some("hint"), gw), "hint");
        assert_eq!(t.resolve("host-a", "eth0", None, gw), "tor-1");
        assert!(t.set_node_label("host-z", None));
        assert_eq!(t.resolve("host-z", "eth0", None, gw), "gw-10.0.0.1");
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
