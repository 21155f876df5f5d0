//! IP prefixes (`10.0.0.0/8`, `fd00::/8`): where RNIC addresses may lie, so a registration
//! cannot make every agent probe an address outside the fabric.

use serde::{Deserialize, Deserializer};
use std::net::IpAddr;
use std::str::FromStr;

/// An address prefix: the addresses whose first `len` bits equal `addr`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// `0.0.0.0/0` and `::/0`: every address, loopback included (the fabric of a
    /// one-machine deployment, whose RNICs are loopback or any local addresses).
    pub fn any() -> Vec<Self> {
        vec![
            Self {
                addr: IpAddr::from([0, 0, 0, 0]),
                len: 0,
            },
            Self {
                addr: std::net::Ipv6Addr::UNSPECIFIED.into(),
                len: 0,
            },
        ]
    }

    /// Whether `ip` lies in this prefix (an IPv4 address never lies in an IPv6 prefix).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v) => u128::from(u32::from(v)) << 96,
                IpAddr::V6(v) => u128::from(v),
            }
        };
        if self.addr.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let mask = if self.len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.len))
        };
        bits(self.addr) & mask == bits(ip) & mask
    }
}

impl std::fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for IpPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("prefix {s:?} is not <address>/<length>"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("prefix {s:?}: {addr:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("prefix {s:?}: length must be 0..={max}"))?;
        let prefix = Self { addr, len };
        // Host bits set (`10.0.0.1/8`) usually mean a typo: refuse rather than guess.
        let canonical = Self {
            addr: prefix.network(),
            len,
        };
        if canonical != prefix {
            return Err(format!(
                "prefix {s:?} has host bits set (did you mean {canonical}?)"
            ));
        }
        Ok(prefix)
    }
}

impl IpPrefix {
    fn network(&self) -> IpAddr {
        let keep = |bits: u32, width: u32| -> u128 {
            if bits == 0 {
                0
            } else {
                u128::MAX << (width - bits)
            }
        };
        match self.addr {
            IpAddr::V4(v) => {
                let m = keep(u32::from(self.len), 32) as u32;
                IpAddr::from((u32::from(v) & m).to_be_bytes())
            }
            IpAddr::V6(v) => {
                IpAddr::from((u128::from(v) & keep(u32::from(self.len), 128)).to_be_bytes())
            }
        }
    }
}

impl<'de> Deserialize<'de> for IpPrefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Whether `ip` may be an RNIC address under `prefixes`: inside one of them, or, with
/// none configured, any address but loopback and link-local (which name no fabric port).
pub fn rnic_address_allowed(prefixes: &[IpPrefix], ip: IpAddr) -> Result<(), String> {
    if prefixes.is_empty() {
        let link_local = match ip {
            IpAddr::V4(v) => v.is_link_local(),
            IpAddr::V6(v) => v.is_unicast_link_local(),
        };
        if ip.is_loopback() || link_local {
            return Err(format!(
                "ip {ip} is a loopback or link-local address, which is no fabric address (a loopback fabric lists 127.0.0.0/8 in [controller] rnic_prefixes)"
            ));
        }
        return Ok(());
    }
    if prefixes.iter().any(|p| p.contains(ip)) {
        return Ok(());
    }
    let list: Vec<String> = prefixes.iter().map(ToString::to_string).collect();
    Err(format!(
        "ip {ip} lies outside the fabric prefixes [{}] ([controller] rnic_prefixes)",
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IpPrefix {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_parse_contain_and_refuse_typos() {
        assert!(p("10.0.0.0/8").contains("10.255.1.2".parse().unwrap()));
        assert!(!p("10.0.0.0/8").contains("11.0.0.1".parse().unwrap()));
        assert!(!p("10.0.0.0/8").contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(p("fd00::/8").contains("fd12::1".parse().unwrap()));
        assert!(p("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(p("10.1.2.3/32").contains("10.1.2.3".parse().unwrap()));
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0.1/8", "fd00::/129"] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad}");
        }
        assert!(
            "10.0.0.1/8"
                .parse::<IpPrefix>()
                .unwrap_err()
                .contains("10.0.0.0/8")
        );
    }

    #[test]
    fn default_rule_refuses_loopback_and_link_local_and_lists_are_strict() {
        for bad in ["127.0.0.1", "::1", "169.254.1.1", "fe80::1"] {
            assert!(
                rnic_address_allowed(&[], bad.parse().unwrap()).is_err(),
                "{bad}"
            );
        }
        assert!(rnic_address_allowed(&[], "10.0.0.1".parse().unwrap()).is_ok());
        let any = IpPrefix::any();
        assert!(rnic_address_allowed(&any, "127.0.0.5".parse().unwrap()).is_ok());
        assert!(rnic_address_allowed(&any, "::1".parse().unwrap()).is_ok());
        let lo = vec![p("127.0.0.0/8")];
        let err = rnic_address_allowed(&lo, "10.0.0.1".parse().unwrap()).unwrap_err();
        assert!(err.contains("127.0.0.0/8"), "{err}");
    }
}
