//! PROBE / ACK1 / ACK2 packets: the fixed 64-byte payload every transport carries.
//!
//! The same bytes ride a UDP datagram (udp transport) and an RDMA UD send after the
//! 40-byte GRH (verbs transport). All integers are big-endian (network order).
//!
//! ```text
//! offset size field
//!  0      2   magic            0x52 0x4D ("RM")
//!  2      1   version          1 = untagged, 2 = tagged (bytes 48..64 carry the MAC)
//!  3      1   kind             1 = PROBE, 2 = ACK1, 3 = ACK2, 4 = TRACE
//!  4      1   flags            bit0: responder timestamps are hardware (ACK2)
//!                              bit1: responder timestamps are software (ACK2)
//!                              other bits must be zero
//!  5      1   class            1 = ToR-mesh, 2 = inter-ToR, 3 = service tracing
//!  6      2   src_port         UDP source port the prober sent from (echoed in ACKs):
//!                              over IPv4 RoCEv2 has no flow label in the GRH, so a verbs
//!                              responder learns the port to answer from only here
//!  8      4   seq              prober's sequence number
//! 12      4   prober_rnic      controller-assigned id of the probing RNIC
//! 16      4   prober_qpn       QPN (udp: per-start random 24-bit id) of the prober
//! 20      4   target_rnic      controller-assigned id of the RNIC the prober aims at
//! 24      4   target_qpn       the QPN the prober believes the target has
//! 28      4   responder_qpn    ACKs: the responder's real QPN; PROBE: zero
//! 32      8   responder_delay  ACK2: ④−③ in ns; otherwise zero
//! 40      8   prober_token     random per prober start, echoed in ACKs
//! 48     16   auth_tag         version 1: zero. Version 3: byte 48 = key id, bytes
//!                              49..64 = the MAC of [`crate::probe_auth`], which also
//!                              covers the PROBE's padding and the flow's addresses
//! ```
//!
//! A PROBE travels padded to [`PROBE_LEN`] bytes (see [`Wire`]): one PROBE is at least as
//! long as the two ACKs it asks for, under any header stack, so a responder never sends
//! more bytes than it received. In a tagged PROBE, padding bytes 64..72 carry the send
//! time (ms since the Unix epoch, big-endian) the MAC's time window is checked against;
//! the rest of the padding is zero.
//!
//! A responder answers a PROBE only when `target_qpn` equals its own QPN, exactly as
//! a real RNIC drops a UD send for a QPN that no longer exists; a QPN reset therefore
//! shows up as a timeout that the analyzer can explain from the stale QPN.

use thiserror::Error;

/// Size of every probe packet on the wire, in bytes.
pub const PACKET_LEN: usize = 64;
/// First two bytes of every packet.
pub const MAGIC: [u8; 2] = *b"RM";
/// Version of untagged packets (authentication off); [`Packet::encode`] writes it.
pub const VERSION: u8 = 1;
/// Version of packets carrying a key id and MAC in bytes 48..64
/// ([`crate::probe_auth::Keyring::seal`] writes it). Version 2 (a MAC over the packet
/// alone, replayable from anywhere) is no longer spoken.
pub const VERSION_TAGGED: u8 = 3;
/// Length of a PROBE on the wire: the packet and its padding. Two ACKs are
/// 2 × ([`PACKET_LEN`] + h) bytes with h bytes of headers each; a PROBE of
/// `PROBE_LEN` + h bytes is at least that for every h up to 128 (Ethernet, IPv6, UDP and
/// the RoCEv2 BTH/DETH/ICRC together are less).
pub const PROBE_LEN: usize = 256;
/// Offset of a tagged PROBE's send time in its padding.
pub const SENT_AT: usize = PACKET_LEN;

const FLAG_RESPONDER_HW_TS: u8 = 0b01;
const FLAG_RESPONDER_SW_TS: u8 = 0b10;
const KNOWN_FLAGS: u8 = FLAG_RESPONDER_HW_TS | FLAG_RESPONDER_SW_TS;

/// What a packet is in the six-timestamp exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Prober → responder.
    Probe = 1,
    /// Responder → prober, sent at once; its send completion is timestamp ④.
    Ack1 = 2,
    /// Responder → prober, carries the responder delay ④−③.
    Ack2 = 3,
    /// A TTL-limited traceroute packet on a probe's or ACK's own 5-tuple; receivers
    /// count and ignore it.
    Trace = 4,
}

impl PacketKind {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Probe),
            2 => Some(Self::Ack1),
            3 => Some(Self::Ack2),
            4 => Some(Self::Trace),
            _ => None,
        }
    }
}

