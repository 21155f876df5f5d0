//! The 40-byte Global Routing Header that precedes every UD receive.
//!
//! A UD receive buffer always starts with 40 bytes of `struct ibv_grh`. For RoCEv2
//! over IPv6 they hold the real IPv6 header fields. For RoCEv2 over IPv4 the NIC puts
//! the 20-byte IPv4 header in the *last* 20 bytes and leaves the first 20 undefined;
//! the two are told apart exactly as rdma-core's `ibv_init_ah_from_wc` does (IPv6
//! version nibble, else an IPv4 header with IHL 5 and a valid checksum).

use crate::gid::Gid;
use std::net::Ipv4Addr;
use thiserror::Error;

/// Size of `struct ibv_grh`: the bytes before the payload of every UD receive.
pub const GRH_LEN: usize = 40;
/// Where the IPv4 header sits inside the GRH area for RoCEv2 over IPv4.
const IPV4_OFFSET: usize = 20;
const IPV4_HEADER_LEN: usize = 20;

/// The network header a UD datagram arrived with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    /// RoCEv2 over IPv4 (GIDs are IPv4-mapped, the flow label is not carried: 0).
    V4,
    /// RoCEv2 over IPv6 (or RoCEv1 / InfiniBand GRH).
    V6,
}

/// The fields of a received GRH the probe protocol needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// Which header the NIC wrote.
    pub version: IpVersion,
    /// Sender's GID (IPv4-mapped for IPv4).
    pub sgid: Gid,
    /// Destination GID (ours).
    pub dgid: Gid,
    /// Traffic class (IPv4: the TOS byte).
    pub traffic_class: u8,
    /// 20-bit flow label (always 0 over IPv4: IPv4 has none).
    pub flow_label: u32,
    /// Hop limit (IPv4: TTL) as received.
    pub hop_limit: u8,
}

/// Why a GRH could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrhError {
    /// Fewer than [`GRH_LEN`] bytes.
    #[error("GRH truncated: {0} bytes, expected {GRH_LEN}")]
    Truncated(usize),
    /// Neither an IPv6 header nor an IPv4 header in the GRH area.
    #[error("GRH holds neither an IPv6 nor an IPv4 header (first byte {0:#04x})")]
    UnknownVersion(u8),
}

impl Grh {
    /// Parses the first [`GRH_LEN`] bytes of a UD receive buffer.
    pub fn parse(buf: &[u8]) -> Result<Self, GrhError> {
        let grh: &[u8; GRH_LEN] = buf
            .get(..GRH_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(GrhError::Truncated(buf.len()))?;
        let ipv4 = &grh[IPV4_OFFSET..];
        let ip6_version = grh[0] >> 4;
        let ip4_version = ipv4[0] >> 4;
        let ip4_ihl = ipv4[0] & 0x0F;
        let is_v4 = if ip6_version != 6 {
            if ip4_version != 4 {
                return Err(GrhError::UnknownVersion(grh[0]));
            }
            true
        } else {
            // A version-6 nibble may be garbage in front of a real IPv4 header:
            // only a header with IHL 5 and a valid checksum is believed.
            ip4_ihl == 5 && ipv4_checksum_ok(ipv4)
        };
        Ok(if is_v4 {
            Self::parse_v4(ipv4)
        } else {
            Self::parse_v6(grh)
        })
    }

    fn parse_v6(grh: &[u8; GRH_LEN]) -> Self {
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        Grh {
            version: IpVersion::V6,
            traffic_class: ((vtf >> 20) & 0xFF) as u8,
            flow_label: vtf & 0xF_FFFF,
            hop_limit: grh[7],
            sgid: Gid(bytes16(&grh[8..24])),
            dgid: Gid(bytes16(&grh[24..40])),
        }
    }

    fn parse_v4(ip: &[u8]) -> Self {
        let addr = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
        Grh {
            version: IpVersion::V4,
            traffic_class: ip[1],
            flow_label: 0,
            hop_limit: ip[8],
            sgid: Gid::from(addr(12)),
            dgid: Gid::from(addr(16)),
        }
    }
}

fn bytes16(b: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(b);
    out
}

/// Whether the 20-byte IPv4 header's checksum field matches its contents.
fn ipv4_checksum_ok(header: &[u8]) -> bool {
    ipv4_header_checksum(&header[..IPV4_HEADER_LEN]) == u16::from_be_bytes([header[10], header[11]])
}

/// The IPv4 header checksum of `header` computed with its checksum field taken as zero.
fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A GRH area as a NIC writes it for RoCEv2 over IPv4 (first 20 bytes `junk`).
    pub(crate) fn ipv4_grh(
        junk: u8,
        tos: u8,
        ttl: u8,
        src: [u8; 4],
        dst: [u8; 4],
    ) -> [u8; GRH_LEN] {
        let mut g = [junk; GRH_LEN];
        let ip = &mut g[IPV4_OFFSET..];
        ip[..12].copy_from_slice(&[0x45, tos, 0, 84, 0x12, 0x34, 0x40, 0, ttl, 17, 0, 0]);
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let csum = ipv4_header_checksum(ip);
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        g
    }

