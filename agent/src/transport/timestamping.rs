//! `SO_TIMESTAMPING` plumbing: enabling it, and reading RX stamps (`SCM_TIMESTAMPING`
//! cmsg) and TX stamps (`MSG_ERRQUEUE` with `sock_extended_err`) from `recvmsg`.

use super::Stamp;
use crate::sys::{self, RawReceived, cmsgs, read_pod, recv_raw, setsockopt};
use rocemesh_proto::TimestampSource;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

pub(crate) use crate::sys::ControlBuf;

/// Every stamp we may use: TX and RX, software and raw hardware, with an ID per send
/// and no payload copy on the error queue.
pub(crate) const TIMESTAMPING_FLAGS: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_TX_HARDWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_HARDWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_RAW_HARDWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// `ee_info` of a send (not scheduler/ACK) timestamp (linux/errqueue.h).
const SCM_TSTAMP_SND: u32 = 0;

/// Turns `SO_TIMESTAMPING` on for a socket (resets its OPT_ID counter to 0).
pub(crate) fn enable(fd: RawFd) -> io::Result<()> {
    let flags = TIMESTAMPING_FLAGS as libc::c_int;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
}

/// Asks the NIC behind `ifname` to timestamp every packet in hardware (`SIOCSHWTSTAMP`).
pub(crate) fn enable_hardware(fd: RawFd, ifname: &str) -> io::Result<()> {
    let cfg = libc::hwtstamp_config {
        flags: 0,
        tx_type: libc::HWTSTAMP_TX_ON as libc::c_int,
        rx_filter: libc::HWTSTAMP_FILTER_ALL as libc::c_int,
    };
    sys::set_hardware_timestamping(fd, ifname, cfg)
}

/// What the ancillary data of one message said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ControlInfo {
    /// The timestamp (raw hardware if non-zero, else software).
    pub stamp: Option<Stamp>,
    /// For error-queue messages: the OPT_ID of the send this TX stamp belongs to.
    pub tx_id: Option<u32>,
}

/// Picks the stamp out of `scm_timestamping.ts`: ts[2] raw hardware, else ts[0] software.
fn pick_stamp(ts: &[libc::timespec; 3]) -> Option<Stamp> {
    let ns = |t: &libc::timespec| {
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
    };
    if ts[2].tv_sec > 0 || ts[2].tv_nsec > 0 {
        Some(Stamp {
            ns: ns(&ts[2]),
            source: TimestampSource::Hardware,
        })
    } else if ts[0].tv_sec > 0 || ts[0].tv_nsec > 0 {
        Some(Stamp {
            ns: ns(&ts[0]),
            source: TimestampSource::Software,
        })
    } else {
        None
    }
}

/// Walks the cmsgs of a received message (`controllen` bytes of `control` are valid).
pub(crate) fn parse_control(control: &ControlBuf, controllen: usize) -> ControlInfo {
    let mut info = ControlInfo::default();
    for (level, ty, data) in cmsgs(control, controllen) {
        match (level, ty) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) => {
                if let Some(ts) = read_pod::<[libc::timespec; 3]>(data) {
                    info.stamp = pick_stamp(&ts);
                }
            }
            (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR) => {
                if let Some(ee) = read_pod::<libc::sock_extended_err>(data)
                    && ee.ee_errno == libc::ENOMSG as u32
                    && ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    && ee.ee_info == SCM_TSTAMP_SND
                {
                    info.tx_id = Some(ee.ee_data);
                }
            }
            _ => {}
        }
    }
    info
}

/// One `recvmsg` result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// Real datagram length (`MSG_TRUNC`), 0 for error-queue messages.
    pub len: usize,
    /// Sender, for normal datagrams.
    pub peer: Option<SocketAddr>,
    /// Ancillary data.
    pub control: ControlInfo,
}

/// Non-blocking `recvmsg` into `buf`; `errqueue` reads the socket's error queue instead.
pub(crate) fn recv(
    fd: RawFd,
    buf: &mut [u8],
    errqueue: bool,
    control: &mut ControlBuf,
) -> io::Result<Received> {
    let raw = recv_raw(fd, buf, errqueue, control)?;
    Ok(Received::parse(raw, control))
}

