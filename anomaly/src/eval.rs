//! Scoring both detectors on synthetic pairs with known faults, for tests and
//! `rocemesh-lab eval --suite latency`.
//!
//! Labels: every window from a fault's onset on is anomalous (latency really
//! is above the pre-fault baseline), every other window is normal.
//! Precision counts alarms: an alarm on an anomalous window is true, on a
//! normal window false. Recall counts faults ("point-adjusted", as usual for
//! change detection, since a detector is expected to report a change once,
//! not in every window after it): a fault is detected if an alarm falls in
//! `[onset, deadline]`, where the deadline is onset + 1 for a step (the first
//! or second window after it) and the end of the long window following the
//! one holding the onset for a creep (the long-term test is its only chance).

use rand::{SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

use crate::{
    Error,
    long_term::LongTermVerdict,
    monitor::{LatencyMonitor, MonitorConfig},
    scratch::Scratch,
    short_term::ShortTermVerdict,
    synth::{Fault, PairKind, PairSpec},
};

/// Shape of a synthetic evaluation run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SuiteConfig {
    /// Pairs generated for each [`PairKind`].
    pub pairs_per_kind: usize,
    /// Short windows per pair (a multiple of `windows_per_long`, >= 3 long windows).
    pub windows: usize,
    /// Short windows per long window (60 = 30 min of 30 s windows).
    pub windows_per_long: usize,
    /// RTT samples per short window.
    pub samples_per_window: usize,
    /// Seed of the whole suite.
    pub seed: u64,
    /// Detector settings under test.
    pub monitor: MonitorConfig,
}

impl Default for SuiteConfig {
    fn default() -> Self {
        Self {
            pairs_per_kind: 60,
            windows: 240,
            windows_per_long: 60,
            samples_per_window: 60,
            seed: 0x5eed,
            monitor: MonitorConfig::default(),
        }
    }
}

impl SuiteConfig {
    /// Rejects shapes on which a creep could not be scored.
    pub fn validate(&self) -> Result<(), Error> {
        if self.windows_per_long == 0
            || !self.windows.is_multiple_of(self.windows_per_long)
            || self.windows / self.windows_per_long < 3
            || self.samples_per_window == 0
        {
            return Err(Error::InvalidConfig(format!(
                "suite needs windows ({}) = a multiple >= 3 of windows_per_long ({}) and samples_per_window > 0",
                self.windows, self.windows_per_long
            )));
        }
        Ok(())
    }
}

/// Both detectors' output for one short window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowVerdict {
    /// LOF verdict (`None` while warming up).
    pub short_term: Option<ShortTermVerdict>,
    /// Long-term verdict when this window closed a long window.
    pub long_term: Option<LongTermVerdict>,
    /// Either detector flagged the window.
    pub alarm: bool,
}

/// A fault's scoring interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// First anomalous window.
    pub onset: usize,
    /// Last window by which it must have been flagged.
    pub deadline: usize,
}

impl Event {
    /// Scoring interval of `fault` with long windows of `windows_per_long`.
    pub fn of(fault: &Fault, windows_per_long: usize) -> Self {
        let onset = fault.onset();
        let deadline = match fault {
            Fault::Step { .. } => onset + 1,
            Fault::Creep { .. } => (onset / windows_per_long + 2) * windows_per_long - 1,
        };
        Self { onset, deadline }
    }
}

/// Verdicts and truth for one pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRun {
    /// The generated pair.
    pub spec: PairSpec,
    /// One verdict per window.
    pub verdicts: Vec<WindowVerdict>,
    /// The fault's scoring interval, if the pair has one.
    pub event: Option<Event>,
}

impl PairRun {
    /// Ground truth per window (true = anomalous).
    pub fn truth(&self) -> Vec<bool> {
        let onset = self.event.map_or(usize::MAX, |e| e.onset);
        (0..self.verdicts.len()).map(|w| w >= onset).collect()
    }

    /// Alarm per window.
    pub fn alarms(&self) -> Vec<bool> {
        self.verdicts.iter().map(|v| v.alarm).collect()
    }
}

/// Alarm and fault counts, summable over pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Alarms on anomalous windows.
    pub true_alarms: u64,
    /// Alarms on normal windows.
    pub false_alarms: u64,
    /// Faults injected.
    pub events: u64,
    /// Faults flagged by their deadline.
    pub detected: u64,
}

impl Score {
    /// true / all alarms (1 when there was no alarm).
    pub fn precision(&self) -> f64 {
        ratio(self.true_alarms, self.true_alarms + self.false_alarms)
    }

    /// detected / injected faults (1 when there was no fault).
    pub fn recall(&self) -> f64 {
        ratio(self.detected, self.events)
    }

