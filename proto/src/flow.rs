//! The UDP 5-tuple a probe or a RoCEv2 flow travels as: what ECMP hashes on, so what picks
//! its path through the fabric (the protocol is always UDP).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// A UDP 5-tuple (the protocol is implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl FiveTuple {
    /// The tuple of the answers: addresses swapped, ports kept (ACKs leave from the probe's
    /// own source port towards the prober's responder port, as RC ACKs do).
    pub fn ack(self) -> Self {
        Self {
            src: self.dst,
            dst: self.src,
            ..self
        }
    }
}
