//! Sparse log-linear histogram of nanosecond delays.
//!
//! Values below 64 get one exact bucket each; above, every power of two is split
//! into 64 equal buckets, so a bucket's midpoint is within 1/128 (< 1 %) of any
//! value it holds. The 1,728 buckets are stored in 16-bucket blocks that are
//! allocated on first use, kept in block order and found through a bit mask of the
//! blocks present (the block's rank among them is its index), so an RNIC whose RTTs
//! span two octaves costs a few hundred bytes in one allocation, and an empty histogram
//! costs no heap at all. `reset` keeps the allocation, so a reused histogram inserts
//! without allocating.

use rocemesh_proto::api::Quantiles;

/// log2 of the buckets per power of two.
const SUB_BITS: u32 = 6;
/// Buckets per power of two (and the exact range below it).
const SUB: u32 = 1 << SUB_BITS;
/// Buckets covering the whole `u32` range.
const BUCKETS: usize = (SUB + (32 - SUB_BITS) * SUB) as usize;
/// Buckets per lazily allocated block.
const BLOCK: usize = 16;
/// Number of blocks (bits of [`Histogram::present`]).
const BLOCKS: usize = BUCKETS / BLOCK;
/// Words of [`Histogram::present`].
const WORDS: usize = BLOCKS.div_ceil(64);

/// The percentiles every SLA row reports, in the order of [`Quantiles`].
const LEVELS: [f64; 4] = [0.50, 0.90, 0.99, 0.999];

/// Bucket index of a value.
#[inline]
fn bucket_of(v: u32) -> usize {
    if v < SUB {
        v as usize
    } else {
        let shift = 31 - v.leading_zeros() - SUB_BITS;
        (SUB + shift * SUB + ((v >> shift) - SUB)) as usize
    }
}

/// Representative value (midpoint) of a bucket.
fn value_of(bucket: usize) -> u64 {
    let b = bucket as u64;
    let sub = SUB as u64;
    if b < sub {
        b
    } else {
        let shift = (b - sub) / sub;
        let low = (sub + (b - sub) % sub) << shift;
        low + ((1u64 << shift) >> 1)
    }
}

/// Delay distribution of one metric in one scope and period.
#[derive(Debug)]
pub(crate) struct Histogram {
    count: u64,
    /// Least and largest sample (`u32::MAX` and 0 while empty).
    min: u32,
    max: u32,
    /// Bit `b` set: block `b` is in `blocks`.
    present: [u64; WORDS],
    /// The blocks present, by block number.
    blocks: Vec<[u32; BLOCK]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            count: 0,
            min: u32::MAX,
            max: 0,
            present: [0; WORDS],
            blocks: Vec::new(),
        }
    }
}

impl Histogram {
    /// Where block `b` is (or goes) in `blocks`: the blocks present below it.
    #[inline(always)]
    fn rank(&self, b: usize) -> usize {
        let (word, bit) = (b / 64, b % 64);
        let below: u32 = self.present[..word].iter().map(|w| w.count_ones()).sum();
        (below + (self.present[word] & ((1u64 << bit) - 1)).count_ones()) as usize
    }

    /// The counts of block `b`, added (zero) if not present. Grows `blocks` by exactly
    /// one block: a histogram holds the few blocks its samples span, not a doubling's slack.
    #[inline(always)]
    fn block_mut(&mut self, b: usize) -> &mut [u32; BLOCK] {
        let at = self.rank(b);
        let (word, bit) = (b / 64, 1u64 << (b % 64));
        if self.present[word] & bit == 0 {
            self.present[word] |= bit;
            self.blocks.reserve_exact(1);
            self.blocks.insert(at, [0; BLOCK]);
        }
        &mut self.blocks[at]
    }

