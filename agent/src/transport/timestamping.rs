//! `SO_TIMESTAMPING` plumbing: enabling it, and reading RX stamps (`SCM_TIMESTAMPING`
//! cmsg) and TX stamps (`MSG_ERRQUEUE` with `sock_extended_err`) from `recvmsg`.

use super::Stamp;
use rocemesh_proto::TimestampSource;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// Every stamp we may use: TX and RX, software and raw hardware, with an ID per send
/// and no payload copy on the error queue.
pub const TIMESTAMPING_FLAGS: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_TX_HARDWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_HARDWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_RAW_HARDWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// `ee_info` of a send (not scheduler/ACK) timestamp (linux/errqueue.h).
const SCM_TSTAMP_SND: u32 = 0;

/// Room for the cmsgs one `recvmsg` can carry here (timestamping + extended error).
const CONTROL_LEN: usize = 256;

/// A cmsg buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
pub struct ControlBuf(pub [u8; CONTROL_LEN]);

impl Default for ControlBuf {
    fn default() -> Self {
        Self([0; CONTROL_LEN])
    }
}

/// Turns `SO_TIMESTAMPING` on for a socket (resets its OPT_ID counter to 0).
pub fn enable(fd: RawFd) -> io::Result<()> {
    let flags = TIMESTAMPING_FLAGS as libc::c_int;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
}

/// Sets an integer-like socket option.
pub fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a valid T for its size during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the NIC behind `ifname` to timestamp every packet in hardware (`SIOCSHWTSTAMP`).
pub fn enable_hardware(fd: RawFd, ifname: &str) -> io::Result<()> {
    let mut cfg = libc::hwtstamp_config {
        flags: 0,
        tx_type: libc::HWTSTAMP_TX_ON as libc::c_int,
        rx_filter: libc::HWTSTAMP_FILTER_ALL as libc::c_int,
    };
    // SAFETY: ifreq is plain old data; zero is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut cfg as *mut libc::hwtstamp_config).cast();
    // SAFETY: req is a valid ifreq pointing at cfg, both alive for the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCSHWTSTAMP as _, &mut req) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What the ancillary data of one message said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControlInfo {
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

/// The cmsgs of a received message as (level, type, data) with the data clipped to the
/// bytes the buffer really holds: a lying `cmsg_len` can never make a read overrun.
pub struct Cmsgs<'a> {
    buf: &'a [u8],
    at: usize,
}

/// Iterates over the first `controllen` bytes of `control`.
pub fn cmsgs(control: &ControlBuf, controllen: usize) -> Cmsgs<'_> {
    Cmsgs {
        buf: &control.0[..controllen.min(CONTROL_LEN)],
        at: 0,
    }
}

impl<'a> Iterator for Cmsgs<'a> {
    type Item = (libc::c_int, libc::c_int, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: CMSG_LEN is pure arithmetic.
        let hdr_len = unsafe { libc::CMSG_LEN(0) } as usize;
        let rest = self.buf.get(self.at..)?;
        if rest.len() < size_of::<libc::cmsghdr>() {
            return None;
        }
        // SAFETY: at least size_of::<cmsghdr>() bytes are readable; read_unaligned needs no alignment.
        let hdr: libc::cmsghdr = unsafe { std::ptr::read_unaligned(rest.as_ptr().cast()) };
        let len = hdr.cmsg_len as usize;
        if len < hdr_len {
            return None;
        }
        let data = &rest[hdr_len.min(rest.len())..len.min(rest.len())];
        // Next header: the length rounded up to the cmsg alignment, `size_t` on Linux (CMSG_NXTHDR).
        let step = len.next_multiple_of(size_of::<usize>());
        self.at = self.at.saturating_add(step);
        Some((hdr.cmsg_level, hdr.cmsg_type, data))
    }
}

/// Reads a plain-old-data `T` from the start of `data`, if it is long enough.
pub fn read_pod<T: Copy>(data: &[u8]) -> Option<T> {
    // SAFETY: the length is checked; callers only use integer/struct types valid for any bits.
    (data.len() >= size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) })
}

