//! RNIC throughput for the runtime skeleton (SkeletonHunter §5.1) and task health: a
//! bounded ring of per-interval byte counts (sent and received) per RNIC that belongs to
//! some task. Kept in memory
//! only: after a controller restart the rings refill from agent uploads, and tasks stay on
//! their basic list until then.

use rocemesh_proto::api::RnicSeries;
use rocemesh_taskhealth::Throughput;
use std::collections::{HashMap, HashSet, VecDeque};

/// One RNIC's recent samples, `[sent, received]` bytes per interval; `end_ms` is the end
/// of the newest interval.
#[derive(Debug)]
struct Ring {
    interval_ms: u32,
    end_ms: i64,
    samples: VecDeque<[u64; 2]>,
}

impl Ring {
    /// Appends a series starting at `start_ms`, placing it on the ring's time grid:
    /// intervals already held are skipped (a retried upload), a short gap is filled with
    /// zeros, a gap of a whole window or a new interval starts the ring over. Returns the
    /// samples stored and the ones skipped.
    fn append(
        &mut self,
        interval_ms: u32,
        start_ms: i64,
        bytes: &[[u64; 2]],
        window: usize,
    ) -> (u64, u64) {
        let step = i64::from(interval_ms);
        let span = window as i64 * step;
        if self.samples.is_empty()
            || self.interval_ms != interval_ms
            || start_ms >= self.end_ms.saturating_add(span)
        {
            self.interval_ms = interval_ms;
            self.end_ms = start_ms;
            self.samples.clear();
        }
        let skip = if start_ms < self.end_ms {
            ((self.end_ms - start_ms + step - 1) / step).min(bytes.len() as i64) as usize
        } else {
            let gap = (start_ms - self.end_ms) / step;
            for _ in 0..gap {
                self.push([0, 0], window);
            }
            self.end_ms += gap * step;
            0
        };
        for &b in &bytes[skip..] {
            self.push(b, window);
        }
        self.end_ms += (bytes.len() - skip) as i64 * step;
        ((bytes.len() - skip) as u64, skip as u64)
    }

    fn push(&mut self, b: [u64; 2], window: usize) {
        if self.samples.len() == window {
            self.samples.pop_front();
        }
        self.samples.push_back(b);
    }
}

/// What an upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Ingested {
    /// Samples stored.
    pub(crate) accepted: u64,
    /// Samples not stored: RNIC in no task, or intervals already held.
    pub(crate) dropped: u64,
}

/// Rings of every task RNIC.
#[derive(Debug)]
pub(crate) struct ThroughputStore {
    window: usize,
    rings: HashMap<u32, Ring>,
}

impl ThroughputStore {
    /// An empty store keeping `window` samples per RNIC.
    pub(crate) fn new(window: usize) -> Self {
        Self {
            window,
            rings: HashMap::new(),
        }
    }

    /// Stores validated series of RNICs in `members`; others are counted and dropped.
    pub(crate) fn ingest(
        &mut self,
        interval_ms: u32,
        series: &[RnicSeries],
        members: &HashSet<u32>,
    ) -> Ingested {
        let mut done = Ingested::default();
        for s in series {
            if !members.contains(&s.rnic_id) {
                done.dropped += s.tx_bytes.len() as u64;
                continue;
            }
            let bytes: Vec<[u64; 2]> = s
                .tx_bytes
                .iter()
                .zip(&s.rx_bytes)
                .map(|(t, r)| [*t, *r])
                .collect();
            let ring = self.rings.entry(s.rnic_id).or_insert_with(|| Ring {
                interval_ms,
                end_ms: 0,
                samples: VecDeque::new(),
            });
            let (accepted, skipped) = ring.append(interval_ms, s.start_ms, &bytes, self.window);
            done.accepted += accepted;
            done.dropped += skipped;
        }
        done
    }

    /// Forgets RNICs no longer in any task.
    pub(crate) fn retain(&mut self, members: &HashSet<u32>) {
        self.rings.retain(|id, _| members.contains(id));
    }

    /// Mean bytes per second over the samples held for one RNIC.
    pub(crate) fn rate(&self, rnic: u32) -> Option<f64> {
        let r = self.rings.get(&rnic).filter(|r| !r.samples.is_empty())?;
        let bytes: u64 = r.samples.iter().map(total).sum();
        let secs = r.samples.len() as f64 * f64::from(r.interval_ms) / 1000.0;
        Some(bytes as f64 / secs)
    }

    /// Samples held for one RNIC.
    #[cfg(test)]
    pub(crate) fn len(&self, rnic: u32) -> usize {
        self.rings.get(&rnic).map_or(0, |r| r.samples.len())
    }

    /// The newest `n >= min` samples of each RNIC over the same intervals (ending at the
    /// earliest ring end), in `rnics` order; why not when there are too few.
    pub(crate) fn aligned(&self, rnics: &[u32], min: usize) -> Result<Vec<Vec<f64>>, String> {
        Ok(self.window(rnics, min)?.series(total))
    }

    /// [`Self::aligned`] as task health reads it: with the sampling interval, the start
    /// of the oldest interval and the bytes sent apart (who stopped sending first tells a
    /// stopped rank from the peer it stopped feeding); no data-parallel groups.
    pub(crate) fn aligned_at(&self, rnics: &[u32], min: usize) -> Result<Throughput, String> {
        let w = self.window(rnics, min)?;
        Ok(Throughput {
            interval_ms: w.interval_ms,
            start_ms: w.end_ms - w.n as i64 * i64::from(w.interval_ms),
            bytes: w.series(total),
            sent: w.series(|b| b[0]),
            groups: Vec::new(),
        })
    }