    #[test]
    fn ipv4_header_in_the_last_20_bytes_gives_mapped_gids() {
        let g = ipv4_grh(0, 0x68, 63, [10, 0, 0, 1], [10, 0, 0, 2]);
        let grh = Grh::parse(&g).unwrap();
        assert_eq!(grh.version, IpVersion::V4);
        assert_eq!(grh.sgid.to_ip().to_string(), "10.0.0.1");
        assert_eq!(grh.dgid.to_ip().to_string(), "10.0.0.2");
        assert_eq!(
            (grh.traffic_class, grh.hop_limit, grh.flow_label),
            (0x68, 63, 0)
        );
    }

    #[test]
    fn ipv4_is_found_even_behind_a_version_6_nibble_of_junk() {
        let g = ipv4_grh(0x60, 0, 64, [192, 168, 1, 1], [192, 168, 1, 2]);
        assert_eq!(Grh::parse(&g).unwrap().version, IpVersion::V4);
    }

    #[test]
    fn version_6_junk_with_a_bad_ipv4_checksum_is_ipv6() {
        let mut g = ipv4_grh(0x60, 0, 64, [192, 168, 1, 1], [192, 168, 1, 2]);
        g[IPV4_OFFSET + 10] ^= 0xFF;
        assert_eq!(Grh::parse(&g).unwrap().version, IpVersion::V6);
    }

    #[test]
    fn ipv6_fields_are_read_from_their_offsets() {
        let mut g = [0u8; GRH_LEN];
        let vtf: u32 = (6 << 28) | (0xA5 << 20) | 0xB_CDEF;
        g[..4].copy_from_slice(&vtf.to_be_bytes());
        g[4..6].copy_from_slice(&64u16.to_be_bytes());
        g[6] = 0x11;
        g[7] = 9;
        g[8..24].copy_from_slice(&Gid::from_ip("fd00::1".parse().unwrap()).0);
        g[24..40].copy_from_slice(&Gid::from_ip("fd00::2".parse().unwrap()).0);
        let grh = Grh::parse(&g).unwrap();
        assert_eq!(grh.version, IpVersion::V6);
        assert_eq!(
            (grh.traffic_class, grh.flow_label, grh.hop_limit),
            (0xA5, 0xB_CDEF, 9)
        );
        assert_eq!(grh.sgid.to_string(), "fd00::1");
        assert_eq!(grh.dgid.to_string(), "fd00::2");
    }

    #[test]
    fn short_or_unknown_headers_are_errors() {
        assert_eq!(Grh::parse(&[0x60; 39]), Err(GrhError::Truncated(39)));
        assert_eq!(
            Grh::parse(&[0u8; GRH_LEN]),
            Err(GrhError::UnknownVersion(0))
        );
    }
}
