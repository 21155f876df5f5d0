//! What the UD transport reports: receptions (with their GRH) and send completions.

use crate::flow_label::flow_label_to_udp_sport;
use crate::grh::Grh;
use crate::timestamp::CompletionStamp;
use rocemesh_proto::packet::PROBE_LEN;
use std::net::IpAddr;

/// Payload bytes kept per receive: one more than a packet, so oversize is visible.
pub const RX_KEEP: usize = PROBE_LEN + 1;

/// One UD datagram received.
#[derive(Debug, Clone, Copy)]
pub struct UdReceive {
    data: [u8; RX_KEEP],
    /// Real payload length (GRH excluded; may exceed [`RX_KEEP`]).
    pub len: usize,
    /// The GRH it arrived with (source GID, flow label, traffic class, hop limit).
    pub grh: Grh,
    /// The sender's QPN.
    pub src_qpn: u32,
    /// RX completion time (③ or ⑤).
    pub stamp: CompletionStamp,
}

impl UdReceive {
    pub(crate) fn new(payload: &[u8], grh: Grh, src_qpn: u32, stamp: CompletionStamp) -> Self {
        let mut data = [0u8; RX_KEEP];
        let n = payload.len().min(RX_KEEP);
        data[..n].copy_from_slice(&payload[..n]);
        Self {
            data,
            len: payload.len(),
            grh,
            src_qpn,
            stamp,
        }
    }

    /// The received payload (truncated to [`RX_KEEP`] bytes).
    pub fn payload(&self) -> &[u8] {
        &self.data[..self.len.min(RX_KEEP)]
    }

    /// The sender's IP (from its GID).
    pub fn peer_ip(&self) -> IpAddr {
        self.grh.sgid.to_ip()
    }

    /// The sender's RoCEv2 UDP source port, when the GRH carries its flow label
    /// (RoCEv2 over IPv6). Over IPv4 there is no flow label and this is `None`.
    pub fn peer_udp_sport(&self) -> Option<u16> {
        (self.grh.flow_label != 0).then(|| flow_label_to_udp_sport(self.grh.flow_label))
    }
}

/// Something the UD transport observed.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "events queue by value on the packet path; boxing would allocate per datagram"
)]
pub enum UdEvent {
    /// A datagram arrived.
    Rx(UdReceive),
    /// A send completed: its NIC TX completion time (② or ④).
    TxDone {
        /// The token [`super::UdTransport::send`] returned.
        token: u64,
        /// Completion time.
        stamp: CompletionStamp,
    },
    /// A send failed in the NIC (its probe will time out).
    TxFailed {
        /// The token of the failed send.
        token: u64,
        /// `ibv_wc_status_str` of the completion.
        status: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grh::tests::ipv4_grh;
    use crate::timestamp::StampClock;

    #[test]
    fn payload_is_kept_with_its_real_length_and_peer() {
        let grh = Grh::parse(&ipv4_grh(0, 0, 64, [10, 0, 0, 9], [10, 0, 0, 1])).unwrap();
        let stamp = CompletionStamp {
            ns: 5,
            clock: StampClock::NicFreeRunning,
        };
        let big = [7u8; 400];
        let rx = UdReceive::new(&big, grh, 0x1234, stamp);
        assert_eq!((rx.len, rx.payload().len()), (400, RX_KEEP));
        assert_eq!(rx.peer_ip().to_string(), "10.0.0.9");
        assert_eq!(rx.peer_udp_sport(), None, "IPv4 GRHs carry no flow label");
        let v6 = Grh {
            flow_label: 0x4001,
            ..grh
        };
        assert_eq!(
            UdReceive::new(&[1; 64], v6, 1, stamp).peer_udp_sport(),
            Some(0xC000)
        );
    }
}
