//! The `X-Rocemesh-Signature` header: `sha256=<hex HMAC-SHA256 of the body>` keyed with
//! the receiver's secret, so a receiver can tell rocemesh's requests from forgeries.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Name of the signature header.
pub const HEADER: &str = "X-Rocemesh-Signature";

fn mac(secret: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length (long ones are hashed first): this cannot fail.
    <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length")
}

/// The header value for `body` signed with `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut m = mac(secret);
    m.update(body);
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

/// Checks a header value against `body` in constant time (what a receiver does).
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(sig) = header
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
    else {
        return false;
    };
    let mut m = mac(secret);
    m.update(body);
    m.verify_slice(&sig).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_reference_vector() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verify_rejects_tampering() {
        let h = sign(b"k", b"body");
        assert!(verify(b"k", b"body", &h));
        assert!(!verify(b"k", b"bodY", &h));
        assert!(!verify(b"other", b"body", &h));
        assert!(!verify(b"k", b"body", "sha256=zz"));
        assert!(!verify(b"k", b"body", &h[7..]));
    }
}
