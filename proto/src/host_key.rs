//! Per-host upload keys: the controller issues a random key to an agent at each
//! registration and stores only its SHA-256 fingerprint; the agent presents the key with
//! every result batch, so the analyzer can tell that a batch naming host 7 in its header
//! comes from host 7's agent and not from any holder of an agent token.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// An upload key as issued (hex); `Debug` never prints it (registration replies get logged).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HostKey(pub String);

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostKey(<redacted>)")
    }
}

/// HTTP header carrying the key on `POST /api/v1/results`.
pub const HEADER: &str = "x-rocemesh-host-key";
/// Length of a key in hex characters (32 random bytes).
pub const KEY_HEX_LEN: usize = 64;

/// The SHA-256 of `key`, in hex: what the database holds.
pub fn fingerprint(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `presented` is the key whose fingerprint is `stored`, in time that does not
/// depend on where they differ.
pub fn matches(stored: &str, presented: &str) -> bool {
    let got = fingerprint(presented);
    if got.len() != stored.len() {
        return false;
    }
    let diff = got
        .bytes()
        .zip(stored.bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_issued_key_matches_its_fingerprint() {
        let key = "ab".repeat(32);
        let stored = fingerprint(&key);
        assert_eq!(stored.len(), 64);
        assert!(matches(&stored, &key));
        assert!(!matches(&stored, &"ac".repeat(32)));
        assert!(!matches(&stored, ""));
        assert!(!matches(&stored, &stored), "the fingerprint is not the key");
    }
}
