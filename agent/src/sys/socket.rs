//! Socket calls the standard library and socket2 lack: options by raw level/name, the
//! hardware-timestamping ioctl, `sendmsg` with a cmsg, `recvmsg`/`recvmmsg` with ancillary
//! data, and raw sockaddr conversion.

use super::cmsg::{ControlBuf, pod_bytes, read_pod};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// Sets a socket option to `value` (an integer or a C struct of integers).
pub(crate) fn setsockopt<T: Copy>(
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

/// `SIOCSHWTSTAMP` on interface `ifname` through socket `fd`.
pub(crate) fn set_hardware_timestamping(
    fd: RawFd,
    ifname: &str,
    mut cfg: libc::hwtstamp_config,
) -> io::Result<()> {
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

/// Sends `payload` to `dest` with a per-message `SO_TIMESTAMPING` cmsg clearing the TX
/// flags: no stamp is generated and no `OPT_ID` consumed for this send.
pub(crate) fn send_without_stamp(
    fd: RawFd,
    payload: &[u8],
    dest: &socket2::SockAddr,
) -> io::Result<()> {
    let mut control = ControlBuf::default();
    // SAFETY: every pointer refers to a live buffer of the stated length for the call; the
    // cmsg is written inside `control` (CMSG_SPACE(4) <= its length).
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
pub(crate) struct RawReceived {
    /// Real datagram length (`MSG_TRUNC`; for error-queue messages the returned payload length).
    pub len: usize,
    /// Sender, for normal datagrams.
    pub peer: Option<SocketAddr>,
    /// Valid bytes of the control buffer.
    pub controllen: usize,
}

/// Non-blocking `recvmsg` into `buf`; `errqueue` reads the socket's error queue instead.
/// The cmsgs stay in `control` for the caller to walk.
pub(crate) fn recv_raw(
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
        msg.msg_controllen = size_of::<ControlBuf>() as _;
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

/// Buffers for one `recvmmsg` of up to `N` datagrams of `LEN` bytes each (longer ones are
/// cut, their real length reported).
pub(crate) struct RecvBuffers<const LEN: usize, const N: usize> {
    data: [[u8; LEN]; N],
    control: [ControlBuf; N],
    addrs: [libc::sockaddr_storage; N],
    iovs: [libc::iovec; N],
    msgs: [libc::mmsghdr; N],
}

// SAFETY: the raw pointers inside `iovs`/`msgs` only ever point into this same struct and
// are rebuilt before every call; nothing is shared across threads.
unsafe impl<const LEN: usize, const N: usize> Send for RecvBuffers<LEN, N> {}

impl<const LEN: usize, const N: usize> RecvBuffers<LEN, N> {
    /// Empty buffers (boxed: they are large).
    pub(crate) fn new() -> Box<Self> {
        // SAFETY: all fields are plain old data for which zero is valid (null pointers
        // are replaced before use).
        Box::new(unsafe { zeroed() })
    }

    /// Reads up to `N` datagrams without blocking; returns how many (an error such as
    /// `WouldBlock` when there was none).
    pub(crate) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for i in 0..N {
            self.iovs[i] = libc::iovec {
                iov_base: self.data[i].as_mut_ptr().cast(),
                iov_len: LEN,
            };
            // SAFETY: zeroed msghdr is valid; pointers are set to live buffers below.
            let mut hdr: libc::msghdr = unsafe { zeroed() };
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
            hdr.msg_iov = &mut self.iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = self.control[i].0.as_mut_ptr().cast();
            hdr.msg_controllen = size_of::<ControlBuf>() as _;
            self.msgs[i] = libc::mmsghdr {
                msg_hdr: hdr,
                msg_len: 0,
            };
        }
        // SAFETY: every msghdr points at buffers of this struct, alive and exclusively
        // borrowed for the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                N as u32,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Datagram `i` of the last call: its bytes, what `recvmsg` said, and its cmsgs.
    pub(crate) fn get(&self, i: usize) -> (&[u8; LEN], RawReceived, &ControlBuf) {
        let m = &self.msgs[i];
        let raw = RawReceived {
            len: m.msg_len as usize,
            peer: sockaddr_to_std(&self.addrs[i]),
            controllen: m.msg_hdr.msg_controllen,
        };
        (&self.data[i], raw, &self.control[i])
    }
}

/// The address in a `sockaddr_storage` filled by the kernel (IPv4 or IPv6), else `None`.
fn sockaddr_to_std(addr: &libc::sockaddr_storage) -> Option<SocketAddr> {
    sockaddr_from_bytes(pod_bytes(addr))
}

/// The address in raw sockaddr bytes (such as `SO_EE_OFFENDER`), if they hold a whole
/// IPv4 or IPv6 one.
pub(crate) fn sockaddr_from_bytes(bytes: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(bytes.get(..2)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let a: libc::sockaddr_in = read_pod(bytes)?;
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            let a: libc::sockaddr_in6 = read_pod(bytes)?;
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}
