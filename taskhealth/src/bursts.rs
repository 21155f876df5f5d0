//! Communication bursts in a task's throughput: runs of samples in which some rank moves
//! data, with per-rank onset, active time and volume.

use crate::quantile;

/// Fraction of the task's burst rate above which a sample counts as active.
const ACTIVE_FRACTION: f64 = 0.05;
/// Idle samples a burst may contain (peers waiting on a slow rank leave short gaps).
const MERGE_GAP: usize = 2;
/// A burst moving less than this fraction of the median burst's volume is the partial
/// start of the next one (peers sent a first chunk and wait for a late rank).
pub(crate) const MINOR_VOLUME: f64 = 0.3;
/// A burst that moved less than this fraction of the median burst's volume did not
/// finish its collective ...
const UNFINISHED: f64 = 0.8;
/// ... and the next burst is its rest when the two moved at most this fraction of it
/// together (retransmitted bytes count too).
const FINISHED: f64 = 1.25;

/// One burst: samples `start..end`, per-rank statistics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Burst {
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// First active sample of each rank (`None`: the rank never became active).
    pub(crate) onset: Vec<Option<usize>>,
    /// Last active sample of each rank.
    pub(crate) last: Vec<Option<usize>>,
    /// Active samples of each rank.
    pub(crate) active: Vec<usize>,
    /// Bytes each rank moved.
    pub(crate) volume: Vec<f64>,
}

impl Burst {
    pub(crate) fn total(&self) -> f64 {
        self.volume.iter().sum()
    }
}

/// The activity threshold of a task: a fraction of its ranks' median peak sample (a peak,
/// not a percentile, so that a long hang does not make idle noise look like bursts).
pub(crate) fn threshold(bytes: &[Vec<f64>]) -> Option<f64> {
    let peaks: Vec<f64> = bytes
        .iter()
        .map(|r| r.iter().copied().fold(0.0, f64::max))
        .collect();
    quantile(&peaks, 0.5)
        .filter(|p| *p > 0.0)
        .map(|p| p * ACTIVE_FRACTION)
}

/// Bursts of the series, oldest first. Traffic between ranks shows at both ends, so a span
/// in which only one rank of several was active is not a burst (idle traffic such as
/// probes crossing the threshold). A burst that stopped short of an iteration's
/// volume is joined with the next when the two moved about one (a stall longer than the
/// bridged gap, such as a retransmission timeout, split one collective); a minor burst
/// left is the partial start of the next one and folded into it.
pub(crate) fn bursts(bytes: &[Vec<f64>], threshold: f64) -> Vec<Burst> {
    let len = bytes.iter().map(Vec::len).min().unwrap_or(0);
    let busy = |t: usize| bytes.iter().any(|r| r[t] > threshold);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut t = 0;
    while t < len {
        if !busy(t) {
            t += 1;
            continue;
        }
        let start = t;
        let mut end = t + 1;
        let mut idle = 0;
        let mut u = t + 1;
        while u < len && idle <= MERGE_GAP {
            if busy(u) {
                end = u + 1;
                idle = 0;
            } else {
                idle += 1;
            }
            u += 1;
        }
        let ranks_active = bytes
            .iter()
            .filter(|r| r[start..end].iter().any(|x| *x > threshold))
            .count();
        if ranks_active >= 2.min(bytes.len()) {
            spans.push((start, end));
        }
        t = end;
    }
    let mut out: Vec<Burst> = spans
        .iter()
        .map(|&(s, e)| span(bytes, threshold, s, e))
        .collect();
    let volumes: Vec<f64> = out.iter().map(Burst::total).collect();
    let Some(median) = quantile(&volumes, 0.5) else {
        return out;
    };
    join(bytes, threshold, &mut out, |a, next| {
        a.total() < UNFINISHED * median && a.total() + next.total() <= FINISHED * median
    });
    join(bytes, threshold, &mut out, |b, _| {
        b.total() < MINOR_VOLUME * median
    });
    out
}

/// Joins each burst with the next while `joins(burst, next)` holds (the joined burst is
/// tested again with its new next). True when any was joined.
pub(crate) fn join(
    bytes: &[Vec<f64>],
    threshold: f64,
    bursts: &mut Vec<Burst>,
    joins: impl Fn(&Burst, &Burst) -> bool,
) -> bool {
    let before = bursts.len();
    let mut i = 0;
    while i + 1 < bursts.len() {
        if joins(&bursts[i], &bursts[i + 1]) {
            let joined = span(bytes, threshold, bursts[i].start, bursts[i + 1].end);
            bursts.splice(i..i + 2, [joined]);
        } else {
            i += 1;
        }
    }
    bursts.len() != before
}

/// The burst of samples `start..end`.
fn span(bytes: &[Vec<f64>], threshold: f64, start: usize, end: usize) -> Burst {
    let mut b = Burst {
        start,
        end,
        onset: Vec::with_capacity(bytes.len()),
        last: Vec::with_capacity(bytes.len()),
        active: Vec::with_capacity(bytes.len()),
        volume: Vec::with_capacity(bytes.len()),
    };
    for r in bytes {
        let s = &r[start..end];
        b.onset
            .push(s.iter().position(|x| *x > threshold).map(|p| start + p));
        b.last
            .push(s.iter().rposition(|x| *x > threshold).map(|p| start + p));
        b.active.push(s.iter().filter(|x| **x > threshold).count());
        b.volume.push(s.iter().sum());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_merge_short_gaps_and_fold_partial_starts() {
        // Rank 0 sends a first chunk to rank 2 at 2, both wait for rank 1, then all burst
        // at 6..9; a second burst at 14..16 with a one-sample gap.
        let r0 = vec![
            0., 0., 10., 0., 0., 0., 100., 100., 100., 0., 0., 0., 0., 0., 100., 0., 100., 0.,
        ];
        let r1 = vec![
            0., 0., 0., 0., 0., 0., 100., 100., 100., 0., 0., 0., 0., 0., 100., 0., 100., 0.,
        ];
        let bytes = vec![r0.clone(), r1, r0];
        let th = threshold(&bytes).unwrap();
        assert_eq!(th, 5.0);
        let b = bursts(&bytes, 5.0);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!((b[0].start, b[0].end), (2, 9));
        assert_eq!(b[0].onset, vec![Some(2), Some(6), Some(2)]);
        assert_eq!(b[0].active, vec![4, 3, 4]);
        assert_eq!(b[0].last, vec![Some(8), Some(8), Some(8)]);
        assert_eq!((b[1].start, b[1].end), (14, 17));
        assert_eq!(b[1].volume, vec![200., 200., 200.]);
    }

    #[test]
    fn one_ranks_idle_traffic_is_not_a_burst() {
        // Two bursts; between them rank 1's idle traffic crosses the threshold once.
        let mut bytes = vec![vec![1.0; 20]; 3];
        for r in &mut bytes {
            r[2..5].fill(100.0);
            r[14..17].fill(100.0);
        }
        bytes[1][9] = 7.0;
        let b = bursts(&bytes, threshold(&bytes).unwrap());
        let starts: Vec<usize> = b.iter().map(|b| b.start).collect();
        assert_eq!(starts, vec![2, 14], "{b:?}");
        // The same traffic at both ends of a transfer is a (minor) burst: the partial
        // start of the next one.
        bytes[2][9] = 7.0;
        let b = bursts(&bytes, threshold(&bytes).unwrap());
        let starts: Vec<usize> = b.iter().map(|b| b.start).collect();
        assert_eq!(starts, vec![2, 9], "{b:?}");
    }
}