/// Which pinglist a probe belongs to; the analyzer treats the classes differently.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ProbeClass {
    /// Probes among RNICs under one ToR: RNIC health (R-Pingmesh §4.3.2).
    TorMesh = 1,
    /// Probes between ToRs covering every uplink (R-Pingmesh Eq. 1).
    InterTor = 2,
    /// Probes on a traced service flow's 5-tuple (R-Pingmesh §4.2.2).
    Service = 3,
}

impl ProbeClass {
    /// All classes, in wire order.
    pub const ALL: [ProbeClass; 3] = [Self::TorMesh, Self::InterTor, Self::Service];

    /// Decodes the wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::TorMesh),
            2 => Some(Self::InterTor),
            3 => Some(Self::Service),
            _ => None,
        }
    }

    /// Stable lowercase name, used in APIs, metrics and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TorMesh => "tor_mesh",
            Self::InterTor => "inter_tor",
            Self::Service => "service",
        }
    }
}

/// How the responder's ③ and ④ were taken, reported back in ACK2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimestampSource {
    /// No kernel/NIC timestamp: application clock only.
    App = 0,
    /// Kernel software timestamps (`SO_TIMESTAMPING` software).
    Software = 1,
    /// NIC hardware timestamps (completion timestamps or `SO_TIMESTAMPING` raw hardware).
    Hardware = 2,
}

impl TimestampSource {
    /// Decodes the wire value used in result records.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::App),
            1 => Some(Self::Software),
            2 => Some(Self::Hardware),
            _ => None,
        }
    }

    /// The weaker of two sources: a difference is only as good as its worst stamp.
    pub fn min(self, other: Self) -> Self {
        if (self as u8) <= (other as u8) {
            self
        } else {
            other
        }
    }

    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::App => "app",
            Self::Software => "software",
            Self::Hardware => "hardware",
        }
    }
}

/// One decoded probe packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// PROBE, ACK1 or ACK2.
    pub kind: PacketKind,
    /// Pinglist class of the probe (echoed in ACKs).
    pub class: ProbeClass,
    /// Timestamp source of the responder's ③/④ (ACK2 only; `App` otherwise).
    pub responder_ts: TimestampSource,
    /// Prober sequence number.
    pub seq: u32,
    /// Prober RNIC id.
    pub prober_rnic: u32,
    /// Prober QPN.
    pub prober_qpn: u32,
    /// Target RNIC id as the prober believes it.
    pub target_rnic: u32,
    /// Target QPN as the prober believes it.
    pub target_qpn: u32,
    /// Responder's real QPN (ACKs).
    pub responder_qpn: u32,
    /// ④−③ in nanoseconds (ACK2).
    pub responder_delay_ns: u64,
    /// Random token of the prober incarnation, echoed in ACKs.
    pub prober_token: u64,
    /// UDP source port of the probe (0 when the sender did not fill it in).
    pub src_port: u16,
}

/// Why a received datagram was not a valid packet. Each variant is counted and the
/// datagram dropped; nothing is ever answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum PacketError {
    /// Fewer than [`PACKET_LEN`] bytes.
    #[error("truncated packet: {0} bytes, expected {PACKET_LEN}")]
    Truncated(usize),
    /// More than [`PACKET_LEN`] bytes.
    #[error("oversized packet: {0} bytes, expected {PACKET_LEN}")]
    Oversized(usize),
    /// Not an rocemesh packet at all.
    #[error("foreign packet: bad magic")]
    Foreign,
    /// A version this build does not speak.
    #[error("unsupported packet version {0}")]
    Version(u8),
    /// Unknown kind, class, flag bits or non-zero reserved bytes.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
}

impl PacketError {
    /// Stable short name for drop counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Truncated(_) => "truncated",
            Self::Oversized(_) => "oversized",
            Self::Foreign => "foreign",
            Self::Version(_) => "version",
            Self::Malformed(_) => "malformed",
        }
    }
}

impl Packet {
    /// A PROBE packet.
    #[allow(clippy::too_many_arguments)]
    pub fn probe(
        class: ProbeClass,
        seq: u32,
        prober_rnic: u32,
        prober_qpn: u32,
        target_rnic: u32,
        target_qpn: u32,
        prober_token: u64,
    ) -> Self {
        Self {
            kind: PacketKind::Probe,
            class,
            responder_ts: TimestampSource::App,
            seq,
            prober_rnic,
            prober_qpn,
            target_rnic,
            target_qpn,
            responder_qpn: 0,
            responder_delay_ns: 0,
            prober_token,
            src_port: 0,
        }
    }

    /// The same packet naming the UDP source port it is sent from.
    pub fn with_src_port(self, src_port: u16) -> Self {
        Self { src_port, ..self }
    }

