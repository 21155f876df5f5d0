//! The window's clock: time cut into buckets, each bucket a slot of a ring of
//! per-bucket counters, and the window's start moved on tick by tick.
//!
//! A result counts in the bucket of its send time. At a tick at `now`, the window holds
//! the buckets from the one containing `now - window_ms` up to the one containing `now`
//! (between `window_ms` and one bucket more), plus one spare bucket ahead for results
//! arriving before the next tick moves the start on. Buckets are aligned on the time the
//! window started (its first tick or result): ticks every bucket, as the analyzer runs
//! them, then see exactly `window_ms` of send times. Results sent before the window's
//! start are late (dropped); results dated beyond the spare bucket (a skewed agent clock,
//! or ticks that stopped) count in the spare bucket rather than in none.

use std::ops::Range;

/// Most buckets a window is cut into (bounds per-flow memory whatever the settings).
const MAX_LIVE_BUCKETS: u64 = 20;

/// Bucket arithmetic and the window's start.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    bucket_ms: i64,
    window_ms: i64,
    slots: usize,
    /// Oldest bucket of the window (none before the first result or tick).
    first: Option<i64>,
    /// Where buckets start, modulo their length: the time the window started.
    phase: i64,
    /// The send times of the latest bucket placed and its slot (results of a batch were
    /// sent within a second or two: most skip the division).
    last: (i64, i64, usize),
}

impl Ring {
    /// A ring for a `window_ms` window moved on every `tick_ms`: one bucket per tick,
    /// or coarser when that would cut the window into more than 20 buckets.
    pub(crate) fn new(window_ms: u64, tick_ms: u64) -> Self {
        let window_ms = window_ms.max(1);
        let bucket_ms = tick_ms.max(1).max(window_ms.div_ceil(MAX_LIVE_BUCKETS));
        // Buckets the window touches at a tick, plus the spare one ahead.
        let slots = (window_ms.div_ceil(bucket_ms) + 2) as usize;
        Self {
            bucket_ms: bucket_ms as i64,
            window_ms: window_ms as i64,
            slots,
            first: None,
            phase: 0,
            last: (0, 0, 0),
        }
    }

    /// Slots of every per-bucket ring.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    fn bucket(&self, ms: i64) -> i64 {
        (ms - self.phase).div_euclid(self.bucket_ms)
    }

    fn start_of(&self, bucket: i64) -> i64 {
        bucket * self.bucket_ms + self.phase
    }

    fn slot(&self, bucket: i64) -> usize {
        bucket.rem_euclid(self.slots as i64) as usize
    }

    /// Moves the window's start to cover `now_ms`; returns the slots of the buckets that
    /// left the window (each at most once, oldest first), to be cleared. A clock going
    /// backwards moves nothing.
    pub(crate) fn advance(&mut self, now_ms: i64) -> Vec<usize> {
        let Some(first) = self.first else {
            self.phase = now_ms.rem_euclid(self.bucket_ms);
            self.first = Some(self.bucket(now_ms - self.window_ms));
            return Vec::new();
        };
        let start = self.bucket(now_ms - self.window_ms);
        if start <= first {
            return Vec::new();
        }
        self.first = Some(start);
        self.last = (0, 0, 0);
        let from = first.max(start - self.slots as i64);
        (from..start).map(|b| self.slot(b)).collect()
    }

    /// The slot a result sent at `send_ms` counts in, `None` when it is older than the
    /// window; the window starts at `now_ms` if nothing started it yet.
    pub(crate) fn place(&mut self, send_ms: i64, now_ms: i64) -> Option<usize> {
        let (from, to, slot) = self.last;
        if (from..to).contains(&send_ms) {
            return Some(slot);
        }
        let first = match self.first {
            Some(f) => f,
            None => {
                self.advance(now_ms);
                self.first?
            }
        };
        let b = self.bucket(send_ms);
        if b < first {
            return None;
        }
        let newest = first + self.slots as i64 - 1;
        let slot = self.slot(b.min(newest));
        // Beyond the newest bucket every send time lands there: cache only real buckets.
        if b <= newest {
            self.last = (self.start_of(b), self.start_of(b + 1), slot);
        }
        Some(slot)
    }

    /// Every bucket of the ring with its slot and send times, oldest first (none before
    /// the window started).
    pub(crate) fn spans(&self) -> impl Iterator<Item = (usize, Range<i64>)> + '_ {
        let (first, n) = self.first.map_or((0, 0), |f| (f, self.slots as i64));
        (first..first + n).map(|b| (self.slot(b), self.start_of(b)..self.start_of(b + 1)))
    }

    /// Send times covered by the window: from the start of its oldest bucket (every send
    /// time when it has not started).
    pub(crate) fn covers(&self) -> Range<i64> {
        let start = self.first.map_or(i64::MIN, |f| self.start_of(f));
        start..i64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_per_tick_and_a_spare() {
        let r = Ring::new(10_000, 1_000);
        assert_eq!((r.bucket_ms, r.slots()), (1_000, 12));
        // Fine ticks over a long window: at most 20 buckets (+2).
        let r = Ring::new(600_000, 10);
        assert_eq!((r.bucket_ms, r.slots()), (30_000, 22));
    }

    #[test]
    fn advance_expires_each_bucket_once() {
        let mut r = Ring::new(10_000, 1_000);
        // The first tick starts it: buckets start at .5 s, the window at 90.5 s.
        assert!(r.advance(100_500).is_empty());
        assert_eq!(r.covers().start, 90_500);
        assert_eq!(r.advance(101_500), [r.slot(90)]);
        assert_eq!(r.covers().start, 91_500);
        assert!(r.advance(102_200).is_empty(), "same bucket");
        assert!(r.advance(50_000).is_empty(), "backwards");
        assert_eq!(r.advance(103_500), [r.slot(91), r.slot(92)]);
        // A long pause clears every slot once, no more.
        let gone = r.advance(1_000_000);
        let mut sorted = gone.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!((gone.len(), sorted.len()), (12, 12));
        assert_eq!(r.covers().start, 989_500);
    }

    #[test]
    fn late_results_are_refused_and_future_ones_clamped() {
        let mut r = Ring::new(10_000, 1_000);
        // Started by the first result at 100.5 s: bucket 90 is [90.5 s, 91.5 s).
        assert_eq!(r.place(95_000, 100_500), Some(r.slot(94)));
        assert_eq!(r.place(90_499, 100_500), None);
        assert_eq!(r.place(90_500, 100_500), Some(r.slot(90)));
        assert_eq!(r.place(91_499, 100_500), Some(r.slot(90)), "from the cache");
        // Buckets 90..=101 are writable; later send times go to 101.
        assert_eq!(r.place(102_499, 100_500), Some(r.slot(101)));
        assert_eq!(r.place(500_000, 100_500), Some(r.slot(101)));
        assert_ne!(
            r.slot(101),
            r.slot(90),
            "the spare bucket has a slot of its own"
        );
    }
}
