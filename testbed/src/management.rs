//! The management network: how agents in host namespaces reach a server in the root
//! namespace, as real servers reach the controller over a separate TCP NIC
//! (R-Pingmesh §3.2). A bridge `{prefix}-mg` in the root namespace holds
//! [`ROOT_IP`]; every host gets a veth `mgmt` on 198.19.254.0/24. Probes never use it:
//! agents bind their RNIC addresses, which route through the fabric. Opt-in
//! (`FabricSpec::management`): one fabric at a time may have it.

use crate::netns;
use crate::topology::Topology;
use anyhow::Result;
use std::net::Ipv4Addr;

/// Address of the root namespace on the management network (servers listen here).
pub const ROOT_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 1);
/// Interface name of the management veth inside each host namespace.
pub const HOST_IFNAME: &str = "mgmt";
/// Most hosts the /24 holds (addresses .10 to .249).
pub const MAX_HOSTS: usize = 240;

/// Management address of host `index`.
pub fn host_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 254, 10 + index as u8)
}

/// Name of the root-namespace bridge of fabric `prefix`.
pub fn bridge_name(prefix: &str) -> String {
    format!("{prefix}-mg")
}

/// Name of host `index`'s veth end in the root namespace.
pub fn root_veth_name(prefix: &str, index: usize) -> String {
    format!("{prefix}-m{index}")
}

/// Creates the bridge and one veth per host; refuses when another fabric already owns
/// the management subnet.
pub fn build(t: &Topology) -> Result<()> {
    let p = &t.spec.prefix;
    let br = bridge_name(p);
    let owner = netns::run(
        "ip",
        &["-o", "-4", "addr", "show", "to", &format!("{ROOT_IP}/32")],
    )?;
    if let Some(dev) = owner.split_whitespace().nth(1) {
        anyhow::bail!(
            "management address {ROOT_IP} is already on {dev}: another fabric has the management network"
        );
    }
    let mut root = vec![
        format!("link add {br} type bridge"),
        format!("addr add {ROOT_IP}/24 dev {br}"),
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
