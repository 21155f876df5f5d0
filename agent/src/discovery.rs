//! What the agent learns from the host itself: its name, interface addresses, gateways.

use anyhow::Result;
use std::net::{IpAddr, Ipv4Addr};

pub(crate) use crate::sys::{hostname, interface_addresses};

/// The first IPv4 address of `ifname` (IPv6 if it has no IPv4).
pub(crate) fn interface_ip(ifname: &str) -> Result<IpAddr> {
    let addrs = interface_addresses()?;
    let mine = addrs.iter().filter(|(n, _)| n == ifname).map(|(_, ip)| *ip);
    let mut v6 = None;
    for ip in mine {
        match ip {
            IpAddr::V4(_) => return Ok(ip),
            IpAddr::V6(_) if v6.is_none() => v6 = Some(ip),
            IpAddr::V6(_) => {}
        }
    }
    v6.ok_or_else(|| anyhow::anyhow!("interface {ifname} has no IP address (or does not exist)"))
}

/// The interface carrying `ip`, if it is listed (127.x aliases of `lo` are not).
pub(crate) fn interface_of(ip: IpAddr) -> Option<String> {
    interface_addresses()
        .ok()?
        .into_iter()
        .find(|(_, a)| *a == ip)
        .map(|(n, _)| n)
}

/// Default gateway of `ifname` from `/proc/net/route`, if it has one.
pub(crate) fn gateway(ifname: &str) -> Option<IpAddr> {
    let table = std::fs::read_to_string("/proc/net/route").ok()?;
    parse_route_gateway(&table, ifname)
}

/// Finds the default route (destination 0) of `ifname` in a `/proc/net/route` table.
fn parse_route_gateway(table: &str, ifname: &str) -> Option<IpAddr> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || f[0] != ifname || f[1] != "00000000" {
            return None;
        }
        // The kernel prints the address as a native-endian (little-endian here) hex u32.
        let raw = u32::from_str_radix(f[2], 16).ok()?;
        (raw != 0).then(|| IpAddr::V4(Ipv4Addr::from(raw.to_le_bytes())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_gateway_is_parsed_per_interface() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\n\
                     eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n\
                     eth1\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\n";
        assert_eq!(
            parse_route_gateway(table, "eth0"),
            Some("192.168.1.1".parse().unwrap())
        );
        assert_eq!(parse_route_gateway(table, "eth1"), None);
        assert_eq!(parse_route_gateway("garbage\nx y\n", "x"), None);
    }

    #[test]
    fn loopback_is_discovered() {
        assert_eq!(interface_ip("lo").unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            interface_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).as_deref(),
            Some("lo")
        );
        assert!(interface_ip("nonexistent0").is_err());
        assert!(!hostname().is_empty());
    }
}