    /// The blocks present with their block numbers, in order.
    fn iter_blocks(&self) -> impl Iterator<Item = (usize, &[u32; BLOCK])> + '_ {
        let numbers = (0..BLOCKS).filter(|&b| self.present[b / 64] & (1u64 << (b % 64)) != 0);
        numbers.zip(&self.blocks)
    }

    /// Adds one sample. O(1); allocates only the first time a block is touched.
    /// Inlined: ingest inserts eight samples per result, and the call would cost a
    /// third of the insert.
    #[inline(always)]
    pub(crate) fn insert(&mut self, v: u32) {
        let bucket = bucket_of(v);
        let cell = &mut self.block_mut(bucket / BLOCK)[bucket % BLOCK];
        *cell = cell.saturating_add(1);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.count += 1;
    }

    /// Adds every sample of `other`: the same histogram as inserting both sets of
    /// samples into one.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        for (b, theirs) in other.iter_blocks() {
            for (c, &n) in self.block_mut(b).iter_mut().zip(theirs) {
                *c = c.saturating_add(n);
            }
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
    }

    /// Number of samples.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Forgets every sample but keeps the allocations for the next period.
    pub(crate) fn reset(&mut self) {
        if self.count == 0 {
            return;
        }
        self.present = [0; WORDS];
        self.blocks.clear();
        (self.count, self.min, self.max) = (0, u32::MAX, 0);
    }

    /// P50/P90/P99/P999 by nearest rank (the smallest value with at least
    /// `ceil(q * n)` samples at or below it), each within 1 % of the exact one.
    pub(crate) fn quantiles(&self) -> Quantiles {
        let mut out = [None; 4];
        if self.count > 0 {
            let ranks =
                LEVELS.map(|q| ((q * self.count as f64).ceil() as u64).clamp(1, self.count));
            let mut next = 0;
            let mut seen = 0u64;
            'walk: for (block_no, block) in self.iter_blocks() {
                for (i, &c) in block.iter().enumerate() {
                    seen += u64::from(c);
                    while next < ranks.len() && seen >= ranks[next] {
                        let v = value_of(block_no * BLOCK + i);
                        out[next] = Some(v.clamp(u64::from(self.min), u64::from(self.max)));
                        next += 1;
                    }
                    if next == ranks.len() {
                        break 'walk;
                    }
                }
            }
        }
        Quantiles {
            p50: out[0],
            p90: out[1],
            p99: out[2],
            p999: out[3],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn exact(sorted: &[u32], q: f64) -> u64 {
        let n = sorted.len() as u64;
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        u64::from(sorted[rank as usize - 1])
    }

    fn check(values: &[u32]) {
        let mut h = Histogram::default();
        for &v in values {
            h.insert(v);
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let got = h.quantiles();
        let got = [got.p50, got.p90, got.p99, got.p999];
        for (q, g) in LEVELS.iter().zip(got) {
            let want = exact(&sorted, *q);
            let g = g.expect("non-empty histogram has quantiles");
            let err = (g as f64 - want as f64).abs() / (want.max(1) as f64);
            assert!(
                err <= 0.01,
                "q{q}: got {g}, exact {want}, error {err} (n = {})",
                values.len()
            );
        }
        assert_eq!(h.count(), values.len() as u64);
    }

    #[test]
    fn bucket_edges_are_monotone_and_tight() {
        let mut last = 0;
        for v in (0..200_000u32).chain([u32::MAX - 1, u32::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last && b < BUCKETS);
            last = b;
            let mid = value_of(b) as f64;
            assert!(
                (mid - v as f64).abs() <= (v as f64) / 128.0 + 0.5,
                "{v} -> {mid}"
            );
        }
        assert_eq!(bucket_of(u32::MAX), BUCKETS - 1);
    }

    #[test]
    fn empty_histogram_has_no_quantiles() {
        let h = Histogram::default();
        assert_eq!(h.quantiles(), Quantiles::default());
        let mut h = Histogram::default();
        h.insert(5);
        h.reset();
        assert_eq!(h.quantiles(), Quantiles::default());
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn matches_exact_quantiles_on_random_data() {
        let mut rng = StdRng::seed_from_u64(7);
        // Log-uniform over 10 ns .. 4 s, large sample.
        let wide: Vec<u32> = (0..100_000)
            .map(|_| 10f64.powf(rng.random_range(1.0..9.6)) as u32)
            .collect();
        check(&wide);
        // Realistic RTTs: 8-12 us body with a 1 % tail up to 2 ms.
        let rtt: Vec<u32> = (0..50_000)
            .map(|_| {
                if rng.random_bool(0.01) {
                    rng.random_range(100_000..2_000_000)
                } else {
                    rng.random_range(8_000..12_000)
                }
            })
            .collect();
        check(&rtt);
        // Small samples, where p999 is the maximum.
        for n in [1, 2, 3, 7, 10, 999, 1000, 1001] {
            let small: Vec<u32> = (0..n).map(|_| rng.random_range(0..5_000_000)).collect();
            check(&small);
        }
        check(&[0, 0, 0, u32::MAX]);
    }

    #[test]
    fn merged_is_inserted_together() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        let mut both = Histogram::default();
        for i in 0..20_000 {
            let v = 10f64.powf(rng.random_range(1.0..7.0)) as u32;
            if i % 3 == 0 { &mut a } else { &mut b }.insert(v);
            both.insert(v);
        }
        let mut merged = Histogram::default();
        merged.merge(&a);
        merged.merge(&Histogram::default());
        merged.merge(&b);
        assert_eq!(merged.quantiles(), both.quantiles());
        assert_eq!(
            (merged.count, merged.min, merged.max),
            (both.count, both.min, both.max)
        );
    }

    #[test]
    fn single_value_is_exact_and_reset_reuses_blocks() {
        let mut h = Histogram::default();
        for _ in 0..10 {
            h.insert(123_457);
        }
        assert_eq!(h.quantiles().p50, Some(123_457));
        let cap = h.blocks.capacity();
        h.reset();
        h.insert(99);
        assert_eq!(h.quantiles().p999, Some(99));
        assert_eq!(h.blocks.capacity(), cap);
    }
}
