//! The fabric map file (TOML): which switch owns each interface address and which
//! switch-to-switch links exist. Operators write it from the fabric's IP plan, the lab and
//! the simulator from their topologies; the analyzer reads it to name traceroute hops.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The fabric map file (TOML) as written by operators or by the lab from a testbed
/// topology: switches with their interface addresses, switch-to-switch links.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MapFile {
    /// Switches.
    #[serde(default)]
    pub switch: Vec<SwitchDef>,
    /// Switch-to-switch links.
    #[serde(default)]
    pub link: Vec<LinkDef>,
}

/// One switch and every interface address it answers traceroute from.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchDef {
    /// Switch name (e.g. "s1").
    pub name: String,
    /// Its interface addresses.
    pub addresses: Vec<IpAddr>,
}

/// One switch-to-switch link.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDef {
    /// Link name (e.g. "t0-s1").
    pub name: String,
    /// Its two ends.
    pub ends: [LinkEnd; 2],
}

/// One end of a link: the device and its interface address on the link.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEnd {
    /// Device name.
    pub device: String,
    /// Interface address.
    pub ip: IpAddr,
}
