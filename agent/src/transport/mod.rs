//! How probe packets get on and off the wire, with the timestamps the six-timestamp
//! protocol needs.
//!
//! A [`Transport`] sends probe packets (64 bytes, PROBEs padded to 256) to an [`Endpoint`] from a chosen source port
//! and reports two kinds of [`TransportEvent`]: received payloads with their RX stamp,
//! and TX completions (the stamp of an earlier send, matched by [`TxToken`]). The UDP
//! transport ([`udp`]) gets both from `SO_TIMESTAMPING`; the RDMA verbs transport
//! ([`verbs`]) gets them from completion-queue timestamps of a UD QP on the RNIC.
//! [`select`] decides which one each RNIC uses.

pub(crate) mod recv_batch;
pub(crate) mod select;
pub(crate) mod timestamping;
pub(crate) mod udp;
pub(crate) mod verbs;

pub use select::list_rdma_devices;

use rocemesh_proto::TimestampSource;
use rocemesh_proto::packet::PROBE_LEN;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::time::Duration;

pub use udp::{UdpOptions, UdpTransport};
pub(crate) use verbs::{VerbsOptions, VerbsTransport};

/// A kernel or NIC timestamp, in ns of the clock its source implies.
///
/// Only stamps of the same source are ever subtracted from each other: software stamps
/// are `CLOCK_REALTIME`, hardware stamps the NIC's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Nanoseconds on the source's clock.
    pub ns: u64,
    /// Where the stamp came from (`Software` or `Hardware`; never `App`).
    pub source: TimestampSource,
}

/// Identifies one send so its TX completion can be matched to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxToken(pub u64);

/// Where a packet goes: the peer's address and port, and its QPN (used by verbs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Peer IP (verbs: the GID is derived from it).
    pub ip: IpAddr,
    /// Peer UDP port (udp transport) .
    pub port: u16,
    /// Peer QPN (verbs transport).
    pub qpn: u32,
}

/// The UDP destination port a packet of transport `T` sent to `port` has on the wire.
pub(crate) fn wire_dst_port<T: Transport>(port: u16) -> u16 {
    T::WIRE_DST_PORT.unwrap_or(port)
}

/// Receive buffer size: one byte more than the longest packet (a padded PROBE), so
/// oversized datagrams are detected.
pub(crate) const RX_BUF_LEN: usize = PROBE_LEN + 1;

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct RxDatagram {
    data: [u8; RX_BUF_LEN],
    /// Real length of the datagram (may exceed the buffer).
    pub len: usize,
    /// Sender address.
    pub peer_ip: IpAddr,
    /// Sender source port (the probe's ECMP entropy; ACKs go back from it); `None` when
    /// the transport cannot see it (verbs over IPv4: no flow label in the GRH).
    pub peer_port: Option<u16>,
    /// RX timestamp ③/⑤, if the kernel or NIC gave one.
    pub stamp: Option<Stamp>,
}

impl RxDatagram {
    /// Builds a datagram from received bytes (at most [`RX_BUF_LEN`] of them are kept).
    pub fn new(
        bytes: &[u8],
        len: usize,
        peer_ip: IpAddr,
        peer_port: Option<u16>,
        stamp: Option<Stamp>,
    ) -> Self {
        let mut data = [0u8; RX_BUF_LEN];
        let n = bytes.len().min(RX_BUF_LEN);
        data[..n].copy_from_slice(&bytes[..n]);
        Self {
            data,
            len,
            peer_ip,
            peer_port,
            stamp,
        }
    }

    /// The received bytes (truncated to [`RX_BUF_LEN`]: enough to tell oversized from valid).
    pub fn payload(&self) -> &[u8] {
        &self.data[..self.len.min(RX_BUF_LEN)]
    }
}

/// Something the transport observed.
#[derive(Debug, Clone, Copy)]
#[allow(
    clippy::large_enum_variant,
    reason = "events queue by value on the packet path; boxing would allocate per datagram"
)]
pub enum TransportEvent {
    /// A datagram arrived.
    Rx(RxDatagram),
    /// A send left: its kernel/NIC TX timestamp (② or ④).
    TxStamp(TxToken, Stamp),
}

/// A probe transport: sends payloads, reports receptions and TX timestamps as events.
pub trait Transport: Send {
    /// The UDP destination port every packet of this transport carries on the wire, when
    /// the transport fixes it whatever the endpoint's port (RoCEv2: 4791). A trace must
    /// take the probe's own 5-tuple, as switches hash the destination port too.
    const WIRE_DST_PORT: Option<u16> = None;

    /// The local IP this transport speaks from.
    fn local_ip(&self) -> IpAddr;

    /// Sends `payload` to `to` from source port `src_port`; the token identifies the TX stamp.
    fn send(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<TxToken>;

    /// Sends without asking for a TX stamp (ACK2: nobody needs its send time), sparing
    /// the kernel a timestamp and the engine a wake-up to read it.
    fn send_unstamped(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<()>;

    /// Blocks until an event may be available or `timeout` passed (no busy polling).
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;

    /// Returns the next pending event without blocking; `None` once drained.
    fn next_event(&mut self) -> Option<TransportEvent>;

    /// An fd one event loop can put in its own epoll to multiplex many transports: when
    /// epoll reports it, the loop calls [`Self::ready`] instead of blocking in
    /// [`Self::wait`]. `None`: this transport can only block in `wait`.
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }

    /// The loop saw `events` (epoll bits; 0 = just a poll) on [`Self::wait_fd`]: prepares
    /// what they announce for [`Self::next_event`], without blocking.
    fn ready(&mut self, events: u32) -> io::Result<()> {
        let _ = events;
        self.wait(Duration::ZERO)
    }

    /// With a [`Self::wait_fd`]: how soon `ready(0)` must be called even if the fd stays
    /// quiet (something must be polled for), else `None`.
    fn poll_within(&self) -> Option<Duration> {
        None
    }
}