    /// Adds another pair's or kind's counts.
    pub fn add(&mut self, other: &Score) {
        self.true_alarms += other.true_alarms;
        self.false_alarms += other.false_alarms;
        self.events += other.events;
        self.detected += other.detected;
    }
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

/// Scores one pair: `truth` and `alarms` per window, `event` its fault.
pub fn score(truth: &[bool], alarms: &[bool], event: Option<Event>) -> Score {
    let mut s = Score::default();
    for (&t, &a) in truth.iter().zip(alarms) {
        match (a, t) {
            (true, true) => s.true_alarms += 1,
            (true, false) => s.false_alarms += 1,
            _ => {}
        }
    }
    if let Some(e) = event {
        s.events = 1;
        let last = e.deadline.min(alarms.len().saturating_sub(1));
        s.detected = u64::from(
            alarms
                .get(e.onset..=last)
                .is_some_and(|w| w.contains(&true)),
        );
    }
    s
}

/// Runs both detectors over `windows` windows of one synthetic pair, closing a
/// long window every `windows_per_long` windows.
pub fn run_pair(spec: &PairSpec, config: &SuiteConfig) -> Result<PairRun, Error> {
    config.validate()?;
    let mut monitor = LatencyMonitor::new(&config.monitor)?;
    let mut generator = spec.generator(config.samples_per_window);
    let (mut samples, mut scratch) = (Vec::new(), Scratch::default());
    let mut verdicts = Vec::with_capacity(config.windows);
    for _ in 0..config.windows {
        let w = generator.next_window(&mut samples);
        let short_term = monitor.observe_window(&samples, &mut scratch)?.short_term;
        let long_term = if (w + 1).is_multiple_of(config.windows_per_long) {
            Some(monitor.close_long_window()?)
        } else {
            None
        };
        let alarm =
            short_term.is_some_and(|v| v.anomaly) || long_term.is_some_and(|v| v.is_anomaly());
        verdicts.push(WindowVerdict {
            short_term,
            long_term,
            alarm,
        });
    }
    Ok(PairRun {
        spec: *spec,
        verdicts,
        event: spec.fault.map(|f| Event::of(&f, config.windows_per_long)),
    })
}

/// Per-kind and overall scores of a suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteReport {
    /// The run's shape.
    pub config: SuiteConfig,
    /// All pairs together.
    pub overall: Score,
    /// One entry per [`PairKind`], in [`PairKind::ALL`] order.
    pub per_kind: Vec<(PairKind, Score)>,
    /// Alarms raised by the short-term (LOF) detector.
    pub short_term_alarms: u64,
    /// Alarms raised by the long-term (log-normal) detector.
    pub long_term_alarms: u64,
    /// Mean windows from onset to first alarm over detected faults.
    pub mean_detection_delay: f64,
}

/// Generates `pairs_per_kind` pairs of every kind and scores the detectors.
pub fn run_suite(config: &SuiteConfig) -> Result<SuiteReport, Error> {
    config.validate()?;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut report = SuiteReport {
        config: *config,
        overall: Score::default(),
        per_kind: Vec::with_capacity(PairKind::ALL.len()),
        short_term_alarms: 0,
        long_term_alarms: 0,
        mean_detection_delay: 0.0,
    };
    let mut delay_sum = 0usize;
    for kind in PairKind::ALL {
        let mut kind_score = Score::default();
        for _ in 0..config.pairs_per_kind {
            let spec = PairSpec::random(kind, config.windows, config.windows_per_long, &mut rng);
            let run = run_pair(&spec, config)?;
            let alarms = run.alarms();
            let s = score(&run.truth(), &alarms, run.event);
            if let (Some(e), 1) = (run.event, s.detected) {
                delay_sum += alarms[e.onset..].iter().position(|&a| a).unwrap_or(0);
            }
            for v in &run.verdicts {
                report.short_term_alarms += u64::from(v.short_term.is_some_and(|s| s.anomaly));
                report.long_term_alarms += u64::from(v.long_term.is_some_and(|l| l.is_anomaly()));
            }
            kind_score.add(&s);
        }
        report.overall.add(&kind_score);
        report.per_kind.push((kind, kind_score));
    }
    report.mean_detection_delay = delay_sum as f64 / report.overall.detected.max(1) as f64;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_counts_alarms_and_deadline() {
        let truth = [false, false, true, true, true];
        let e = Event {
            onset: 2,
            deadline: 3,
        };
        let s = score(&truth, &[true, false, false, true, true], Some(e));
        assert_eq!(
            s,
            Score {
                true_alarms: 2,
                false_alarms: 1,
                events: 1,
                detected: 1
            }
        );
        assert!((s.precision() - 2.0 / 3.0).abs() < 1e-12);
        let late = score(&truth, &[false, false, false, false, true], Some(e));
        assert_eq!((late.detected, late.recall()), (0, 0.0));
        assert_eq!(score(&[false; 3], &[false; 3], None).precision(), 1.0);
    }

    #[test]
    fn creep_deadline_is_end_of_next_long_window() {
        let e = Event::of(
            &Fault::Creep {
                onset: 70,
                rate: 0.01,
            },
            60,
        );
        assert_eq!(
            e,
            Event {
                onset: 70,
                deadline: 179
            }
        );
        let e = Event::of(
            &Fault::Step {
                onset: 70,
                factor: 2.0,
            },
            60,
        );
        assert_eq!(e.deadline, 71);
    }

    #[test]
    fn bad_suite_shape_is_an_error() {
        let cfg = SuiteConfig {
            windows: 100,
            ..Default::default()
        };
        assert!(matches!(run_suite(&cfg), Err(Error::InvalidConfig(_))));
    }
}