    /// The rings of `rnics` and their common intervals.
    fn window(&self, rnics: &[u32], min: usize) -> Result<Window<'_>, String> {
        let rings = rnics
            .iter()
            .map(|id| {
                self.rings
                    .get(id)
                    .ok_or_else(|| format!("RNIC {id} has no throughput samples"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = rings.first() else {
            return Err("no RNICs".to_string());
        };
        if let Some((id, r)) = rnics
            .iter()
            .zip(&rings)
            .find(|(_, r)| r.interval_ms != first.interval_ms)
        {
            return Err(format!(
                "RNIC {id} samples every {} ms, RNIC {} every {} ms",
                r.interval_ms, rnics[0], first.interval_ms
            ));
        }
        let w = Window {
            interval_ms: first.interval_ms,
            end_ms: rings.iter().map(|r| r.end_ms).min().unwrap_or(first.end_ms),
            n: 0,
            rings,
        };
        let n = w
            .rings
            .iter()
            .map(|r| r.samples.len().saturating_sub(w.newer(r)))
            .min()
            .unwrap_or(0);
        if n < min {
            return Err(format!(
                "only {n} aligned throughput samples per RNIC, {min} needed"
            ));
        }
        Ok(Window { n, ..w })
    }
}

/// The last `n` intervals common to some rings, ending at `end_ms`.
struct Window<'a> {
    interval_ms: u32,
    end_ms: i64,
    n: usize,
    rings: Vec<&'a Ring>,
}

impl Window<'_> {
    /// Intervals `r` holds beyond the common end.
    fn newer(&self, r: &Ring) -> usize {
        ((r.end_ms - self.end_ms) / i64::from(self.interval_ms)) as usize
    }

    /// `f` of each common interval, one series per ring.
    fn series(&self, f: fn(&[u64; 2]) -> u64) -> Vec<Vec<f64>> {
        self.rings
            .iter()
            .map(|r| {
                let stop = r.samples.len() - self.newer(r);
                r.samples
                    .range(stop - self.n..stop)
                    .map(|b| f(b) as f64)
                    .collect()
            })
            .collect()
    }
}

fn total(b: &[u64; 2]) -> u64 {
    b[0].saturating_add(b[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(rnic_id: u32, start_ms: i64, bytes: &[u64]) -> RnicSeries {
        RnicSeries {
            rnic_id,
            start_ms,
            tx_bytes: bytes.to_vec(),
            rx_bytes: vec![1; bytes.len()],
        }
    }

    #[test]
    fn rate_is_the_mean_over_held_samples() {
        let members = HashSet::from([1]);
        let mut store = ThroughputStore::new(4);
        assert_eq!(store.rate(1), None);
        store.ingest(500, &[series(1, 0, &[99, 199, 299, 399, 499])], &members);
        // The ring keeps the newest 4 (tx + 1 rx each): 200 + 300 + 400 + 500 bytes in 2 s.
        assert_eq!(store.rate(1), Some(700.0));
        assert_eq!(store.rate(2), None);
    }

    #[test]
    fn retries_are_skipped_gaps_filled_and_the_window_bounded() {
        let members = HashSet::from([1, 2]);
        let mut store = ThroughputStore::new(5);
        assert_eq!(
            store.ingest(1000, &[series(1, 10_000, &[9, 9, 9])], &members),
            Ingested {
                accepted: 3,
                dropped: 0
            }
        );
        // Retry of the last two intervals plus one new one.
        assert_eq!(
            store.ingest(1000, &[series(1, 11_000, &[9, 9, 4])], &members),
            Ingested {
                accepted: 1,
                dropped: 2
            }
        );
        // One missing interval becomes a zero; the ring keeps the newest 5.
        store.ingest(1000, &[series(1, 15_000, &[7])], &members);
        assert_eq!(store.len(1), 5);
        assert_eq!(
            store.aligned(&[1], 5).unwrap(),
            vec![vec![10.0, 10.0, 5.0, 0.0, 8.0]]
        );
        // Not a member: counted, not kept.
        assert_eq!(
            store.ingest(1000, &[series(3, 0, &[1, 1])], &members),
            Ingested {
                accepted: 0,
                dropped: 2
            }
        );
        assert_eq!(store.len(3), 0);
        // A gap of a whole window starts over.
        store.ingest(1000, &[series(1, 100_000, &[3])], &members);
        assert_eq!(store.len(1), 1);
    }

    #[test]
    fn alignment_cuts_to_common_intervals() {
        let members = HashSet::from([1, 2]);
        let mut store = ThroughputStore::new(10);
        store.ingest(
            1000,
            &[
                series(1, 0, &[1, 2, 3, 4]),
                series(2, 1000, &[5, 6, 7, 8, 9]),
            ],
            &members,
        );
        // RNIC 1 covers 0..4 s, RNIC 2 1..6 s: common intervals 1..4 s.
        assert_eq!(
            store.aligned(&[1, 2], 3).unwrap(),
            vec![vec![3.0, 4.0, 5.0], vec![6.0, 7.0, 8.0]]
        );
        let at = store.aligned_at(&[1, 2], 3).unwrap();
        assert_eq!((at.start_ms, at.interval_ms), (1000, 1000));
        // tx is the series, rx 1 per interval.
        assert_eq!(at.sent, vec![vec![2.0, 3.0, 4.0], vec![5.0, 6.0, 7.0]]);
        assert!(store.aligned(&[1, 2], 4).unwrap_err().contains("only 3"));
        assert!(store.aligned(&[1, 3], 1).unwrap_err().contains("RNIC 3"));
        store.ingest(500, &[series(2, 9000, &[1])], &members);
        assert!(
            store
                .aligned(&[1, 2], 1)
                .unwrap_err()
                .contains("every 500 ms")
        );
        store.retain(&HashSet::from([2]));
        assert_eq!(store.len(1), 0);
    }
}
