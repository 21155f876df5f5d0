//! Probe authentication: a keyed MAC in bytes 48..64 of every PROBE/ACK1/ACK2, so a
//! responder answers only cluster members and a prober trusts only real ACKs.
//!
//! A tagged packet has version [`VERSION_TAGGED`], the key id in byte 48 and
//! HMAC-SHA256(key, bytes 0..49) truncated to [`TAG_LEN`] bytes in bytes 49..64.
//! HMAC-SHA256 because RustCrypto's `hmac` and `sha2` are already in the dependency tree
//! (through sqlx), are widely reviewed, and the key schedule is precomputed once per key,
//! so a tag costs two SHA-256 compressions; 120 bits leave forgery out of reach while
//! the key id byte lets keys rotate.
//!
//! The controller hands agents at most [`MAX_KEYS`] keys: the one to sign with, the
//! previous one (agents that have not polled yet still sign with it) and the next one
//! (accepted before anyone signs with it), so a rotation never drops a probe.

use crate::api::ProbeAuth;
use crate::packet::{PACKET_LEN, Packet, VERSION_TAGGED};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

/// Length of a cluster key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of the truncated MAC on the wire.
pub const TAG_LEN: usize = 15;
/// Most keys a keyring holds (previous, signing, next, and one spare).
pub const MAX_KEYS: usize = 4;
/// Offset of the key id byte.
const KEY_ID_AT: usize = 48;
/// Offset of the MAC; it covers every byte before it.
const TAG_AT: usize = KEY_ID_AT + 1;

/// Why a received packet's tag was refused (each is counted; nothing is answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum AuthError {
    /// A version 1 packet (or not 64 bytes) where a tag is required.
    #[error("packet carries no tag")]
    Untagged,
    /// A tag under a key id this keyring does not hold (rotated out, or forged).
    #[error("unknown probe key id {0}")]
    UnknownKey(u8),
    /// The MAC does not match: altered in flight, or not made with the cluster key.
    #[error("bad probe tag")]
    BadTag,
}

impl AuthError {
    /// Stable short name for rejection counters.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Untagged => "untagged",
            Self::UnknownKey(_) => "unknown_key",
            Self::BadTag => "bad_tag",
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
}

/// Shows key ids only: keyrings end up in logs.
impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.accept.iter().map(|k| k.id).collect();
        f.debug_struct("Keyring")
            .field("sign", &self.sign.id)
            .field("accept", &ids)
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
        Ok(Self { sign, accept })
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
        Self::new(sign, &keys).map(Some)
    }

    /// Id of the key packets are signed with.
    pub fn sign_id(&self) -> u8 {
        self.sign.id
    }

    /// The wire form of `pkt`, tagged with the signing key.
    pub fn seal(&self, pkt: &Packet) -> [u8; PACKET_LEN] {
        let mut b = pkt.encode();
        b[2] = VERSION_TAGGED;
        b[KEY_ID_AT] = self.sign.id;
        let mut mac = self.sign.mac.clone();
        mac.update(&b[..TAG_AT]);
        let full = mac.finalize().into_bytes();
        b[TAG_AT..].copy_from_slice(&full[..TAG_LEN]);
        b
    }

    /// Checks the tag of a received 64-byte payload (in constant time).
    pub fn verify(&self, buf: &[u8]) -> Result<(), AuthError> {
        if buf.len() != PACKET_LEN || buf[2] != VERSION_TAGGED {
            return Err(AuthError::Untagged);
        }
        let id = buf[KEY_ID_AT];
        let key = self
            .accept
            .iter()
            .find(|k| k.id == id)
            .ok_or(AuthError::UnknownKey(id))?;
        let mut mac = key.mac.clone();
        mac.update(&buf[..TAG_AT]);
        mac.verify_truncated_left(&buf[TAG_AT..])
            .map_err(|_| AuthError::BadTag)
    }
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
            let b = ring.seal(&pkt);
            assert_eq!(b[2], VERSION_TAGGED);
            assert_eq!(b[48], 1);
            assert_eq!(ring.verify(&b), Ok(()));
            assert_eq!(Packet::decode(&b), Ok(pkt));
        }
    }

    #[test]
    fn any_flipped_bit_fails() {
        let ring = Keyring::new(1, &[(1, K1), (2, K2)]).unwrap();
        let good = ring.seal(&probe());
        for byte in 0..PACKET_LEN {
            for bit in 0..8 {
                let mut b = good;
                b[byte] ^= 1 << bit;
                let got = ring.verify(&b);
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
        let by_old = old.seal(&probe());
        let by_new = overlap.seal(&probe());
        assert_eq!(by_new[48], 2);
        assert_eq!(overlap.verify(&by_old), Ok(()));
        assert_eq!(overlap.verify(&by_new), Ok(()));
        assert_eq!(new.verify(&by_new), Ok(()));
        assert_eq!(new.verify(&by_old), Err(AuthError::UnknownKey(1)));
        assert_eq!(old.verify(&by_new), Err(AuthError::UnknownKey(2)));
    }

    #[test]
    fn wrong_key_under_a_known_id_and_untagged_packets_are_refused() {
        let ring = Keyring::new(1, &[(1, K1)]).unwrap();
        let forged = Keyring::new(1, &[(1, K2)]).unwrap().seal(&probe());
        assert_eq!(ring.verify(&forged), Err(AuthError::BadTag));
        assert_eq!(ring.verify(&probe().encode()), Err(AuthError::Untagged));
        assert_eq!(ring.verify(&forged[..63]), Err(AuthError::Untagged));
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
        };
        let ring = Keyring::from_api(&api(&encode_key(&K2))).unwrap().unwrap();
        assert_eq!(ring.sign_id(), 4);
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
    fn keys_round_trip_through_hex() {
        let key: [u8; KEY_LEN] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(decode_key(&encode_key(&key)), Some(key));
        assert_eq!(encode_key(&key).len(), 64);
    }
}
