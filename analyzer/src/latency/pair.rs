//! One RNIC pair: its open short windows (raw RTTs, bounded), its detectors, which
//! long window it is accumulating, and its alarm.

use super::LatencyStats;
use super::alarm::PairAlarm;
use rocemesh_anomaly::{
    LatencyMonitor, LongTermVerdict, Scratch, ShortTermVerdict, WindowFeatures, ZTest,
};
use std::collections::VecDeque;

/// Settings and reusable buffers shared by every pair during one close.
pub(super) struct Judge<'a> {
    /// Short window length, ms.
    pub short_ms: i64,
    /// Long window length, ms.
    pub long_ms: i64,
    /// Fewest samples a short window needs to be judged.
    pub min_samples: usize,
    /// Relative rise a short-term anomaly needs (its alarm's margin).
    pub short_margin: f64,
    /// Relative rise a long-term anomaly needs (`exp(min_ln_shift) - 1`).
    pub long_margin: f64,
    /// Least absolute rise of a window's median over the reference, ns.
    pub min_rise_ns: f64,
    /// Counters.
    pub stats: &'a mut LatencyStats,
    /// The window's samples as f64.
    pub samples: Vec<f64>,
    /// Scoring buffers, shared by every pair.
    pub scratch: Scratch,
}

/// Which long window a pair accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Long {
    /// The pair appeared within long window `L`: its samples are discarded at the end
    /// (a partial start-up window must not become the baseline).
    Partial(i64),
    /// Accumulating long window `L`, to be fitted or tested at its end.
    Open(i64),
    /// Between long windows (the last one ended, no sample of the next one yet).
    Idle,
}

/// Latency state of one RNIC pair (~600 bytes of detector state plus open samples).
#[derive(Debug, Clone)]
pub(super) struct PairState {
    monitor: LatencyMonitor,
    /// Open short windows by index, ascending; each holds at most the sample cap.
    open: VecDeque<(i64, Vec<u32>)>,
    long: Long,
    latest: Option<WindowFeatures>,
    /// Samples of its latest closed short window: the capacity of its next one (a
    /// window grown sample by sample reallocates ten times at 10 probes/s).
    expect: usize,
    /// When the pair's latest sample was received, ms since the Unix epoch.
    pub last_seen_ms: i64,
    /// Its alarm, while its latency is anomalous (boxed: ~170 bytes that most of
    /// `max_pairs` pairs never hold).
    pub alarm: Option<Box<PairAlarm>>,
}

impl PairState {
    /// A pair first seen at `now_ms` with a sample in short window `w`.
    pub(super) fn new(
        monitor: LatencyMonitor,
        w: i64,
        short_ms: i64,
        long_ms: i64,
        now_ms: i64,
    ) -> Self {
        Self {
            monitor,
            open: VecDeque::new(),
            long: Long::Partial((w * short_ms).div_euclid(long_ms)),
            latest: None,
            expect: 0,
            last_seen_ms: now_ms,
            alarm: None,
        }
    }

    /// Adds one RTT to short window `w`; false when that window is full.
    pub(super) fn push(&mut self, w: i64, rtt_ns: u32, cap: usize, now_ms: i64) -> bool {
        self.last_seen_ms = now_ms;
        let pos = self.open.partition_point(|(i, _)| *i < w);
        if self.open.get(pos).is_none_or(|(i, _)| *i != w) {
            let samples = Vec::with_capacity(self.expect.min(cap));
            self.open.insert(pos, (w, samples));
        }
        let samples = &mut self.open[pos].1;
        if samples.len() >= cap {
            return false;
        }
        samples.push(rtt_ns);
        true
    }

    /// True when no short window is open.
    pub(super) fn is_drained(&self) -> bool {
        self.open.is_empty()
    }

    /// Closes every open short window below `through`, then the long window if it ended.
    pub(super) fn close(&mut self, through: i64, j: &mut Judge) {
        while self.open.front().is_some_and(|(w, _)| *w < through) {
            if let Some((w, samples)) = self.open.pop_front() {
                self.expect = samples.len();
                self.roll_long((w * j.short_ms).div_euclid(j.long_ms), j);
                self.judge_window(w, &samples, j);
            }
        }
        let ended = |l: i64| (l + 1) * j.long_ms <= through * j.short_ms;
        match self.long {
            Long::Partial(l) if ended(l) => {
                self.monitor.discard_long_window();
                self.long = Long::Idle;
            }
            Long::Open(l) if ended(l) => {
                self.test_long(through * j.short_ms, j);
                self.long = Long::Idle;
            }
            _ => {}
        }
    }

