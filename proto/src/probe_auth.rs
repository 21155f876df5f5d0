//! Probe authentication: a keyed MAC in bytes 48..64 of every PROBE/ACK1/ACK2, so a
//! responder answers only cluster members and a prober trusts only real ACKs.
//!
//! A tagged packet has version [`VERSION_TAGGED`], the key id in byte 48 and in bytes
//! 49..64 HMAC-SHA256(key, bytes 0..49 ‖ bytes 64.. ‖ [`Flow`]) truncated to [`TAG_LEN`]
//! bytes. The MAC binds the packet to its flow (source and destination address and
//! port) and, for a PROBE, to its send time in the padding: a captured PROBE replayed
//! from another address or port, or after [`Keyring::window`], is refused, so nobody can
//! aim a responder's ACKs at a third party.
//! HMAC-SHA256 because RustCrypto's `hmac` and `sha2` are already in the dependency tree
//! (through sqlx), are widely reviewed, and the key schedule is precomputed once per key,
//! so a tag costs two SHA-256 compressions; 120 bits leave forgery out of reach while
//! the key id byte lets keys rotate.
//!
//! The controller hands agents at most [`MAX_KEYS`] keys: the one to sign with, the
//! previous one (agents that have not polled yet still sign with it) and the next one
//! (accepted before anyone signs with it), so a rotation never drops a probe.

use crate::api::ProbeAuth;
use crate::packet::{PACKET_LEN, PROBE_LEN, Packet, PacketKind, SENT_AT, VERSION_TAGGED, Wire};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::IpAddr;
use std::time::Duration;
use thiserror::Error;

/// Length of a cluster key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of the truncated MAC on the wire.
pub const TAG_LEN: usize = 15;
/// Most keys a keyring holds (previous, signing, next, and one spare).
pub const MAX_KEYS: usize = 4;
/// Offset of the key id byte.
const KEY_ID_AT: usize = 48;
/// Offset of the MAC; it covers every byte before it and every byte after the packet.
const TAG_AT: usize = KEY_ID_AT + 1;
/// How far a PROBE's send time may be from the responder's clock when the controller
/// says nothing: hosts run NTP (milliseconds apart); this leaves room for a stepped clock.
pub const DEFAULT_TAG_WINDOW: Duration = Duration::from_secs(30);

/// [`DEFAULT_TAG_WINDOW`], for serde defaults.
pub fn default_tag_window() -> Duration {
    DEFAULT_TAG_WINDOW
}

/// The addresses a packet travels between, as its sender addressed it and its receiver
/// saw it: part of the MAC, so a tag is valid on one flow only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Sender address.
    pub src: IpAddr,
    /// Sender UDP port.
    pub src_port: u16,
    /// Receiver address.
    pub dst: IpAddr,
    /// Receiver UDP port.
    pub dst_port: u16,
}

impl Flow {
    /// Fixed-width bytes: both addresses as IPv6 (IPv4-mapped), then both ports.
    fn bytes(&self) -> [u8; 36] {
        let v6 = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let mut b = [0u8; 36];
        b[..16].copy_from_slice(&v6(self.src));
        b[16..32].copy_from_slice(&v6(self.dst));
        b[32..34].copy_from_slice(&self.src_port.to_be_bytes());
        b[34..36].copy_from_slice(&self.dst_port.to_be_bytes());
        b
    }
}

/// Why a received packet's tag was refused (each is counted; nothing is answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum AuthError {
    /// A version 1 packet (or not 64 bytes) where a tag is required.
    #[error("packet carries no tag")]
    Untagged,
    /// A tag under a key id this keyring does not hold (rotated out, or forged).
    #[error("unknown probe key id {0}")]
    UnknownKey(u8),
    /// The MAC does not match: altered in flight, not made with the cluster key, or
    /// made for another flow (replayed from elsewhere).
    #[error("bad probe tag")]
    BadTag,
    /// A valid PROBE sent longer ago (or further ahead) than the tag window: replayed.
    #[error("probe outside its time window")]
    Stale,
}

impl AuthError {
    /// Stable short name for rejection counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Untagged => "untagged",
            Self::UnknownKey(_) => "unknown_key",
            Self::BadTag => "bad_tag",
            Self::Stale => "stale",
        }
    }
}

/// Why a key set from the controller cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyringError {
    /// More than [`MAX_KEYS`] keys.
    #[error("{0} probe keys, at most {MAX_KEYS} accepted")]
    TooMany(usize),
    /// Two keys with one id.
    #[error("probe key id {0} given twice")]
    DuplicateId(u8),
    /// The signing key id is not among the keys.
    #[error("signing probe key {0} is not in the key set")]
    SignKeyMissing(u8),
    /// A key that is not [`KEY_LEN`] bytes of hex.
    #[error("probe key {0} is not {KEY_LEN} bytes of hex")]
    BadKey(u8),
}

