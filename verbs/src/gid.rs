//! The 128-bit RoCE GID and its relation to the RNIC's IP address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A GID (`union ibv_gid`): for RoCEv2 it is the RNIC's IPv6 address, or its IPv4
/// address in IPv4-mapped form (`::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID: an unused GID table slot.
    pub const ZERO: Gid = Gid([0; 16]);

    /// The RoCEv2 GID of an IP address (IPv4-mapped for IPv4).
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for: IPv4 when IPv4-mapped, IPv6 otherwise.
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// Whether this GID is the IPv4-mapped form of an IPv4 address.
    pub fn is_ipv4_mapped(self) -> bool {
        Ipv6Addr::from(self.0).to_ipv4_mapped().is_some()
    }

    /// Whether this is an unused (all-zero) GID table slot.
    pub fn is_zero(self) -> bool {
        self == Self::ZERO
    }

    /// Parses the sysfs spelling `fe80:0000:0000:0000:0a00:27ff:fe00:0001`
    /// (eight 4-hex-digit groups); `None` for anything else.
    pub fn parse_sysfs(text: &str) -> Option<Self> {
        let groups: Vec<&str> = text.trim().split(':').collect();
        if groups.len() != 8 {
            return None;
        }
        let mut raw = [0u8; 16];
        for (i, group) in groups.iter().enumerate() {
            if group.len() != 4 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let v = u16::from_str_radix(group, 16).ok()?;
            raw[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
        Some(Gid(raw))
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Self {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_maps_to_ffff_prefix_and_back() {
        let gid = Gid::from_ip("10.1.2.3".parse().unwrap());
        assert_eq!(
            gid.0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        assert!(gid.is_ipv4_mapped());
        assert_eq!(gid.to_ip(), "10.1.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv6_stays_ipv6() {
        let ip: IpAddr = "fd00::42".parse().unwrap();
        let gid = Gid::from_ip(ip);
        assert!(!gid.is_ipv4_mapped());
        assert_eq!(gid.to_ip(), ip);
        assert_eq!(gid.to_string(), "fd00::42");
    }

    #[test]
    fn sysfs_spelling_parses_and_rejects_garbage() {
        let gid = Gid::parse_sysfs("0000:0000:0000:0000:0000:ffff:0a01:0203\n").unwrap();
        assert_eq!(gid.to_ip(), "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(
            Gid::parse_sysfs("0000:0000:0000:0000:0000:0000:0000:0000"),
            Some(Gid::ZERO)
        );
        for bad in [
            "",
            "fe80::1",
            "0000:0000:0000:0000:0000:ffff:0a01",
            "000g:0000:0000:0000:0000:ffff:0a01:0203",
            "00000:000:0000:0000:0000:ffff:0a01:0203",
        ] {
            assert_eq!(Gid::parse_sysfs(bad), None, "{bad:?}");
        }
    }
}
