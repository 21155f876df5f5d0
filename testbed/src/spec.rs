//! The user-facing description of a fabric and its validation.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Linux `IFNAMSIZ` minus the terminating NUL: the longest interface name the kernel accepts.
/// Namespace names are held to the same limit so every name in the fabric is short and uniform.
pub const MAX_NAME_LEN: usize = 15;

/// Most point-to-point RNIC links one ToR can carry: a ToR's host links share one /24.
pub const MAX_RNIC_LINKS_PER_TOR: usize = 128;

/// Shape of a leaf–spine fabric; every namespace it creates is named `{prefix}-…`, so fabrics
/// with different prefixes coexist on one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSpec {
    /// Namespace name prefix (lowercase letters and digits, starting with a letter).
    pub prefix: String,
    /// Number of top-of-rack (leaf) routers.
    pub tors: u8,
    /// Number of spine routers; every ToR connects to every spine.
    pub spines: u8,
    /// Hosts per ToR (non-rail) or per pod (rail-optimized).
    pub hosts_per_tor: u8,
    /// RNICs (veth interfaces) per host.
    pub rnics_per_host: u8,
    /// Rail-optimized: RNIC i of every host of a pod connects to ToR i of the pod.
    pub rail_optimized: bool,
    /// Build the management network (a root-namespace bridge on the prefix's own /24).
    #[serde(default)]
    pub management: bool,
}

impl Default for FabricSpec {
    /// The 2 ToR × 2 spine × 2 hosts/ToR fabric used by the tests.
    fn default() -> Self {
        FabricSpec {
            prefix: "rmtb".to_string(),
            tors: 2,
            spines: 2,
            hosts_per_tor: 2,
            rnics_per_host: 1,
            rail_optimized: false,
            management: false,
        }
    }
}

impl FabricSpec {
    /// Number of hosts the spec describes.
    pub fn host_count(&self) -> usize {
        if self.rail_optimized {
            self.pods() * usize::from(self.hosts_per_tor)
        } else {
            usize::from(self.tors) * usize::from(self.hosts_per_tor)
        }
    }

    /// Number of rail-optimized pods (groups of `rnics_per_host` ToRs); 0 when not rail-optimized.
    pub fn pods(&self) -> usize {
        if self.rail_optimized && self.rnics_per_host > 0 {
            usize::from(self.tors) / usize::from(self.rnics_per_host)
        } else {
            0
        }
    }

    /// RNIC links attached to each ToR.
    pub fn rnic_links_per_tor(&self) -> usize {
        if self.rail_optimized {
            usize::from(self.hosts_per_tor)
        } else {
            usize::from(self.hosts_per_tor) * usize::from(self.rnics_per_host)
        }
    }

    /// Checks the spec can be built: sizes, address-plan capacity and name lengths.
    pub fn validate(&self) -> Result<()> {
        let p = &self.prefix;
        let mut chars = p.chars();
        if !chars.next().is_some_and(|c| c.is_ascii_lowercase())
            || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            bail!("prefix {p:?} must be lowercase letters/digits starting with a letter");
        }
        if self.tors == 0 || self.spines == 0 || self.hosts_per_tor == 0 || self.rnics_per_host == 0
        {
            bail!("tors, spines, hosts_per_tor and rnics_per_host must all be at least 1");
        }
        if self.rail_optimized && !self.tors.is_multiple_of(self.rnics_per_host) {
            bail!(
                "rail-optimized fabric needs tors ({}) to be a multiple of rnics_per_host ({})",
                self.tors,
                self.rnics_per_host
            );
        }
        if self.rnic_links_per_tor() > MAX_RNIC_LINKS_PER_TOR {
            bail!(
                "{} RNIC links per ToR exceed the {MAX_RNIC_LINKS_PER_TOR} a ToR's /24 holds",
                self.rnic_links_per_tor()
            );
        }
        if usize::from(self.tors) * usize::from(self.spines) > crate::management::MAX_SWITCH_LINKS {
            bail!(
                "tors × spines exceeds the {} /31 links below the management subnets (198.19.32.0 and up)",
                crate::management::MAX_SWITCH_LINKS
            );
        }
        if self.host_count() > crate::management::MAX_HOSTS {
            bail!(
                "{} hosts exceed the {} management addresses",
                self.host_count(),
                crate::management::MAX_HOSTS
            );
        }
        let longest = [
            format!("{p}-h{}", self.host_count().saturating_sub(1)),
            format!("{p}-t{}", self.tors - 1),
            format!("{p}-s{}", self.spines - 1),
            crate::management::root_veth_name(p, self.host_count().saturating_sub(1)),
        ];
        if let Some(name) = longest.iter().find(|n| n.len() > MAX_NAME_LEN) {
            bail!(
                "name {name:?} is longer than {MAX_NAME_LEN} characters (IFNAMSIZ); shorten the prefix"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_is_valid() {
        FabricSpec::default().validate().unwrap();
        assert_eq!(FabricSpec::default().host_count(), 4);
    }

    #[test]
    fn rejects_bad_specs() {
        let bad = |f: fn(&mut FabricSpec)| {
            let mut s = FabricSpec::default();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert!(bad(|s| s.prefix = "Rm".into()).contains("prefix"));
        assert!(bad(|s| s.prefix = String::new()).contains("prefix"));
        assert!(bad(|s| s.prefix = "r-m".into()).contains("prefix"));
        assert!(bad(|s| s.spines = 0).contains("at least 1"));
        assert!(bad(|s| s.prefix = "averyverylongprefix".into()).contains("IFNAMSIZ"));
        assert!(
            bad(|s| {
                s.rail_optimized = true;
                s.rnics_per_host = 3;
            })
            .contains("multiple")
        );
        assert!(
            bad(|s| {
                s.hosts_per_tor = 100;
                s.rnics_per_host = 2;
            })
            .contains("per ToR")
        );
    }

    #[test]
    fn rail_optimized_counts_hosts_per_pod() {
        let s = FabricSpec {
            tors: 4,
            rnics_per_host: 2,
            hosts_per_tor: 3,
            rail_optimized: true,
            ..FabricSpec::default()
        };
        s.validate().unwrap();
        assert_eq!(s.pods(), 2);
        assert_eq!(s.host_count(), 6);
        assert_eq!(s.rnic_links_per_tor(), 3);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_str::<FabricSpec>(
            r#"{"prefix":"a","tors":1,"spines":1,"hosts_per_tor":1,"rnics_per_host":1,"rail_optimized":false,"x":1}"#,
        );
        assert!(err.is_err());
    }
}
