//! Iteration windows of a task and their verdicts.

use crate::bursts::{Burst, bursts, threshold};
use crate::matrix::attribute;
use crate::{
    Attribution, Blame, Health, PairHealth, Settings, Throughput, Window, WindowClass, quantile,
};

/// Complete iterations needed to learn the healthy period.
const MIN_ITERATIONS: usize = 3;
/// Quantile of the iteration periods taken as the healthy one (robust to a fault that
/// covers up to half the interval).
const BASELINE_QUANTILE: f64 = 0.25;
/// A rank that moved less than this fraction of its peers' median in the last burst
/// stopped first.
const HANG_VOLUME: f64 = 0.5;
/// A rank starting this fraction of a slow window's excess after its peers' median onset
/// held the window back.
const LATE_SHARE: f64 = 0.5;

/// Judges every iteration window of `tp` (with the probe health of the task's skeleton
/// pairs over the same interval).
pub fn assess(tp: &Throughput, pairs: &[PairHealth], s: &Settings) -> Health {
    let ranks = tp.bytes.len();
    let attributions = attribute(ranks, pairs, s);
    let mut health = Health {
        baseline_period_ms: None,
        windows: Vec::new(),
        attributions,
        note: None,
    };
    let len = tp.bytes.iter().map(Vec::len).min().unwrap_or(0);
    if ranks < 2 || len == 0 {
        health.note = Some("fewer than two ranks with throughput samples".into());
        return health;
    }
    let Some(th) = threshold(&tp.bytes) else {
        health.note = Some("no traffic in the interval".into());
        return health;
    };
    let step = f64::from(tp.interval_ms.max(1));
    let at = |sample: usize| tp.start_ms + (sample as f64 * step) as i64;
    let bursts = bursts(&tp.bytes, th);
    let periods: Vec<f64> = bursts
        .windows(2)
        .map(|w| (w[1].start - w[0].start) as f64 * step)
        .collect();
    let base = s.baseline_period_ms.or_else(|| {
        (periods.len() >= MIN_ITERATIONS)
            .then(|| quantile(&periods, BASELINE_QUANTILE))
            .flatten()
    });
    let Some(base) = base.filter(|b| *b > 0.0) else {
        health.note = Some(format!(
            "{} bursts: too few iterations to learn the task's rhythm",
            bursts.len()
        ));
        return health;
    };
    health.baseline_period_ms = Some(base);
    for (i, b) in bursts.iter().enumerate() {
        let w = match bursts.get(i + 1) {
            Some(next) => {
                let period = (next.start - b.start) as f64 * step;
                slow_or_healthy(b, period, base, step, &health.attributions, s)
            }
            None => {
                let silent = (len - b.start) as f64 * step;
                if silent <= s.hang_factor * base {
                    // The newest iteration is still running.
                    continue;
                }
                hang(b, silent, base, pairs, &health.attributions, s)
            }
        };
        let (class, straggler, evidence) = w;
        let to = bursts.get(i + 1).map_or(len, |n| n.start);
        health.windows.push(Window {
            from_ms: at(b.start),
            to_ms: at(to),
            class,
            straggler,
            evidence,
        });
    }
    health
}

fn median_of(v: impl Iterator<Item = f64>) -> f64 {
    quantile(&v.collect::<Vec<_>>(), 0.5).unwrap_or(0.0)
}

type Judged = (WindowClass, Option<usize>, String);