    /// Settles the long window before a sample of long window `l` enters it.
    fn roll_long(&mut self, l: i64, j: &mut Judge) {
        match self.long {
            Long::Partial(p) if p != l => self.monitor.discard_long_window(),
            Long::Open(p) if p != l => self.test_long(l * j.long_ms, j),
            Long::Partial(_) | Long::Open(_) => return,
            Long::Idle => {}
        }
        self.long = Long::Open(l);
    }

    fn judge_window(&mut self, w: i64, samples: &[u32], j: &mut Judge) {
        if samples.len() < j.min_samples {
            j.stats.sparse_windows += 1;
            return;
        }
        j.samples.clear();
        j.samples.extend(samples.iter().map(|&x| f64::from(x)));
        let report = match self.monitor.observe_window(&j.samples, &mut j.scratch) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("latency window not judged: {e}");
                j.stats.sparse_windows += 1;
                return;
            }
        };
        j.stats.windows += 1;
        let features = report.features;
        self.latest = Some(features);
        if self
            .alarm
            .as_ref()
            .is_some_and(|a| features.p50 <= a.slow_above_ns)
        {
            self.alarm = None;
        }
        let short = report
            .short_term
            .filter(|v| v.anomaly)
            .map(|v| (v, features.p50 / (1.0 + v.shift)))
            .filter(|(_, reference)| features.p50 - reference >= j.min_rise_ns);
        match short {
            Some((v, reference)) => {
                j.stats.short_term_alarms += 1;
                self.raise(
                    reference,
                    (j.short_margin, j.min_rise_ns),
                    (w + 1) * j.short_ms,
                    Some(v),
                    None,
                );
            }
            _ => {
                if let Some(a) = &mut self.alarm {
                    a.window = features;
                }
            }
        }
    }

    /// Fits or tests the long window that ended at `end_ms`.
    fn test_long(&mut self, end_ms: i64, j: &mut Judge) {
        match self.monitor.close_long_window() {
            Ok(LongTermVerdict::Fitted(_)) => j.stats.long_windows_fitted += 1,
            Ok(LongTermVerdict::Tested(z)) => {
                j.stats.long_windows_tested += 1;
                let reference = z.baseline.mu.exp();
                let still_high = self.latest.is_some_and(|f| {
                    f.p50 > reference * (1.0 + j.long_margin / 2.0)
                        && f.p50 - reference >= j.min_rise_ns
                });
                if z.anomaly && still_high {
                    j.stats.long_term_alarms += 1;
                    let margins = (j.long_margin, j.min_rise_ns);
                    self.raise(reference, margins, end_ms, None, Some(z));
                } else if let Some(a) = &mut self.alarm {
                    a.long_term = None;
                    if a.short_term.is_none() {
                        self.alarm = None;
                    }
                }
            }
            Err(e) => {
                tracing::debug!("long latency window skipped: {e}");
                j.stats.long_windows_skipped += 1;
            }
        }
    }

    /// Raises the alarm, or adds a detector to the one already raised (keeping the
    /// lowest reference: the level before the first rise). A probe is slow above the
    /// reference plus half the relative `margin` and half the absolute `rise_ns`.
    fn raise(
        &mut self,
        reference: f64,
        (margin, rise_ns): (f64, f64),
        at_ms: i64,
        short_term: Option<ShortTermVerdict>,
        long_term: Option<ZTest>,
    ) {
        let Some(window) = self.latest else { return };
        let slow_above = |r: f64| (r * (1.0 + margin / 2.0)).max(r + rise_ns / 2.0);
        match &mut self.alarm {
            Some(a) => {
                a.window = window;
                a.short_term = short_term.or(a.short_term);
                a.long_term = long_term.or(a.long_term);
                if reference < a.reference_ns {
                    a.reference_ns = reference;
                    a.slow_above_ns = slow_above(reference);
                }
            }
            None => {
                self.alarm = Some(Box::new(PairAlarm {
                    since_ms: at_ms,
                    reference_ns: reference,
                    slow_above_ns: slow_above(reference),
                    window,
                    short_term,
                    long_term,
                }));
            }
        }
    }
}