    /// A TRACE packet for the 5-tuple of this probe (or of its ACKs).
    pub fn trace(&self) -> Self {
        Self {
            kind: PacketKind::Trace,
            ..*self
        }
    }

    /// The ACK1 a responder with QPN `responder_qpn` sends for this probe.
    pub fn ack1(&self, responder_qpn: u32) -> Self {
        Self {
            kind: PacketKind::Ack1,
            responder_qpn,
            ..*self
        }
    }

    /// The ACK2 carrying the responder delay and how it was timestamped.
    pub fn ack2(&self, responder_qpn: u32, delay_ns: u64, ts: TimestampSource) -> Self {
        Self {
            kind: PacketKind::Ack2,
            responder_qpn,
            responder_delay_ns: delay_ns,
            responder_ts: ts,
            ..*self
        }
    }

    /// Writes the 64-byte wire form.
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut b = [0u8; PACKET_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.kind as u8;
        b[4] = match self.responder_ts {
            TimestampSource::Hardware => FLAG_RESPONDER_HW_TS,
            TimestampSource::Software => FLAG_RESPONDER_SW_TS,
            TimestampSource::App => 0,
        };
        b[5] = self.class as u8;
        b[6..8].copy_from_slice(&self.src_port.to_be_bytes());
        b[8..12].copy_from_slice(&self.seq.to_be_bytes());
        b[12..16].copy_from_slice(&self.prober_rnic.to_be_bytes());
        b[16..20].copy_from_slice(&self.prober_qpn.to_be_bytes());
        b[20..24].copy_from_slice(&self.target_rnic.to_be_bytes());
        b[24..28].copy_from_slice(&self.target_qpn.to_be_bytes());
        b[28..32].copy_from_slice(&self.responder_qpn.to_be_bytes());
        b[32..40].copy_from_slice(&self.responder_delay_ns.to_be_bytes());
        b[40..48].copy_from_slice(&self.prober_token.to_be_bytes());
        b
    }

    /// Parses and validates a received payload: [`PACKET_LEN`] bytes, or [`PROBE_LEN`]
    /// for a padded PROBE (version 1 or [`VERSION_TAGGED`]; a tag is not checked here).
    pub fn decode(buf: &[u8]) -> Result<Self, PacketError> {
        if buf.len() >= 2 && buf[0..2] != MAGIC {
            return Err(PacketError::Foreign);
        }
        if buf.len() < PACKET_LEN {
            return Err(PacketError::Truncated(buf.len()));
        }
        let padded_probe = buf.len() == PROBE_LEN && buf[3] == PacketKind::Probe as u8;
        if buf.len() > PACKET_LEN && !padded_probe {
            return Err(PacketError::Oversized(buf.len()));
        }
        if buf[2] != VERSION && buf[2] != VERSION_TAGGED {
            return Err(PacketError::Version(buf[2]));
        }
        let kind = PacketKind::from_u8(buf[3]).ok_or(PacketError::Malformed("unknown kind"))?;
        let flags = buf[4];
        if flags & !KNOWN_FLAGS != 0 || flags == KNOWN_FLAGS {
            return Err(PacketError::Malformed("unknown flag bits"));
        }
        let class = ProbeClass::from_u8(buf[5]).ok_or(PacketError::Malformed("unknown class"))?;
        // A tagged packet's bytes 48..64 are checked by the keyring, not here.
        if buf[2] == VERSION && buf[48..].iter().any(|&x| x != 0) {
            return Err(PacketError::Malformed("reserved bytes not zero"));
        }
        let u32_at = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[o..o + 8]);
            u64::from_be_bytes(a)
        };
        let responder_ts = if flags & FLAG_RESPONDER_HW_TS != 0 {
            TimestampSource::Hardware
        } else if flags & FLAG_RESPONDER_SW_TS != 0 {
            TimestampSource::Software
        } else {
            TimestampSource::App
        };
        let p = Packet {
            kind,
            class,
            responder_ts,
            seq: u32_at(8),
            prober_rnic: u32_at(12),
            prober_qpn: u32_at(16),
            target_rnic: u32_at(20),
            target_qpn: u32_at(24),
            responder_qpn: u32_at(28),
            responder_delay_ns: u64_at(32),
            prober_token: u64_at(40),
            src_port: u16::from_be_bytes([buf[6], buf[7]]),
        };
        if matches!(kind, PacketKind::Probe | PacketKind::Trace)
            && (p.responder_qpn != 0 || p.responder_delay_ns != 0 || flags != 0)
        {
            return Err(PacketError::Malformed("probe carries responder fields"));
        }
        if kind == PacketKind::Ack1 && (p.responder_delay_ns != 0 || flags != 0) {
            return Err(PacketError::Malformed("ack1 carries ack2 fields"));
        }
        Ok(p)
    }
}

