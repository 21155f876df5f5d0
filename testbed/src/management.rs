//! The management network: how agents in host namespaces reach a server in the root
//! namespace, as real servers reach the controller over a separate TCP NIC
//! (R-Pingmesh §3.2). A bridge `{prefix}-mg` in the root namespace holds
//! [`root_ip`]; every host gets a veth `mgmt` on the fabric's own /24 in 198.19.0.0/16
//! (the third octet derives from the prefix, so fabrics with different prefixes each
//! have one and can run side by side). Probes never use it: agents bind their RNIC
//! addresses, which route through the fabric. Opt-in (`FabricSpec::management`).

use crate::netns;
use crate::topology::Topology;
use anyhow::Result;
use std::net::Ipv4Addr;

/// Third octets of 198.19.x.0/24 that management subnets are drawn from; switch links
/// use 198.19.0.0 upwards and must stay below (see [`MAX_SWITCH_LINKS`]).
const SUBNET_OCTETS: std::ops::RangeInclusive<u8> = 32..=254;
/// Most ToR–spine /31 links whose addresses stay below the management subnets.
pub const MAX_SWITCH_LINKS: usize = 32 * 256 / 2;
/// Interface name of the management veth inside each host namespace.
pub const HOST_IFNAME: &str = "mgmt";
/// Most hosts the /24 holds (addresses .10 to .249).
pub const MAX_HOSTS: usize = 240;

/// Third octet of fabric `prefix`'s management subnet: FNV-1a of the prefix, so every
/// process (CLI, tests, teardown after a crash) finds the same subnet without state.
pub fn subnet_octet(prefix: &str) -> u8 {
    let hash = prefix.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let span = u32::from(SUBNET_OCTETS.end() - SUBNET_OCTETS.start()) + 1;
    SUBNET_OCTETS.start() + (hash % span) as u8
}

/// Address of the root namespace on fabric `prefix`'s management network (servers listen here).
pub fn root_ip(prefix: &str) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, subnet_octet(prefix), 1)
}

/// Management address of host `index` of fabric `prefix`.
pub fn host_ip(prefix: &str, index: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, subnet_octet(prefix), 10 + index as u8)
}

/// Name of the root-namespace bridge of fabric `prefix`.
pub fn bridge_name(prefix: &str) -> String {
    format!("{prefix}-mg")
}

/// Name of host `index`'s veth end in the root namespace.
pub fn root_veth_name(prefix: &str, index: usize) -> String {
    format!("{prefix}-m{index}")
}

/// Creates the bridge and one veth per host; refuses when another interface already
/// holds the subnet (a fabric whose prefix hashes to the same octet).
pub fn build(t: &Topology) -> Result<()> {
    let p = &t.spec.prefix;
    let br = bridge_name(p);
    let root_ip = root_ip(p);
    let owner = netns::run(
        "ip",
        &["-o", "-4", "addr", "show", "to", &format!("{root_ip}/24")],
    )?;
    if let Some(dev) = owner.split_whitespace().nth(1) {
        anyhow::bail!(
            "management subnet of prefix {p:?} ({root_ip}/24) is already on {dev}: another fabric's prefix maps to it; choose another prefix"
        );
    }
    let mut root = vec![
        format!("link add {br} type bridge"),
        format!("addr add {root_ip}/24 dev {br}"),
        format!("link set {br} up"),
    ];
    for (i, h) in t.hosts.iter().enumerate() {
        let veth = root_veth_name(p, i);
        root.push(format!(
            "link add {veth} type veth peer name {HOST_IFNAME} netns {}",
            h.netns
        ));
        root.push(format!("link set {veth} master {br} up"));
    }
    netns::ip_batch(None, &root)?;
    for h in &t.hosts {
        netns::ip_batch(
            Some(&h.netns),
            &[
                format!("addr add {}/24 dev {HOST_IFNAME}", h.mgmt_ip),
                format!("link set {HOST_IFNAME} up"),
            ],
        )?;
    }
    Ok(())
}

/// Removes the host veths and the bridge synchronously (namespace deletion would
/// remove the veths too, but asynchronously). Idempotent.
pub fn remove(prefix: &str) {
    let veth_prefix = format!("{prefix}-m");
    let listing = netns::run("ip", &["-o", "link", "show"]).unwrap_or_default();
    for line in listing.lines() {
        let Some(name) = line
            .split(": ")
            .nth(1)
            .map(|n| n.split('@').next().unwrap_or(n))
        else {
            continue;
        };
        let is_veth = name
            .strip_prefix(&veth_prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_veth {
            let _ = netns::run("ip", &["link", "del", name]);
        }
    }
    let _ = netns::run("ip", &["link", "del", &bridge_name(prefix)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_stable_distinct_for_the_project_prefixes_and_above_the_links() {
        assert_eq!(root_ip("rmev"), root_ip("rmev"));
        let prefixes = [
            "rmev", "rmci", "rmdemo", "rmtb", "tbjob", "tbjob2", "tbmg", "tbmh", "tbrail", "rmlat",
            "rmsk", "rmdash", "rmal",
        ];
        let octets: std::collections::HashSet<u8> =
            prefixes.iter().map(|p| subnet_octet(p)).collect();
        assert_eq!(
            octets.len(),
            prefixes.len(),
            "two project prefixes share a management subnet"
        );
        assert!(octets.iter().all(|o| SUBNET_OCTETS.contains(o)));
        let last_link = u32::from(Ipv4Addr::new(198, 19, 0, 0)) + 2 * MAX_SWITCH_LINKS as u32 - 1;
        assert!(Ipv4Addr::from(last_link).octets()[2] < *SUBNET_OCTETS.start());
        assert_eq!(
            host_ip("rmev", 3).octets()[..3],
            root_ip("rmev").octets()[..3]
        );
    }
}
