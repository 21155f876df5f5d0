//! `recvmmsg`: every datagram queued on a socket (up to a batch) in one call, each with
//! its sender and RX stamp. A short batch means the queue is empty, so no extra read is
//! spent finding out.

use super::RX_BUF_LEN;
use super::timestamping::Received;
use crate::sys::RecvBuffers;
use std::io;
use std::os::fd::RawFd;

/// Datagrams read per call.
pub(crate) const BATCH: usize = 16;

/// Buffers for one `recvmmsg` of up to [`BATCH`] datagrams.
pub(crate) struct RecvBatch(Box<RecvBuffers<RX_BUF_LEN, BATCH>>);

/// Empty buffers (boxed inside: about 8 KiB).
impl Default for RecvBatch {
    fn default() -> Self {
        Self(RecvBuffers::new())
    }
}

impl RecvBatch {
    /// Reads up to [`BATCH`] datagrams without blocking; returns how many (an error such
    /// as `WouldBlock` when there was none).
    pub(crate) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.0.recv(fd)
    }

    /// Datagram `i` of the last call: its bytes (at most [`RX_BUF_LEN`]) and what came with it.
    pub(crate) fn get(&self, i: usize) -> (&[u8; RX_BUF_LEN], Received) {
        let (data, raw, control) = self.0.get(i);
        (data, Received::parse(raw, control))
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
        let mut b = RecvBatch::default();
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
