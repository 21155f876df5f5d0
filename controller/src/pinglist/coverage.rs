//! R-Pingmesh Eq. 1: how many inter-ToR 5-tuples (k) a ToR needs so that ECMP, hashing
//! them uniformly onto N parallel paths, covers every path with probability >= P.
//!
//! The equation's inclusion-exclusion sum alternates with binomials up to C(N, N/2) and
//! cancels catastrophically in f64 for large N. The same probability is computed here
//! from the occupancy Markov chain instead (state = paths covered so far; a new tuple
//! lands on an uncovered path with probability (N - j) / N): only non-negative terms,
//! so it is exact to rounding for every N.

/// Smallest k >= N with P(k uniform tuples cover all N paths) >= `p`.
/// `n` must be >= 1 and `p` in (0, 1).
pub fn tuples_per_tor(n: u32, p: f64) -> u32 {
    let n_usize = n as usize;
    // dist[j] = P(exactly j paths covered).
    let mut dist = vec![0.0f64; n_usize + 1];
    dist[0] = 1.0;
    let nf = f64::from(n);
    let mut k: u32 = 0;
    loop {
        for j in (0..=n_usize).rev() {
            let stay = j as f64 / nf;
            let from_below = if j > 0 {
                dist[j - 1] * (nf - (j - 1) as f64) / nf
            } else {
                0.0
            };
            dist[j] = dist[j] * stay + from_below;
        }
        k += 1;
        if k >= n && dist[n_usize] >= p {
            return k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The equation exactly as printed, fine for small N.
    fn eq1_miss_probability(n: u32, k: u32) -> f64 {
        let mut sum = 0.0;
        let mut binom = 1.0;
        for i in 1..=n {
            binom = binom * f64::from(n - i + 1) / f64::from(i);
            let sign = if i % 2 == 1 { 1.0 } else { -1.0 };
            sum += sign * binom * (1.0 - f64::from(i) / f64::from(n)).powi(k as i32);
        }
        sum
    }

    fn eq1_argmin(n: u32, p: f64) -> u32 {
        (n..)
            .find(|&k| eq1_miss_probability(n, k) <= 1.0 - p)
            .unwrap()
    }

    #[test]
    fn known_values() {
        // N = 4, P = 0.99: (3/4)^k dominates; k = 21 is the first with miss <= 1 %.
        assert_eq!(tuples_per_tor(4, 0.99), 21);
        assert!(eq1_miss_probability(4, 20) > 0.01 && eq1_miss_probability(4, 21) <= 0.01);
        assert_eq!(tuples_per_tor(1, 0.99), 1);
        assert_eq!(tuples_per_tor(2, 0.99), 8); // miss = 2 * 2^-k
        assert_eq!(tuples_per_tor(2, 0.5), 2);
    }

    #[test]
    fn matches_the_printed_equation_where_it_is_stable() {
        for n in 1..=16 {
            for p in [0.5, 0.9, 0.99, 0.999] {
                assert_eq!(tuples_per_tor(n, p), eq1_argmin(n, p), "N={n} P={p}");
            }
        }
    }

    #[test]
    fn large_n_stays_sane() {
        // Coupon collector: k ~ N (ln N + ln(1/(1-P))); the alternating sum is garbage here.
        let k = tuples_per_tor(256, 0.99);
        let approx = 256.0 * ((256f64).ln() + (100f64).ln());
        assert!(
            (f64::from(k) - approx).abs() < 0.05 * approx,
            "k={k} approx={approx}"
        );
    }

    #[test]
    fn monte_carlo_agrees() {
        // Throw k balls into N bins with a xorshift generator; cover-all frequency ~ P.
        let (n, p) = (8u32, 0.99);
        let k = tuples_per_tor(n, p);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let trials = 20_000;
        let cover = |k: u32, next: &mut dyn FnMut() -> u64| {
            let mut seen = 0u32;
            for _ in 0..k {
                seen |= 1 << (next() % u64::from(n));
            }
            seen == (1 << n) - 1
        };
        let hits = (0..trials).filter(|_| cover(k, &mut next)).count();
        assert!(
            hits as f64 / trials as f64 >= 0.985,
            "k={k}: {hits}/{trials}"
        );
        let fewer = (0..trials).filter(|_| cover(k - 3, &mut next)).count();
        assert!(
            (fewer as f64 / trials as f64) < p,
            "k-3 should fall short of P: {fewer}/{trials}"
        );
    }
}
