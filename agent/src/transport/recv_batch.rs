//! `recvmmsg`: every datagram queued on a socket (up to a batch) in one call, each with
//! its sender and RX stamp. A short batch means the queue is empty, so no extra read is
//! spent finding out.

use super::RX_BUF_LEN;
use super::timestamping::{ControlBuf, Received, parse_control, sockaddr_to_std};
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;

/// Datagrams read per call.
pub const BATCH: usize = 16;

/// Buffers for one `recvmmsg` of up to [`BATCH`] datagrams.
pub struct RecvBatch {
    data: [[u8; RX_BUF_LEN]; BATCH],
    control: [ControlBuf; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    iovs: [libc::iovec; BATCH],
    msgs: [libc::mmsghdr; BATCH],
}

// SAFETY: the raw pointers inside `iovs`/`msgs` only ever point into this same struct and
// are rebuilt before every call; nothing is shared across threads.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Empty buffers (boxed: about 8 KiB).
    pub fn new() -> Box<Self> {
        // SAFETY: all fields are plain old data for which zero is valid (null pointers
        // are replaced before use).
        Box::new(unsafe { zeroed() })
    }

    /// Reads up to [`BATCH`] datagrams without blocking; returns how many (an error such
    /// as `WouldBlock` when there was none).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for i in 0..BATCH {
            self.iovs[i] = libc::iovec {
                iov_base: self.data[i].as_mut_ptr().cast(),
                iov_len: RX_BUF_LEN,
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
                BATCH as u32,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Datagram `i` of the last call: its bytes (at most [`RX_BUF_LEN`]) and what came with it.
    pub fn get(&self, i: usize) -> (&[u8; RX_BUF_LEN], Received) {
        let m = &self.msgs[i];
        let received = Received {
            len: m.msg_len as usize,
            peer: sockaddr_to_std(&self.addrs[i]),
            control: parse_control(&self.control[i], m.msg_hdr.msg_controllen),
        };
        (&self.data[i], received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::timestamping;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_every_queued_datagram_with_sender_length_and_stamp() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        timestamping::enable(rx.as_raw_fd()).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = RecvBatch::new();
        // The kernel switches RX timestamping on through deferred work: wait until a
        // datagram comes back stamped before the real test.
        for _ in 0..100 {
            tx.send_to(&[0xFF; 8], rx.local_addr().unwrap()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            let n = b.recv(rx.as_raw_fd()).unwrap();
            if (0..n).all(|i| b.get(i).1.control.stamp.is_some()) {
                break;
            }
        }
        assert_eq!(
            b.recv(rx.as_raw_fd()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // More than a batch, one of them oversized (its real length is reported).
        for i in 0..BATCH + 3 {
            let len = if i == 1 { 300 } else { 64 };
            tx.send_to(&vec![i as u8; len], rx.local_addr().unwrap())
                .unwrap();
        }
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), BATCH);
        for i in 0..BATCH {
            let (data, r) = b.get(i);
            assert_eq!(r.peer, Some(tx.local_addr().unwrap()));
            assert_eq!(r.len, if i == 1 { 300 } else { 64 });
            assert_eq!(data[0], i as u8);
            assert!(r.control.stamp.is_some(), "software RX stamp");
        }
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 3);
        assert_eq!(b.get(2).0[0], BATCH as u8 + 2);
    }
}