/// A packet as it goes on the wire: PROBEs padded to [`PROBE_LEN`], the other kinds
/// [`PACKET_LEN`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire {
    buf: [u8; PROBE_LEN],
    len: usize,
}

impl Wire {
    /// The untagged wire form of `pkt` (padding zero).
    pub fn new(pkt: &Packet) -> Self {
        let mut buf = [0u8; PROBE_LEN];
        buf[..PACKET_LEN].copy_from_slice(&pkt.encode());
        let len = if pkt.kind == PacketKind::Probe {
            PROBE_LEN
        } else {
            PACKET_LEN
        };
        Self { buf, len }
    }

    /// The bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The bytes, for the keyring to tag.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Packet {
        Packet::probe(
            ProbeClass::InterTor,
            7,
            11,
            0x00ab_cdef,
            22,
            0x0012_3456,
            0xdead_beef_0102_0304,
        )
        .with_src_port(0xC123)
    }

    #[test]
    fn round_trips_every_kind() {
        let p = sample();
        for pkt in [
            p,
            p.trace(),
            p.ack1(0x0012_3456),
            p.ack2(0x0012_3456, 12_345, TimestampSource::Software),
        ] {
            let bytes = pkt.encode();
            assert_eq!(bytes.len(), PACKET_LEN);
            assert_eq!(Packet::decode(&bytes), Ok(pkt));
        }
    }

    #[test]
    fn layout_is_the_documented_one() {
        let b = sample()
            .ack2(
                0x0012_3456,
                0x0102_0304_0506_0708,
                TimestampSource::Hardware,
            )
            .encode();
        assert_eq!(&b[0..4], &[b'R', b'M', 1, 3]);
        assert_eq!(b[4], 0b01);
        assert_eq!(b[5], 2);
        assert_eq!(&b[6..8], &[0xC1, 0x23]);
        assert_eq!(&b[8..12], &7u32.to_be_bytes());
        assert_eq!(&b[16..20], &[0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[24..28], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(&b[32..40], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[40..48], &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]);
        assert!(b[48..].iter().all(|&x| x == 0));
    }

    #[test]
    fn probes_travel_padded_and_only_probes_may_be_long() {
        let probe = Packet::probe(ProbeClass::TorMesh, 1, 2, 3, 4, 5, 6);
        let wire = Wire::new(&probe);
        assert_eq!(wire.as_bytes().len(), PROBE_LEN);
        assert_eq!(Packet::decode(wire.as_bytes()), Ok(probe));
        // The unpadded form of an older prober still decodes.
        assert_eq!(Packet::decode(&probe.encode()), Ok(probe));
        // ACKs stay one packet long; a padded ACK or an odd length is refused.
        let ack = probe.ack1(9);
        assert_eq!(Wire::new(&ack).as_bytes().len(), PACKET_LEN);
        let mut long_ack = [0u8; PROBE_LEN];
        long_ack[..PACKET_LEN].copy_from_slice(&ack.encode());
        assert_eq!(
            Packet::decode(&long_ack),
            Err(PacketError::Oversized(PROBE_LEN))
        );
        assert_eq!(
            Packet::decode(&wire.as_bytes()[..PROBE_LEN - 1]),
            Err(PacketError::Oversized(PROBE_LEN - 1))
        );
        // Untagged padding is reserved: zero.
        let mut dirty = wire.as_bytes().to_vec();
        dirty[200] = 1;
        assert!(matches!(
            Packet::decode(&dirty),
            Err(PacketError::Malformed(_))
        ));
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        let good = sample().encode();
        assert_eq!(Packet::decode(&good[..10]), Err(PacketError::Truncated(10)));
        assert_eq!(Packet::decode(&[]), Err(PacketError::Truncated(0)));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Packet::decode(&long), Err(PacketError::Oversized(65)));
        assert_eq!(
            Packet::decode(b"GET / HTTP/1.1\r\n"),
            Err(PacketError::Foreign)
        );
        let mut v = good;
        v[2] = 9;
        assert_eq!(Packet::decode(&v), Err(PacketError::Version(9)));
        for (i, val) in [(3usize, 0u8), (3, 5), (5, 0), (5, 9), (4, 0x80), (63, 1)] {
            let mut m = good;
            m[i] = val;
            assert!(
                matches!(Packet::decode(&m), Err(PacketError::Malformed(_))),
                "byte {i}={val}"
            );
        }
        // A PROBE may not carry a responder delay: that would let a prober fake an ACK2.
        let mut m = good;
        m[39] = 1;
        assert!(matches!(Packet::decode(&m), Err(PacketError::Malformed(_))));
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x1234_5678_9abc_def0;
        for len in 0..200 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = Packet::decode(&buf);
        }
    }
}
