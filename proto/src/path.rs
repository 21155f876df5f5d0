//! Traced paths: the hops a 5-tuple takes through the fabric, as an agent's traceroute
//! on that very 5-tuple saw them. Uploaded in the optional path section of a batch.
//!
//! ```text
//! path section (after the records, present when header flag bit 0 is set)
//!  0  4  path_count
//! each path
//!  0 16  src ip        IPv6, or IPv4-mapped IPv6
//! 16 16  dst ip
//! 32  2  src_port
//! 34  2  dst_port
//! 36  1  hop_count     <= MAX_HOPS
//! 37  1  flags         bit0: the destination was reached; bit1: ACK direction; others zero
//! 38  2  reserved      zero
//! 40  8  traced_at_unix_ns
//! 48  16 * hop_count   hop addresses by TTL (1, 2, ...); `::` = no answer at that TTL
//! ```

use std::net::{IpAddr, Ipv6Addr};

/// Most hops one path may list (TTL 1..=MAX_HOPS).
pub const MAX_HOPS: usize = 16;
/// Most paths one batch may carry.
pub const MAX_PATHS: u32 = 4096;
/// Fixed part of one encoded path.
pub const PATH_FIXED_LEN: usize = 48;
/// Largest well-formed path section: the count and [`MAX_PATHS`] paths of [`MAX_HOPS`] hops.
pub const MAX_PATH_SECTION_BYTES: usize = 4 + MAX_PATHS as usize * (PATH_FIXED_LEN + 16 * MAX_HOPS);
const FLAG_REACHED: u8 = 0b01;
const FLAG_ACK: u8 = 0b10;

/// One traceroute of one 5-tuple (UDP, so the protocol is implied).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TracedPath {
    /// Source address of the traced 5-tuple.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Wall clock when the trace finished, ns since the Unix epoch.
    pub traced_at_unix_ns: u64,
    /// True when the destination was reached (the path is complete).
    pub reached: bool,
    /// True for the reverse path of ACKs, traced by the responder.
    pub ack_direction: bool,
    /// Router addresses by TTL; `None` where no router answered.
    pub hops: Vec<Option<IpAddr>>,
}

fn ip_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn ip_from(b: &[u8]) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    let v6 = Ipv6Addr::from(a);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// Appends the encoded path section to `out`.
pub fn encode_paths(out: &mut Vec<u8>, paths: &[TracedPath]) {
    out.extend_from_slice(&(paths.len() as u32).to_le_bytes());
    for p in paths {
        let hops = &p.hops[..p.hops.len().min(MAX_HOPS)];
        out.extend_from_slice(&ip_bytes(p.src));
        out.extend_from_slice(&ip_bytes(p.dst));
        out.extend_from_slice(&p.src_port.to_le_bytes());
        out.extend_from_slice(&p.dst_port.to_le_bytes());
        out.push(hops.len() as u8);
        out.push(
            if p.reached { FLAG_REACHED } else { 0 } | if p.ack_direction { FLAG_ACK } else { 0 },
        );
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&p.traced_at_unix_ns.to_le_bytes());
        for h in hops {
            out.extend_from_slice(&h.map_or([0u8; 16], ip_bytes));
        }
    }
}

/// Parses a whole path section; any inconsistency is an error naming the path.
pub fn decode_paths(b: &[u8]) -> Result<Vec<TracedPath>, String> {
    if b.len() < 4 {
        return Err("path section shorter than its count".into());
    }
    let count = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if count > MAX_PATHS {
        return Err(format!("{count} paths exceed the limit of {MAX_PATHS}"));
    }
    let mut paths = Vec::with_capacity(count.min(1024) as usize);
    let mut at = 4;
    for i in 0..count as usize {
        let fixed = b
            .get(at..at + PATH_FIXED_LEN)
            .ok_or_else(|| format!("path {i}: truncated"))?;
        let n = fixed[36] as usize;
        let flags = fixed[37];
        if n > MAX_HOPS {
            return Err(format!("path {i}: {n} hops exceed {MAX_HOPS}"));
        }
        if flags & !(FLAG_REACHED | FLAG_ACK) != 0 || fixed[38] != 0 || fixed[39] != 0 {
            return Err(format!("path {i}: unknown flags or reserved bytes"));
        }
        let hop_bytes = b
            .get(at + PATH_FIXED_LEN..at + PATH_FIXED_LEN + 16 * n)
            .ok_or_else(|| format!("path {i}: hops truncated"))?;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&fixed[40..48]);
        paths.push(TracedPath {
            src: ip_from(&fixed[0..16]),
            dst: ip_from(&fixed[16..32]),
            src_port: u16::from_le_bytes([fixed[32], fixed[33]]),
            dst_port: u16::from_le_bytes([fixed[34], fixed[35]]),
            traced_at_unix_ns: u64::from_le_bytes(ts),
            reached: flags & FLAG_REACHED != 0,
            ack_direction: flags & FLAG_ACK != 0,
            hops: hop_bytes
                .chunks_exact(16)
                .map(|h| {
                    if h.iter().all(|&x| x == 0) {
                        None
                    } else {
                        Some(ip_from(h))
                    }
                })
                .collect(),
        });
        at += PATH_FIXED_LEN + 16 * n;
    }
    if at != b.len() {
        return Err(format!(
            "{} trailing bytes after the path section",
            b.len() - at
        ));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(hops: usize) -> TracedPath {
        TracedPath {
            src: "198.18.0.1".parse().unwrap(),
            dst: "198.18.1.1".parse().unwrap(),
            src_port: 50_000,
            dst_port: 4792,
            traced_at_unix_ns: 42,
            reached: hops.is_multiple_of(2),
            ack_direction: hops.is_multiple_of(3),
            hops: (0..hops)
                .map(|i| {
                    if i == 1 {
                        None
                    } else {
                        Some(IpAddr::from([198, 19, 0, i as u8]))
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn round_trip_including_unanswered_hops_and_ipv6() {
        let mut v6 = path(3);
        v6.src = "2001:db8::1".parse().unwrap();
        let paths = vec![path(0), path(4), v6];
        let mut buf = Vec::new();
        encode_paths(&mut buf, &paths);
        assert_eq!(decode_paths(&buf).unwrap(), paths);
    }

    #[test]
    fn malformed_sections_are_errors() {
        let mut buf = Vec::new();
        encode_paths(&mut buf, &[path(2)]);
        assert!(decode_paths(&buf[..buf.len() - 1]).is_err());
        assert!(decode_paths(&buf[..3]).is_err());
        let mut extra = buf.clone();
        extra.push(0);
        assert!(decode_paths(&extra).is_err());
        let mut many = buf.clone();
        many[4 + 36] = 17;
        assert!(decode_paths(&many).is_err());
        let mut flags = buf.clone();
        flags[4 + 37] = 0x80;
        assert!(decode_paths(&flags).is_err());
        let mut count = buf;
        count[0..4].copy_from_slice(&(MAX_PATHS + 1).to_le_bytes());
        assert!(decode_paths(&count).is_err());
    }
}
