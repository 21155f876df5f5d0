//! Deterministic randomness: a seeded SplitMix64 stream for per-probe draws and a
//! stateless mixer for values that must be a pure function of their inputs (ECMP hashes,
//! congestion schedules), so a run is reproducible from its seed.

/// SplitMix64's output function: a strong 64-bit mixer.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes a sequence of words into one hash.
pub fn hash(words: &[u64]) -> u64 {
    words.iter().fold(0x243f_6a88_85a3_08d3, |h, &w| mix(h ^ w))
}

/// A uniform value in [0, 1) from a hash.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The seed of a randomized suite: `ROCEMESH_EVAL_SEED` when set (a replay), else a fresh
/// one from the clock. Panics on a value that is not a number (test and CLI use only).
pub fn suite_seed() -> u64 {
    match std::env::var("ROCEMESH_EVAL_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("ROCEMESH_EVAL_SEED={s:?} is not a number")),
        Err(_) => rocemesh_proto::now_unix_ns() as u64,
    }
}

/// A seeded random stream (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        unit(self.next_u64())
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.unit() < p)
    }

    /// A standard normal draw (Box-Muller, one value per call).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A log-normal draw with the given median and shape (sigma of the log).
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_roughly_uniform() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.next_u64(), b.next_u64());
        let n = 100_000;
        let mean = (0..n).map(|_| a.unit()).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        let z: Vec<f64> = (0..n).map(|_| a.normal()).collect();
        let m = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        assert!(
            m.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "mean {m} var {var}"
        );
        let mut med: Vec<f64> = (0..10_001).map(|_| a.lognormal(5.0, 0.5)).collect();
        med.sort_by(f64::total_cmp);
        assert!((med[5_000] - 5.0).abs() < 0.2, "median {}", med[5_000]);
    }
}