fn slow_or_healthy(
    b: &Burst,
    period: f64,
    base: f64,
    step: f64,
    attributions: &[Attribution],
    s: &Settings,
) -> Judged {
    let ratio = period / base;
    if ratio <= s.slow_factor {
        return (
            WindowClass::Healthy,
            None,
            format!("iteration {:.0} ms, {ratio:.2}x the healthy period", period),
        );
    }
    let head = format!("iteration {period:.0} ms, {ratio:.2}x the healthy {base:.0} ms");
    // Communication straggler: active far longer than its peers (Pulse: actual
    // communication time).
    let med_active = median_of(b.active.iter().map(|a| *a as f64));
    let stretched = (0..b.active.len()).max_by(|x, y| b.active[*x].cmp(&b.active[*y]));
    if let Some(r) = stretched
        && med_active > 0.0
        && b.active[r] as f64 >= s.comm_stretch * med_active
    {
        return (
            WindowClass::CommunicationSlow,
            Some(r),
            format!(
                "{head}; rank {r} transferred for {:.0} ms against its peers' median {:.0} ms",
                b.active[r] as f64 * step,
                med_active * step
            ),
        );
    }
    // Probe evidence naming a rank.
    if let Some(a) = attributions.iter().find(|a| a.blame != Blame::Connection) {
        return (
            WindowClass::CommunicationSlow,
            a.rank,
            format!("{head}; probes: {}", a.evidence),
        );
    }
    // Non-communication straggler: starts late, transfers normally.
    let onsets: Vec<(usize, f64)> = b
        .onset
        .iter()
        .enumerate()
        .filter_map(|(r, o)| o.map(|o| (r, o as f64)))
        .collect();
    let med_onset = median_of(onsets.iter().map(|(_, o)| *o));
    let excess = (period - base) / step;
    if let Some(&(r, o)) = onsets.iter().max_by(|x, y| x.1.total_cmp(&y.1))
        && o - med_onset >= (LATE_SHARE * excess).max(1.0)
    {
        return (
            WindowClass::NonCommunicationSlow,
            Some(r),
            format!(
                "{head}; rank {r} started its transfers {:.0} ms after its peers, network healthy",
                (o - med_onset) * step
            ),
        );
    }
    if let Some(a) = attributions.first() {
        return (
            WindowClass::CommunicationSlow,
            a.pair.map(|p| p.0),
            format!("{head}; probes: {}", a.evidence),
        );
    }
    (
        WindowClass::NonCommunicationSlow,
        None,
        format!("{head}; every rank slowed alike and the probes are healthy"),
    )
}

fn hang(
    b: &Burst,
    silent: f64,
    base: f64,
    pairs: &[PairHealth],
    attributions: &[Attribution],
    s: &Settings,
) -> Judged {
    let head = format!(
        "no burst for {silent:.0} ms ({:.1}x the healthy period)",
        silent / base
    );
    let med = median_of(b.volume.iter().copied());
    let least = (0..b.volume.len()).min_by(|x, y| b.volume[*x].total_cmp(&b.volume[*y]));
    // The rank that moved the least, or else the one that fell silent first (peers drain
    // in-flight data after it stops).
    let straggler = least
        .filter(|r| b.volume[*r] < HANG_VOLUME * med)
        .or_else(|| {
            let mut order: Vec<(Option<usize>, usize)> =
                b.last.iter().enumerate().map(|(r, l)| (*l, r)).collect();
            order.sort_unstable();
            match order.as_slice() {
                [(first, r), (second, _), ..] if first < second => Some(*r),
                _ => None,
            }
        });
    // A rank whose probes mostly fail is a dead endpoint: it is the straggler whatever its
    // peers' last transfers look like.
    let dead = attributions
        .iter()
        .find(|a| a.rank.is_some() && a.blame != Blame::Connection && a.loss >= s.hang_loss / 2.0);
    if let Some(a) = dead
        && straggler != a.rank
    {
        return (
            WindowClass::CommunicationHang,
            a.rank,
            format!("{head}; probes: {}", a.evidence),
        );
    }
    let Some(r) = straggler else {
        return (
            WindowClass::NonCommunicationHang,
            None,
            format!("{head}; every rank finished the last burst alike"),
        );
    };
    let (probes, lost) = pairs
        .iter()
        .filter(|p| p.src == r || p.dst == r)
        .fold((0u64, 0u64), |(n, l), p| (n + p.probes, l + p.lost));
    let moved = format!(
        "rank {r} moved {:.0} % of its peers' median in the last burst",
        if med > 0.0 {
            100.0 * b.volume[r] / med
        } else {
            0.0
        }
    );
    let blamed = attributions.iter().find(|a| a.rank == Some(r));
    if let Some(a) = blamed {
        (
            WindowClass::CommunicationHang,
            Some(r),
            format!("{head}; {moved}; probes: {}", a.evidence),
        )
    } else if probes > 0 && lost as f64 >= s.hang_loss * probes as f64 {
        (
            WindowClass::CommunicationHang,
            Some(r),
            format!("{head}; {moved}; {lost} of {probes} probes on its pairs lost"),
        )
    } else {
        let probed = if probes == 0 {
            "no probes on its pairs".to_string()
        } else {
            format!("its pairs answer probes ({lost} of {probes} lost)")
        };
        (
            WindowClass::NonCommunicationHang,
            Some(r),
            format!("{head}; {moved}; {probed}"),
        )
    }
}
