//! The task-health suite: seeded random jobs ([`crate::job`]), each assessed by
//! `rocemesh-taskhealth` and scored against its truth — the class of every iteration
//! window, the straggler of every faulty window, and the probe-matrix attributions.

use crate::job::{self, JobFault};
use rocemesh_taskhealth::{Blame, Health, Settings, WindowClass, assess};
use serde::Serialize;
use std::collections::BTreeMap;

/// Fault classes a suite cycles through (see [`job::draw`]).
pub const FAULTS: u32 = 6;

/// Score of one job.
#[derive(Debug, Clone, Serialize)]
pub struct JobOutcome {
    /// Scenario index.
    pub index: u32,
    /// Fault name.
    pub fault: &'static str,
    /// The class its faulty windows should get.
    pub class: WindowClass,
    /// Faulty rank, when there is one.
    pub rank: Option<usize>,
    /// Ranks of the job.
    pub ranks: usize,
    /// Sampling interval, ms.
    pub interval_ms: u32,
    /// Healthy windows scored.
    pub healthy_windows: u32,
    /// ... classified healthy.
    pub healthy_right: u32,
    /// Windows whose truth is the fault's class (a missed hang counts as one).
    pub faulty_windows: u32,
    /// ... classified as that class.
    pub faulty_right: u32,
    /// ... with the right straggler.
    pub straggler_right: u32,
    /// The attributions were right: the faulty rank's link (as an endpoint, source or
    /// destination; or the lossy pair as a connection), and nothing else blamed.
    pub attribution_right: bool,
    /// Classes found where the truth differed (for replays).
    pub wrong: Vec<String>,
}

/// Per-class totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassScore {
    /// Windows whose truth is this class.
    pub windows: u32,
    /// Of those, classified as this class.
    pub correct: u32,
    /// `correct / windows`.
    pub accuracy: Option<f64>,
    /// Faulty windows classified right.
    pub faulty_right: u32,
    /// ... naming the right straggler.
    pub straggler_right: u32,
    /// `straggler_right / faulty_right`.
    pub straggler_accuracy: Option<f64>,
}

/// A whole suite's score.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seed (replays the suite).
    pub seed: u64,
    /// Per-class window accuracy, by class name.
    pub classes: BTreeMap<&'static str, ClassScore>,
    /// Per-fault attribution accuracy (jobs whose attributions were right / jobs).
    pub attribution: BTreeMap<&'static str, (u32, u32)>,
    /// Every job.
    pub jobs: Vec<JobOutcome>,
}

impl Report {
    /// Totals `jobs`, scored from a run of `seed`.
    pub fn new(seed: u64, jobs: Vec<JobOutcome>) -> Report {
        let mut classes: BTreeMap<&'static str, ClassScore> = BTreeMap::new();
        let mut attribution: BTreeMap<&'static str, (u32, u32)> = BTreeMap::new();
        for o in &jobs {
            let a = attribution.entry(o.fault).or_default();
            a.0 += u32::from(o.attribution_right);
            a.1 += 1;
            let h = classes.entry(WindowClass::Healthy.as_str()).or_default();
            h.windows += o.healthy_windows;
            h.correct += o.healthy_right;
            if o.faulty_windows > 0 {
                let c = classes.entry(o.class.as_str()).or_default();
                c.windows += o.faulty_windows;
                c.correct += o.faulty_right;
                c.faulty_right += o.faulty_right;
                c.straggler_right += o.straggler_right;
            }
        }
        for c in classes.values_mut() {
            c.accuracy = (c.windows > 0).then(|| f64::from(c.correct) / f64::from(c.windows));
            c.straggler_accuracy = (c.faulty_right > 0)
                .then(|| f64::from(c.straggler_right) / f64::from(c.faulty_right));
        }
        Report {
            seed,
            classes,
            attribution,
            jobs,
        }
    }

    /// The smallest per-class window accuracy.
    pub fn min_accuracy(&self) -> f64 {
        self.classes
            .values()
            .filter_map(|c| c.accuracy)
            .fold(1.0, f64::min)
    }

    /// The smallest per-class straggler accuracy.
    pub fn min_straggler_accuracy(&self) -> f64 {
        self.classes
            .values()
            .filter_map(|c| c.straggler_accuracy)
            .fold(1.0, f64::min)
    }

