//! The verbs transport: the agent's [`Transport`] over one RDMA UD QP
//! (`rocemesh_verbs::UdTransport`), stamps from the completion queue.
//!
//! A thin wrapper: endpoints become UD destinations (GID from the IP, the peer's QPN, the
//! RoCEv2 source port realised through the flow label), completions become
//! [`TransportEvent`]s. Over IPv4 RoCEv2 the GRH carries no flow label, so a received
//! datagram's source port is unknown (`peer_port: None`) and the responder answers from
//! the port the PROBE names (`Packet::src_port`).

use super::{Endpoint, RxDatagram, Stamp, Transport, TransportEvent, TxToken};
use crate::stats::Counters;
use rocemesh_verbs::{
    CompletionStamp, GidEntry, UdConfig, UdDestination, UdEvent, UdTransport, VerbsError,
};
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The RoCEv2 UDP destination port (IANA), which every UD datagram carries.
pub(crate) const ROCE_V2_DST_PORT: u16 = 4791;

/// What the verbs transport of one RNIC is opened with.
#[derive(Debug, Clone)]
pub(crate) struct VerbsOptions {
    /// The RNIC's IP (its RoCEv2 GID).
    pub ip: IpAddr,
    /// RDMA device name, when known (required with `gid_index`).
    pub device: Option<String>,
    /// GID index override.
    pub gid_index: Option<u32>,
    /// DSCP of probes and ACKs (GRH traffic class = DSCP << 2).
    pub dscp: Option<u8>,
}

/// One RNIC's UD QP behind the [`Transport`] trait.
pub(crate) struct VerbsTransport {
    ud: UdTransport,
    counters: Arc<Counters>,
    /// An error `next_event` met; reported by the next `wait` (which stops the engine).
    failed: Option<VerbsError>,
}

impl VerbsTransport {
    /// Opens the UD QP; errors are the verbs crate's (they name what is missing).
    pub(crate) fn open(opts: &VerbsOptions, counters: Arc<Counters>) -> Result<Self, VerbsError> {
        let mut cfg = UdConfig::for_ip(opts.ip);
        cfg.gid.device = opts.device.clone();
        cfg.gid.gid_index = opts.gid_index;
        cfg.traffic_class = opts.dscp.unwrap_or(0) << 2;
        Ok(Self {
            ud: UdTransport::open(cfg)?,
            counters,
            failed: None,
        })
    }

    /// The QP number peers must target (registered with the controller).
    pub(crate) fn qpn(&self) -> u32 {
        self.ud.qpn()
    }

    /// The GID table entry in use (device, port, index, GID).
    pub(crate) fn gid(&self) -> &GidEntry {
        self.ud.local_gid()
    }
}

/// A completion stamp on the protocol's terms (NIC clocks are hardware stamps).
pub(crate) fn stamp(c: CompletionStamp) -> Stamp {
    Stamp {
        ns: c.ns,
        source: c.clock.source(),
    }
}

fn destination(to: Endpoint, src_port: u16) -> UdDestination {
    UdDestination::new(to.ip, to.qpn, src_port)
}

impl Transport for VerbsTransport {
    const WIRE_DST_PORT: Option<u16> = Some(ROCE_V2_DST_PORT);

    fn local_ip(&self) -> IpAddr {
        self.ud.local_ip()
    }

    fn send(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<TxToken> {
        Ok(TxToken(self.ud.send(payload, destination(to, src_port))?))
    }

    /// UD sends are always signalled (the send slot is freed by its completion); the
    /// completion's stamp reaches the engine, which ignores tokens it does not know.
    fn send_unstamped(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<()> {
        self.ud.send(payload, destination(to, src_port))?;
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e.into());
        }
        Ok(self.ud.wait(timeout)?)
    }

    fn next_event(&mut self) -> Option<TransportEvent> {
        loop {
            match self.ud.next_event() {
                Ok(None) => return None,
                Ok(Some(UdEvent::Rx(rx))) => {
                    return Some(TransportEvent::Rx(RxDatagram::new(
                        rx.payload(),
                        rx.len,
                        rx.peer_ip(),
                        rx.peer_udp_sport(),
                        Some(stamp(rx.stamp)),
                    )));
                }
                Ok(Some(UdEvent::TxDone { token, stamp: s })) => {
                    return Some(TransportEvent::TxStamp(TxToken(token), stamp(s)));
                }
                // The probe (or ACK) it carried times out like a lost packet.
                Ok(Some(UdEvent::TxFailed { token, status })) => {
                    self.counters.send_errors.fetch_add(1, Relaxed);
                    tracing::debug!(token, %status, "verbs send failed in the NIC");
                }
                Err(e) => {
                    self.failed = Some(e);
                    return None;
                }
            }
        }
    }
}