/// Walks the cmsgs of a received message (`controllen` bytes of `control` are valid).
pub fn parse_control(control: &ControlBuf, controllen: usize) -> ControlInfo {
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
pub struct Received {
    /// Real datagram length (`MSG_TRUNC`), 0 for error-queue messages.
    pub len: usize,
    /// Sender, for normal datagrams.
    pub peer: Option<SocketAddr>,
    /// Ancillary data.
    pub control: ControlInfo,
}

/// Non-blocking `recvmsg` into `buf`; `errqueue` reads the socket's error queue instead.
pub fn recv(
    fd: RawFd,
    buf: &mut [u8],
    errqueue: bool,
    control: &mut ControlBuf,
) -> io::Result<Received> {
    let raw = recv_raw(fd, buf, errqueue, control)?;
    Ok(Received {
        len: raw.len,
        peer: raw.peer,
        control: parse_control(control, raw.controllen),
    })
}

/// Sends `payload` to `dest` with a per-message `SO_TIMESTAMPING` cmsg clearing the TX
/// flags: no stamp is generated and no `OPT_ID` consumed for this send.
pub fn send_without_stamp(fd: RawFd, payload: &[u8], dest: &socket2::SockAddr) -> io::Result<()> {
    let mut control = ControlBuf::default();
    // SAFETY: every pointer refers to a live buffer of the stated length for the call; the
    // cmsg is written inside `control` (CMSG_SPACE(4) <= CONTROL_LEN).
    unsafe {
        let mut iov = libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        };
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = dest.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = dest.len();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<u32>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SO_TIMESTAMPING;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), 0);
        if libc::sendmsg(fd, &msg, 0) < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// What `recvmsg` returned, with the ancillary data left unparsed in the caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct RawReceived {
    /// Real datagram length (`MSG_TRUNC`; for error-queue messages the returned payload length).
    pub len: usize,
    /// Sender, for normal datagrams.
    pub peer: Option<SocketAddr>,
    /// Valid bytes of the control buffer.
    pub controllen: usize,
}

/// Non-blocking `recvmsg`; the cmsgs stay in `control` for the caller to walk ([`cmsgs`]).
pub fn recv_raw(
    fd: RawFd,
    buf: &mut [u8],
    errqueue: bool,
    control: &mut ControlBuf,
) -> io::Result<RawReceived> {
    // SAFETY: zeroed sockaddr_storage and msghdr are valid; every pointer below refers to
    // live buffers of the stated lengths for the duration of the call.
    unsafe {
        let mut addr: libc::sockaddr_storage = zeroed();
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = (&mut addr as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = CONTROL_LEN as _;
        let flags = libc::MSG_DONTWAIT
            | if errqueue {
                libc::MSG_ERRQUEUE
            } else {
                libc::MSG_TRUNC
            };
        let n = libc::recvmsg(fd, &mut msg, flags);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let peer = if errqueue {
            None
        } else {
            sockaddr_to_std(&addr)
        };
        Ok(RawReceived {
            len: n as usize,
            peer,
            controllen: msg.msg_controllen as usize,
        })
    }
}

/// The address in a `sockaddr_storage` filled by the kernel (IPv4 or IPv6), else `None`.
pub fn sockaddr_to_std(addr: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family field tells which sockaddr the storage holds.
    unsafe {
        match addr.ss_family as i32 {
            libc::AF_INET => {
                let a = &*(addr as *const _ as *const libc::sockaddr_in);
                Some(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let a = &*(addr as *const _ as *const libc::sockaddr_in6);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                    u16::from_be(a.sin6_port),
                ))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends one cmsg the way the kernel lays it out.
    fn put_cmsg<T>(buf: &mut ControlBuf, used: &mut usize, level: i32, ty: i32, value: &T) {
        unsafe {
            let c = buf.0.as_mut_ptr().add(*used) as *mut libc::cmsghdr;
            (*c).cmsg_level = level;
            (*c).cmsg_type = ty;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<T>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), std::ptr::read(value));
            *used += libc::CMSG_SPACE(size_of::<T>() as u32) as usize;
        }
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
        let _ = parse_control(&junk, CONTROL_LEN);
        assert_eq!(parse_control(&junk, 3), ControlInfo::default());
    }
}