    /// The smallest per-fault attribution accuracy.
    pub fn min_attribution_accuracy(&self) -> f64 {
        self.attribution
            .values()
            .map(|(r, n)| f64::from(*r) / f64::from((*n).max(1)))
            .fold(1.0, f64::min)
    }

    /// The report as a plain-text table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<24} {:>8} {:>8} {:>9} {:>10}\n",
            "class", "windows", "correct", "accuracy", "straggler"
        );
        let pct = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{a:.3}"));
        for (name, c) in &self.classes {
            out.push_str(&format!(
                "{name:<24} {:>8} {:>8} {:>9} {:>10}\n",
                c.windows,
                c.correct,
                pct(c.accuracy),
                pct(c.straggler_accuracy)
            ));
        }
        out.push_str(&format!(
            "\n{:<24} {:>8} {:>8}\n",
            "attribution", "jobs", "right"
        ));
        for (fault, (right, n)) in &self.attribution {
            out.push_str(&format!("{fault:<24} {n:>8} {right:>8}\n"));
        }
        out
    }
}

/// When a job's fault began and when its series ended, ms (the throughput's clock), and
/// when its iterations began, if the job recorded them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline<'a> {
    /// The fault's onset.
    pub fault_at_ms: i64,
    /// End of the judged series.
    pub end_ms: i64,
    /// Start of each iteration's communication, ascending, by the job's own record (empty
    /// when it keeps none): a slowing fault need not slow every iteration (a lossy link may
    /// lose nothing on a collective's critical path), and an iteration the job ran at its
    /// healthy pace is a healthy window whatever was injected.
    pub iterations: &'a [i64],
}

/// The truth of a window `[from, to)`: the fault's class once it began, healthy before;
/// a window straddling the start is not scored, unless it runs to the end of a hung job
/// (it holds the hang). With the job's record, a window of a slowing fault has the fault's
/// class only if one of the iterations it spans was slow ([`measured_slow`]).
fn truth(fault: &JobFault, t: Timeline, from: i64, to: i64) -> Option<WindowClass> {
    let class = fault.class();
    if to <= t.fault_at_ms {
        Some(WindowClass::Healthy)
    } else if from >= t.fault_at_ms {
        match measured_slow(t, from, to) {
            Some(false) if !class.is_hang() => Some(WindowClass::Healthy),
            _ => Some(class),
        }
    } else if class.is_hang() && to >= t.end_ms {
        Some(class)
    } else {
        None
    }
}

/// Whether the recorded iterations a window `[from, to)` spans include a slow one: longer
/// than [`Settings::slow_factor`] times the median period before the fault. `None` when
/// there is no record, too little of it before the fault, or the window's ends are not
/// within half a period of an iteration's start.
fn measured_slow(t: Timeline, from: i64, to: i64) -> Option<bool> {
    let starts = t.iterations;
    let healthy: Vec<f64> = starts
        .windows(2)
        .filter(|w| w[1] <= t.fault_at_ms)
        .map(|w| (w[1] - w[0]) as f64)
        .collect();
    if healthy.len() < 3 {
        return None;
    }
    let period = crate::score::median(healthy)?;
    let nearest = |at: i64| {
        let i = starts
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (**s - at).abs())?
            .0;
        ((starts[i] - at).abs() as f64 <= period / 2.0).then_some(i)
    };
    let (first, last) = (nearest(from)?, nearest(to)?);
    if last <= first {
        return None;
    }
    let slow = Settings::default().slow_factor * period;
    Some(
        starts[first..=last]
            .windows(2)
            .any(|w| (w[1] - w[0]) as f64 > slow),
    )
}

fn attribution_right(fault: &JobFault, h: &Health) -> bool {
    let a = &h.attributions;
    match *fault {
        // The rank's endpoint, or one side of it: a dead RNIC's own prober may report
        // nothing (or its probes leave by another interface), leaving only its column.
        JobFault::LinkLoss { rank, .. } | JobFault::LinkDown { rank } => {
            a.len() == 1 && a[0].rank == Some(rank) && a[0].blame != Blame::Connection
        }
        JobFault::PathLoss { src, dst, .. } => {
            a.len() == 1 && a[0].pair == Some((src, dst)) && a[0].blame == Blame::Connection
        }
        _ => a.is_empty(),
    }
}