/// One key with its HMAC key schedule already computed.
#[derive(Clone)]
struct Key {
    id: u8,
    mac: Hmac<Sha256>,
}

/// The keys an agent signs and verifies probe packets with.
#[derive(Clone)]
pub struct Keyring {
    sign: Key,
    accept: Vec<Key>,
    window: Duration,
}

/// Shows key ids only: keyrings end up in logs.
impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.accept.iter().map(|k| k.id).collect();
        f.debug_struct("Keyring")
            .field("sign", &self.sign.id)
            .field("accept", &ids)
            .field("window", &self.window)
            .finish()
    }
}

impl Keyring {
    /// A keyring signing with key `sign` and accepting every key of `keys`.
    pub fn new(sign: u8, keys: &[(u8, [u8; KEY_LEN])]) -> Result<Self, KeyringError> {
        if keys.len() > MAX_KEYS {
            return Err(KeyringError::TooMany(keys.len()));
        }
        let mut accept: Vec<Key> = Vec::with_capacity(keys.len());
        for (id, key) in keys {
            if accept.iter().any(|k| k.id == *id) {
                return Err(KeyringError::DuplicateId(*id));
            }
            let mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
                .map_err(|_| KeyringError::BadKey(*id))?;
            accept.push(Key { id: *id, mac });
        }
        let sign = accept
            .iter()
            .find(|k| k.id == sign)
            .cloned()
            .ok_or(KeyringError::SignKeyMissing(sign))?;
        Ok(Self {
            sign,
            accept,
            window: DEFAULT_TAG_WINDOW,
        })
    }

    /// The same keys with PROBE time window `window`.
    pub fn with_window(self, window: Duration) -> Self {
        Self { window, ..self }
    }