impl Received {
    /// What `recvmsg` said, with the cmsgs it left in `control` parsed.
    pub(crate) fn parse(raw: RawReceived, control: &ControlBuf) -> Self {
        Self {
            len: raw.len,
            peer: raw.peer,
            control: parse_control(control, raw.controllen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends one cmsg the way the kernel lays it out.
    fn put_cmsg<T: sys::Pod>(
        buf: &mut ControlBuf,
        used: &mut usize,
        level: i32,
        ty: i32,
        value: &T,
    ) {
        sys::put_cmsg(buf, used, level, ty, sys::pod_bytes(value));
    }

    fn ts(sec: i64, nsec: i64) -> libc::timespec {
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        }
    }

    #[test]
    fn rx_stamp_prefers_raw_hardware() {
        let mut buf = ControlBuf::default();
        let mut used = 0;
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPING,
            &[ts(5, 7), ts(0, 0), ts(9, 11)],
        );
        let info = parse_control(&buf, used);
        assert_eq!(
            info.stamp,
            Some(Stamp {
                ns: 9_000_000_011,
                source: TimestampSource::Hardware
            })
        );
        assert_eq!(info.tx_id, None);

        let mut buf = ControlBuf::default();
        let mut used = 0;
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPING,
            &[ts(5, 7), ts(0, 0), ts(0, 0)],
        );
        assert_eq!(
            parse_control(&buf, used).stamp,
            Some(Stamp {
                ns: 5_000_000_007,
                source: TimestampSource::Software
            })
        );

        let mut buf = ControlBuf::default();
        let mut used = 0;
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPING,
            &[ts(0, 0), ts(0, 0), ts(0, 0)],
        );
        assert_eq!(parse_control(&buf, used).stamp, None);
    }

    fn ee(origin: u8, info: u32, data: u32) -> libc::sock_extended_err {
        libc::sock_extended_err {
            ee_errno: libc::ENOMSG as u32,
            ee_origin: origin,
            ee_type: 0,
            ee_code: 0,
            ee_pad: 0,
            ee_info: info,
            ee_data: data,
        }
    }

    #[test]
    fn errqueue_tx_stamp_carries_the_opt_id() {
        for (level, ty) in [
            (libc::SOL_IP, libc::IP_RECVERR),
            (libc::SOL_IPV6, libc::IPV6_RECVERR),
        ] {
            let mut buf = ControlBuf::default();
            let mut used = 0;
            put_cmsg(
                &mut buf,
                &mut used,
                libc::SOL_SOCKET,
                libc::SCM_TIMESTAMPING,
                &[ts(1, 2), ts(0, 0), ts(0, 0)],
            );
            put_cmsg(
                &mut buf,
                &mut used,
                level,
                ty,
                &ee(libc::SO_EE_ORIGIN_TIMESTAMPING, 0, 41),
            );
            let info = parse_control(&buf, used);
            assert_eq!(info.tx_id, Some(41));
            assert_eq!(info.stamp.map(|s| s.ns), Some(1_000_000_002));
        }
        // A scheduler stamp or an ICMP error is not a send completion.
        let mut buf = ControlBuf::default();
        let mut used = 0;
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_IP,
            libc::IP_RECVERR,
            &ee(libc::SO_EE_ORIGIN_TIMESTAMPING, 1, 3),
        );
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_IP,
            libc::IP_RECVERR,
            &ee(libc::SO_EE_ORIGIN_ICMP, 0, 4),
        );
        assert_eq!(parse_control(&buf, used).tx_id, None);
    }

    #[test]
    fn short_or_garbage_control_is_ignored() {
        let mut buf = ControlBuf::default();
        let mut used = 0;
        put_cmsg(
            &mut buf,
            &mut used,
            libc::SOL_SOCKET,
            libc::SCM_TIMESTAMPING,
            &7u32,
        );
        assert_eq!(parse_control(&buf, used), ControlInfo::default());
        let mut junk = ControlBuf::default();
        junk.0
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i * 37) as u8);
        let _ = parse_control(&junk, junk.0.len());
        assert_eq!(parse_control(&junk, 3), ControlInfo::default());
    }
}