/// Runs scenario `index` of `seed` and scores it.
pub fn run_one(seed: u64, index: u32) -> (JobOutcome, Health) {
    let spec = job::draw(seed, index, index % FAULTS);
    let run = job::run(&spec, seed ^ u64::from(index));
    let h = assess(&run.throughput, &run.pairs, &Settings::default());
    let timeline = Timeline {
        fault_at_ms: run.fault_at_ms,
        end_ms: run.end_ms,
        iterations: &[],
    };
    let o = score(
        index,
        &spec.fault,
        (spec.ranks, spec.interval_ms),
        timeline,
        &h,
    );
    (o, h)
}

/// Scores the health `h` judged on job `index` (`ranks` ranks sampled every
/// `interval_ms`) against its `fault` with `timeline` — a simulated job's or one run on a
/// namespace testbed.
pub fn score(
    index: u32,
    fault: &JobFault,
    (ranks, interval_ms): (usize, u32),
    timeline: Timeline,
    h: &Health,
) -> JobOutcome {
    let mut o = JobOutcome {
        index,
        fault: fault.name(),
        class: fault.class(),
        rank: fault.rank(),
        ranks,
        interval_ms,
        healthy_windows: 0,
        healthy_right: 0,
        faulty_windows: 0,
        faulty_right: 0,
        straggler_right: 0,
        attribution_right: attribution_right(fault, h),
        wrong: Vec::new(),
    };
    for w in &h.windows {
        let Some(t) = truth(fault, timeline, w.from_ms, w.to_ms) else {
            continue;
        };
        let right = w.class == t;
        if t == WindowClass::Healthy {
            o.healthy_windows += 1;
            o.healthy_right += u32::from(right);
        } else {
            o.faulty_windows += 1;
            o.faulty_right += u32::from(right);
            o.straggler_right += u32::from(right && w.straggler == fault.rank());
        }
        if !right {
            o.wrong.push(format!(
                "{} as {}: {}",
                t.as_str(),
                w.class.as_str(),
                w.evidence
            ));
        }
    }
    if fault.class().is_hang() && !h.windows.iter().any(|w| w.class.is_hang()) {
        // A hang nobody reported is a missed window.
        o.faulty_windows += 1;
        o.wrong
            .push(format!("{} not reported", fault.class().as_str()));
    }
    o
}

/// Runs scenarios `0..n` of `seed`.
pub fn run(seed: u64, n: u32) -> Report {
    Report::new(seed, (0..n).map(|i| run_one(seed, i).0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job recording 800 ms iterations, starting at 0, 800, …, 4 800, 6 000, 6 800,
    /// 8 000, 8 800: the ones started at 4 800 and 6 800 (after a fault at 4 000) took
    /// 1 200 ms.
    fn starts() -> Vec<i64> {
        let lengths = [800, 800, 800, 800, 800, 800, 1_200, 800, 1_200, 800];
        let mut at = 0;
        let mut s = vec![at];
        for l in lengths {
            at += l;
            s.push(at);
        }
        s
    }

    #[test]
    fn with_a_record_only_the_windows_of_slow_iterations_are_slow() {
        let s = starts();
        let t = Timeline {
            fault_at_ms: 4_000,
            end_ms: 12_000,
            iterations: &s,
        };
        let lossy = JobFault::LinkLoss {
            rank: 1,
            loss: 0.03,
            stretch: f64::NAN,
        };
        let slow = lossy.class();
        // (from, to) a verdict might report, a sample off the recorded starts.
        let cases = [
            ((0, 800), Some(WindowClass::Healthy)),
            ((3_950, 4_850), None),
            ((4_050, 4_850), Some(WindowClass::Healthy)),
            ((4_850, 6_050), Some(slow)),
            ((6_000, 6_800), Some(WindowClass::Healthy)),
            ((6_050, 8_000), Some(slow)),
            ((8_000, 8_800), Some(WindowClass::Healthy)),
            // Not near an iteration's start: the fault decides.
            ((5_300, 6_000), Some(slow)),
        ];
        for ((from, to), want) in cases {
            assert_eq!(truth(&lossy, t, from, to), want, "window {from}..{to}");
        }
        // Without a record every window after the fault is slow.
        let blind = Timeline {
            iterations: &[],
            ..t
        };
        assert_eq!(truth(&lossy, blind, 6_000, 6_800), Some(slow));
        // A hang keeps its class whatever the record says.
        let stopped = JobFault::Stopped { rank: 1 };
        assert_eq!(truth(&stopped, t, 8_000, 12_000), Some(stopped.class()));
    }
}