    /// How far a PROBE's send time may be from the receiver's clock.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The keyring of the controller's settings; `None` when authentication is off.
    pub fn from_api(auth: &ProbeAuth) -> Result<Option<Self>, KeyringError> {
        let Some(sign) = auth.sign_key else {
            return Ok(None);
        };
        if auth.keys.len() > MAX_KEYS {
            return Err(KeyringError::TooMany(auth.keys.len()));
        }
        let keys = auth
            .keys
            .iter()
            .map(|k| {
                decode_key(&k.key)
                    .map(|b| (k.id, b))
                    .ok_or(KeyringError::BadKey(k.id))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(sign, &keys).map(|r| Some(r.with_window(auth.tag_window)))
    }

    /// Id of the key packets are signed with.
    pub fn sign_id(&self) -> u8 {
        self.sign.id
    }

    /// The wire form of `pkt` on `flow`, tagged with the signing key; a PROBE carries
    /// `now_ms` (ms since the Unix epoch) as its send time.
    pub fn seal(&self, pkt: &Packet, flow: &Flow, now_ms: u64) -> Wire {
        let mut wire = Wire::new(pkt);
        let b = wire.bytes_mut();
        b[2] = VERSION_TAGGED;
        b[KEY_ID_AT] = self.sign.id;
        if pkt.kind == PacketKind::Probe {
            b[SENT_AT..SENT_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
        }
        let full = mac(&self.sign, b, flow).finalize().into_bytes();
        b[TAG_AT..PACKET_LEN].copy_from_slice(&full[..TAG_LEN]);
        wire
    }

    /// Checks the tag of a received payload seen on `flow` (in constant time) and, for a
    /// PROBE, that its send time lies within the window of `now_ms`.
    pub fn verify(&self, buf: &[u8], flow: &Flow, now_ms: u64) -> Result<(), AuthError> {
        let probe = buf.len() >= PACKET_LEN && buf[3] == PacketKind::Probe as u8;
        let want = if probe { PROBE_LEN } else { PACKET_LEN };
        if buf.len() != want || buf[2] != VERSION_TAGGED {
            return Err(AuthError::Untagged);
        }
        let id = buf[KEY_ID_AT];
        let key = self
            .accept
            .iter()
            .find(|k| k.id == id)
            .ok_or(AuthError::UnknownKey(id))?;
        mac(key, buf, flow)
            .verify_truncated_left(&buf[TAG_AT..PACKET_LEN])
            .map_err(|_| AuthError::BadTag)?;
        if probe {
            let mut sent = [0u8; 8];
            sent.copy_from_slice(&buf[SENT_AT..SENT_AT + 8]);
            let sent = u64::from_be_bytes(sent);
            if now_ms.abs_diff(sent) > self.window.as_millis() as u64 {
                return Err(AuthError::Stale);
            }
        }
        Ok(())
    }
}

/// The MAC of `b` (its tag bytes excluded) on `flow` under `key`, not yet finalized.
fn mac(key: &Key, b: &[u8], flow: &Flow) -> Hmac<Sha256> {
    let mut mac = key.mac.clone();
    mac.update(&b[..TAG_AT]);
    mac.update(&b[PACKET_LEN..]);
    mac.update(&flow.bytes());
    mac
}

/// Lowercase hex of a key, as the API carries it.
pub fn encode_key(key: &[u8; KEY_LEN]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key from its hex form; `None` unless exactly [`KEY_LEN`] bytes of hex.
pub fn decode_key(hex: &str) -> Option<[u8; KEY_LEN]> {
    let digits = hex.as_bytes();
    if digits.len() != 2 * KEY_LEN {
        return None;
    }
    let mut key = [0u8; KEY_LEN];
    for (out, pair) in key.iter_mut().zip(digits.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *out = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ProbeKey;
    use crate::{PacketError, ProbeClass, TimestampSource};

    const K1: [u8; KEY_LEN] = [0x11; KEY_LEN];
    const K2: [u8; KEY_LEN] = [0x22; KEY_LEN];
    const NOW: u64 = 1_800_000_000_000;

    fn flow() -> Flow {
        Flow {
            src: "10.0.0.1".parse().unwrap(),
            src_port: 50_000,
            dst: "10.0.1.2".parse().unwrap(),
            dst_port: 4791,
        }
    }

    fn probe() -> Packet {
        Packet::probe(
            ProbeClass::TorMesh,
            9,
            1,
            0x00ab_cdef,
            2,
            0x0012_3456,
            0xfeed,
        )
        .with_src_port(50_000)
    }

    #[test]
    fn tag_verifies_and_the_packet_still_decodes() {
        let ring = Keyring::new(1, &[(1, K1)]).unwrap();
        for pkt in [
            probe(),
            probe().ack1(7),
            probe().ack2(7, 1234, TimestampSource::Hardware),
        ] {
            let w = ring.seal(&pkt, &flow(), NOW);
            let b = w.as_bytes();
            assert_eq!(b[2], VERSION_TAGGED);
            assert_eq!(b[48], 1);
            assert_eq!(ring.verify(b, &flow(), NOW), Ok(()));
            assert_eq!(Packet::decode(b), Ok(pkt));
        }
    }

    #[test]
    fn any_flipped_bit_fails() {
        let ring = Keyring::new(1, &[(1, K1), (2, K2)]).unwrap();
        let good = ring.seal(&probe(), &flow(), NOW);
        let good = good.as_bytes();
        assert_eq!(good.len(), PROBE_LEN);
        for byte in 0..PROBE_LEN {
            for bit in 0..8 {
                let mut b = good.to_vec();
                b[byte] ^= 1 << bit;
                let got = ring.verify(&b, &flow(), NOW);
                assert!(got.is_err(), "byte {byte} bit {bit} still verifies");
                // A decodable packet must never slip through with a tag made for another.
                if Packet::decode(&b).is_ok() {
                    assert_ne!(got, Ok(()));
                }
            }
        }
    }

    #[test]
    fn old_and_new_key_both_accepted_during_rotation() {
        let old = Keyring::new(1, &[(1, K1)]).unwrap();
        let overlap = Keyring::new(2, &[(1, K1), (2, K2)]).unwrap();
        let new = Keyring::new(2, &[(2, K2)]).unwrap();
        let f = flow();
        let by_old = old.seal(&probe(), &f, NOW);
        let by_new = overlap.seal(&probe(), &f, NOW);
        let (by_old, by_new) = (by_old.as_bytes(), by_new.as_bytes());
        assert_eq!(by_new[48], 2);
        assert_eq!(overlap.verify(by_old, &f, NOW), Ok(()));
        assert_eq!(overlap.verify(by_new, &f, NOW), Ok(()));
        assert_eq!(new.verify(by_new, &f, NOW), Ok(()));
        assert_eq!(new.verify(by_old, &f, NOW), Err(AuthError::UnknownKey(1)));
        assert_eq!(old.verify(by_new, &f, NOW), Err(AuthError::UnknownKey(2)));
    }

    #[test]
    fn wrong_key_under_a_known_id_and_untagged_packets_are_refused() {
        let ring = Keyring::new(1, &[(1, K1)]).unwrap();
        let f = flow();
        let forged = Keyring::new(1, &[(1, K2)]).unwrap().seal(&probe(), &f, NOW);
        let forged = forged.as_bytes();
        assert_eq!(ring.verify(forged, &f, NOW), Err(AuthError::BadTag));
        assert_eq!(
            ring.verify(Wire::new(&probe()).as_bytes(), &f, NOW),
            Err(AuthError::Untagged)
        );
        assert_eq!(
            ring.verify(&forged[..63], &f, NOW),
            Err(AuthError::Untagged)
        );
        // A tagged PROBE cut to the unpadded length carries no send time: refused.
        assert_eq!(
            ring.verify(&forged[..PACKET_LEN], &f, NOW),
            Err(AuthError::Untagged)
        );
        // Version 1 keeps its zero rule; version 2 tag bytes are the keyring's business.
        let mut v1 = probe().encode();
        v1[60] = 1;
        assert!(matches!(
            Packet::decode(&v1),
            Err(PacketError::Malformed(_))
        ));
    }

    #[test]
    fn key_sets_are_validated() {
        assert_eq!(
            Keyring::new(3, &[(1, K1)]).unwrap_err(),
            KeyringError::SignKeyMissing(3)
        );
        assert_eq!(
            Keyring::new(1, &[(1, K1), (1, K2)]).unwrap_err(),
            KeyringError::DuplicateId(1)
        );
        assert_eq!(
            Keyring::new(1, &[(1, K1); 5]).unwrap_err(),
            KeyringError::TooMany(5)
        );
        let api = |key: &str| ProbeAuth {
            sign_key: Some(4),
            keys: vec![ProbeKey {
                id: 4,
                key: key.to_string(),
            }],
            source_pps: 100.0,
            source_burst: 10,
            tag_window: Duration::from_secs(7),
        };
        let ring = Keyring::from_api(&api(&encode_key(&K2))).unwrap().unwrap();
        assert_eq!(ring.sign_id(), 4);
        assert_eq!(ring.window(), Duration::from_secs(7));
        for bad in ["", "zz", &"g".repeat(64), &"1".repeat(63), &"ab".repeat(33)] {
            assert_eq!(
                Keyring::from_api(&api(bad)).unwrap_err(),
                KeyringError::BadKey(4),
                "{bad:?}"
            );
        }
        let off = ProbeAuth {
            sign_key: None,
            ..api("")
        };
        assert!(Keyring::from_api(&off).unwrap().is_none());
        assert!(!format!("{ring:?}").contains("22"));
    }

    #[test]
    fn a_tag_holds_on_its_own_flow_and_window_only() {
        let ring = Keyring::new(1, &[(1, K1)])
            .unwrap()
            .with_window(Duration::from_secs(10));
        let f = flow();
        let sealed = ring.seal(&probe(), &f, NOW);
        let b = sealed.as_bytes();
        assert_eq!(ring.verify(b, &f, NOW + 10_000), Ok(()));
        assert_eq!(ring.verify(b, &f, NOW - 10_000), Ok(()));
        assert_eq!(ring.verify(b, &f, NOW + 10_001), Err(AuthError::Stale));
        assert_eq!(ring.verify(b, &f, NOW - 10_001), Err(AuthError::Stale));
        // Replayed from another address or port, or to another responder: refused.
        let moved = [
            Flow {
                src: "10.0.0.9".parse().unwrap(),
                ..f
            },
            Flow {
                src_port: 50_001,
                ..f
            },
            Flow {
                dst: "10.0.1.3".parse().unwrap(),
                ..f
            },
            Flow {
                dst_port: 4792,
                ..f
            },
            Flow {
                src: "::ffff:10.0.0.2".parse().unwrap(),
                ..f
            },
        ];
        for other in moved {
            assert_eq!(
                ring.verify(b, &other, NOW),
                Err(AuthError::BadTag),
                "{other:?}"
            );
        }
        // An IPv4 address and its IPv4-mapped form are one address.
        let mapped = Flow {
            src: "::ffff:10.0.0.1".parse().unwrap(),
            ..f
        };
        assert_eq!(ring.verify(b, &mapped, NOW), Ok(()));
        // ACKs are bound to their flow; their freshness is the prober's outstanding table.
        let ack = ring.seal(&probe().ack1(7), &f, NOW);
        assert_eq!(ack.as_bytes().len(), PACKET_LEN);
        assert_eq!(ring.verify(ack.as_bytes(), &f, NOW + 3_600_000), Ok(()));
        let elsewhere = Flow { src_port: 1, ..f };
        assert_eq!(
            ring.verify(ack.as_bytes(), &elsewhere, NOW),
            Err(AuthError::BadTag)
        );
    }

    #[test]
    fn keys_round_trip_through_hex() {
        let key: [u8; KEY_LEN] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(decode_key(&encode_key(&key)), Some(key));
        assert_eq!(encode_key(&key).len(), 64);
    }
}
