//! epoll: the readiness wait of the probe loop, the UDP transport and the path tracer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An epoll instance; closed on drop.
#[derive(Debug)]
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// A new close-on-exec epoll instance.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned below.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ep` is a fresh fd nobody else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(ep) }))
    }

    /// Watches `fd` for input (and errors), reporting it under `key`.
    pub(crate) fn add(&self, fd: RawFd, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: `ev` lives for the call; a bad fd is an error return, not UB.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Waits up to `timeout` (rounded up to whole milliseconds, so a wake-up is never early
    /// and never spins until due) for ready descriptors, written to the start of `ready`;
    /// returns how many. An interrupted wait is an `Interrupted` error.
    pub(crate) fn wait(
        &self,
        ready: &mut [libc::epoll_event],
        timeout: Duration,
    ) -> io::Result<usize> {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        let max = ready.len().min(i32::MAX as usize) as i32;
        // SAFETY: `ready` has room for `max` entries, the most the kernel writes.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), ready.as_mut_ptr(), max, ms) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn reports_a_readable_socket_under_its_key_and_times_out_otherwise() {
        let ep = Epoll::new().unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        ep.add(rx.as_raw_fd(), 42).unwrap();
        let mut ready = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(ep.wait(&mut ready, Duration::from_millis(1)).unwrap(), 0);
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .send_to(b"x", rx.local_addr().unwrap())
            .unwrap();
        assert_eq!(ep.wait(&mut ready, Duration::from_secs(5)).unwrap(), 1);
        let key = ready[0].u64;
        assert_eq!(key, 42);
        assert_eq!(ep.add(-1, 1).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
