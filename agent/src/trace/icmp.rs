//! ICMP errors read without privileges: with `IP_RECVERR` a connected UDP socket gets the
//! ICMP errors for its 4-tuple on its error queue, as a `sock_extended_err` cmsg followed
//! by the offender address (`SO_EE_OFFENDER`), with the quoted UDP payload as the data.

use crate::sys::{ControlBuf, cmsgs, read_pod, sockaddr_from_bytes};
use rocemesh_proto::{Packet, PacketKind};
use std::mem::size_of;
use std::net::IpAddr;

const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMP_PORT_UNREACH: u8 = 3;
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_TIME_EXCEED: u8 = 3;
const ICMPV6_PORT_UNREACH: u8 = 4;

/// What an ICMP error says about the packet it quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// A router on the way dropped it because its TTL ran out: that router is a hop.
    TimeExceeded,
    /// The destination host answered: nobody listens on the port (agent not running).
    PortUnreachable,
    /// A router could not forward it (no route, administratively prohibited, ...).
    Unreachable,
}

/// One ICMP error read from an error queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IcmpAnswer {
    /// The address of the node that sent the error (`SO_EE_OFFENDER`).
    pub from: IpAddr,
    /// What kind of error.
    pub kind: IcmpKind,
    /// The seq of the quoted TRACE packet when the error quoted all 64 bytes of it
    /// (Linux routers do; RFC 792 only promises 8 bytes of UDP header).
    pub quoted_seq: Option<u32>,
}

/// Parses one error-queue message: its cmsgs (`controllen` valid bytes of `control`) and
/// the quoted payload. Anything that is not an ICMP error with a usable offender (TX
/// stamps, local errors, garbage) is `None`.
pub(crate) fn parse_icmp_error(
    control: &ControlBuf,
    controllen: usize,
    quoted: &[u8],
) -> Option<IcmpAnswer> {
    let (origin, data) =
        cmsgs(control, controllen).find_map(|(level, ty, data)| match (level, ty) {
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR) => {
                Some((level, data))
            }
            _ => None,
        })?;
    let ee: libc::sock_extended_err = read_pod(data)?;
    let kind = match (origin, ee.ee_origin, ee.ee_type, ee.ee_code) {
        (_, libc::SO_EE_ORIGIN_ICMP, ICMP_TIME_EXCEEDED, _)
        | (_, libc::SO_EE_ORIGIN_ICMP6, ICMPV6_TIME_EXCEED, _) => IcmpKind::TimeExceeded,
        (_, libc::SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH)
        | (_, libc::SO_EE_ORIGIN_ICMP6, ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH) => {
            IcmpKind::PortUnreachable
        }
        (_, libc::SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH, _)
        | (_, libc::SO_EE_ORIGIN_ICMP6, ICMPV6_DEST_UNREACH, _) => IcmpKind::Unreachable,
        _ => return None,
    };
    // SO_EE_OFFENDER: the sockaddr right after the extended error.
    let offender = data.get(size_of::<libc::sock_extended_err>()..)?;
    let from = sockaddr_from_bytes(offender)?.ip();
    if from.is_unspecified() {
        return None;
    }
    let quoted_seq = Packet::decode(quoted)
        .ok()
        .filter(|p| p.kind == PacketKind::Trace)
        .map(|p| p.seq);
    Some(IcmpAnswer {
        from,
        kind,
        quoted_seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;
    use rocemesh_proto::ProbeClass;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Lays out one IP_RECVERR cmsg the way the kernel does: extended error + offender.
    fn errqueue_msg(
        level: i32,
        ty: i32,
        origin: u8,
        icmp_type: u8,
        code: u8,
        offender: &[u8],
    ) -> (ControlBuf, usize) {
        let ee = libc::sock_extended_err {
            ee_errno: libc::EHOSTUNREACH as u32,
            ee_origin: origin,
            ee_type: icmp_type,
            ee_code: code,
            ee_pad: 0,
            ee_info: 0,
            ee_data: 0,
        };
        let data: Vec<u8> = [sys::pod_bytes(&ee), offender].concat();
        let mut buf = ControlBuf::default();
        let mut len = 0;
        sys::put_cmsg(&mut buf, &mut len, level, ty, &data);
        (buf, len)
    }

    fn sockaddr_v4(ip: Ipv4Addr) -> Vec<u8> {
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        sys::pod_bytes(&sa).to_vec()
    }

    fn sockaddr_v6(ip: Ipv6Addr) -> Vec<u8> {
        let sa = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as u16,
            sin6_port: 0,
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr {
                s6_addr: ip.octets(),
            },
            sin6_scope_id: 0,
        };
        sys::pod_bytes(&sa).to_vec()
    }

    fn trace_payload(seq: u32) -> [u8; 64] {
        Packet::probe(ProbeClass::TorMesh, seq, 0, 0, 0, 0, 0)
            .trace()
            .encode()
    }

    #[test]
    fn time_exceeded_names_the_router_and_the_quoted_ttl() {
        let router = Ipv4Addr::new(198, 18, 0, 2);
        let (buf, len) = errqueue_msg(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::SO_EE_ORIGIN_ICMP,
            11,
            0,
            &sockaddr_v4(router),
        );
        let a = parse_icmp_error(&buf, len, &trace_payload(0x0102_0303)).unwrap();
        assert_eq!(
            a,
            IcmpAnswer {
                from: router.into(),
                kind: IcmpKind::TimeExceeded,
                quoted_seq: Some(0x0102_0303)
            }
        );
        // A router quoting only 8 bytes of UDP header: no payload, TTL unknown.
        assert_eq!(parse_icmp_error(&buf, len, &[]).unwrap().quoted_seq, None);
        // A quoted PROBE (not ours to trace) gives no seq either.
        let probe = Packet::probe(ProbeClass::TorMesh, 9, 0, 0, 0, 0, 0).encode();
        assert_eq!(
            parse_icmp_error(&buf, len, &probe).unwrap().quoted_seq,
            None
        );
    }

    #[test]
    fn unreachables_and_ipv6() {
        let dst = Ipv4Addr::new(198, 18, 1, 1);
        let (buf, len) = errqueue_msg(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::SO_EE_ORIGIN_ICMP,
            3,
            3,
            &sockaddr_v4(dst),
        );
        assert_eq!(
            parse_icmp_error(&buf, len, &[]).unwrap().kind,
            IcmpKind::PortUnreachable
        );
        let (buf, len) = errqueue_msg(
            libc::SOL_IP,
            libc::IP_RECVERR,
            libc::SO_EE_ORIGIN_ICMP,
            3,
            1,
            &sockaddr_v4(dst),
        );
        assert_eq!(
            parse_icmp_error(&buf, len, &[]).unwrap().kind,
            IcmpKind::Unreachable
        );
        let r6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let (buf, len) = errqueue_msg(
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            libc::SO_EE_ORIGIN_ICMP6,
            3,
            0,
            &sockaddr_v6(r6),
        );
        let a = parse_icmp_error(&buf, len, &trace_payload(7)).unwrap();
        assert_eq!(
            (a.from, a.kind, a.quoted_seq),
            (r6.into(), IcmpKind::TimeExceeded, Some(7))
        );
        let (buf, len) = errqueue_msg(
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            libc::SO_EE_ORIGIN_ICMP6,
            1,
            4,
            &sockaddr_v6(r6),
        );
        assert_eq!(
            parse_icmp_error(&buf, len, &[]).unwrap().kind,
            IcmpKind::PortUnreachable
        );
    }

    #[test]
    fn other_errors_and_garbage_are_ignored() {
        let router = sockaddr_v4(Ipv4Addr::new(198, 18, 0, 2));
        // A TX timestamp, a local error, an ICMP redirect: not hops.
        for (origin, ty) in [
            (libc::SO_EE_ORIGIN_TIMESTAMPING, 0),
            (libc::SO_EE_ORIGIN_LOCAL, 0),
            (libc::SO_EE_ORIGIN_ICMP, 5),
        ] {
            let (buf, len) = errqueue_msg(libc::SOL_IP, libc::IP_RECVERR, origin, ty, 0, &router);
            assert_eq!(parse_icmp_error(&buf, len, &[]), None);
        }
        // Offender missing, truncated, unknown family or unspecified.
        for offender in [
            vec![],
            router[..6].to_vec(),
            vec![0xff; 16],
            sockaddr_v4(Ipv4Addr::UNSPECIFIED),
        ] {
            let (buf, len) = errqueue_msg(
                libc::SOL_IP,
                libc::IP_RECVERR,
                libc::SO_EE_ORIGIN_ICMP,
                11,
                0,
                &offender,
            );
            assert_eq!(parse_icmp_error(&buf, len, &[]), None, "{offender:?}");
        }
        // Control buffers of pseudo-random bytes and lengths never panic.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..2_000 {
            let mut buf = ControlBuf::default();
            for b in buf.0.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if round % 2 == 0 {
                // Plausible header, garbage body.
                let hdr = libc::cmsghdr {
                    cmsg_len: (x % 300) as _,
                    cmsg_level: libc::SOL_IP,
                    cmsg_type: libc::IP_RECVERR,
                };
                let hdr = sys::pod_bytes(&hdr);
                buf.0[..hdr.len()].copy_from_slice(hdr);
            }
            let _ = parse_icmp_error(&buf, (x % 300) as usize, &buf.0[..(x % 100) as usize]);
        }
    }
}
