//! Iteration windows of a task and their verdicts.

use crate::bursts::{Burst, MINOR_VOLUME, bursts, join, threshold};
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
/// Ranks whose sending progress differs by less than this fraction of a burst are tied: a
/// rank stopped in the middle of a send is a fraction of a chunk short, half a chunk being
/// 1 / (4 (n - 1)) of a ring collective's sends (above this up to 26 ranks per ring);
/// ranks' own bursts differ by ~0.3 %.
const SENT_TIE: f64 = 0.01;
/// A rank starting this fraction of a slow window's excess after its peers' median onset
/// held the window back.
const LATE_SHARE: f64 = 0.5;
/// A burst closer than this fraction of the healthy period to the previous one is a
/// fragment of it.
const FRAGMENT: f64 = 0.75;
/// A job whose last iteration ran slow is not hung before its silence outlasts that
/// iteration by this factor (its next burst is due later than the rhythm's).
const SLOW_GRACE: f64 = 1.5;

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
    let mut bursts = bursts(&tp.bytes, th);
    let peers = peers(&tp.groups, ranks);
    let learn = |bursts: &[Burst]| {
        let periods: Vec<f64> = bursts
            .windows(2)
            .map(|w| (w[1].start - w[0].start) as f64 * step)
            .collect();
        s.baseline_period_ms.or_else(|| {
            (periods.len() >= MIN_ITERATIONS)
                .then(|| quantile(&periods, BASELINE_QUANTILE))
                .flatten()
        })
    };
    let mut base = learn(&bursts);
    // A burst starting that close after the previous one is a fragment of it: no
    // iteration runs that much faster than the rhythm, so a stall longer than the bridged
    // gap (a retransmission timeout) split one collective.
    if let Some(b) = base.filter(|b| *b > 0.0)
        && join(&tp.bytes, th, &mut bursts, |a, next| {
            ((next.start - a.start) as f64) * step < FRAGMENT * b
        })
    {
        base = learn(&bursts);
    }
    let volume = quantile(&bursts.iter().map(Burst::total).collect::<Vec<_>>(), 0.5);
    // A minor burst of a minority of the ranks, a hang's silence after the previous burst
    // and with none after it, does not end the hang: no collective began (its peers would
    // send their first chunks), it is stray traffic of a stopped job (a send draining,
    // probes).
    if let (Some(b), Some(v), [.., prev, last]) = (base, volume, &bursts[..])
        && last.total() < MINOR_VOLUME * v
        && 2 * last.onset.iter().flatten().count() < ranks
        && ((last.start - prev.start) as f64) * step > s.hang_factor * b
    {
        bursts.pop();
    }
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
                slow_or_healthy(b, &peers, period, base, step, &health.attributions, s)
            }
            None => {
                let silent = (len - b.start) as f64 * step;
                let last_period = i
                    .checked_sub(1)
                    .map_or(0.0, |p| (b.start - bursts[p].start) as f64 * step);
                if silent <= (s.hang_factor * base).max(SLOW_GRACE * last_period) {
                    // The newest iteration is still running.
                    continue;
                }
                let sent = sent_progress(&tp.sent, &bursts[..=i], len);
                let evidence = (pairs, &health.attributions[..], sent.as_deref());
                hang(b, &peers, (silent, base), evidence, s)
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

/// Each rank's peers (itself included): its data-parallel group, or every rank when the
/// groups do not place it in a group of two or more.
fn peers(groups: &[Vec<usize>], ranks: usize) -> Vec<Vec<usize>> {
    let all: Vec<usize> = (0..ranks).collect();
    (0..ranks)
        .map(|r| {
            groups
                .iter()
                .find(|g| g.len() >= 2 && g.contains(&r))
                .map_or_else(
                    || all.clone(),
                    |g| g.iter().copied().filter(|p| *p < ranks).collect(),
                )
        })
        .collect()
}

/// Median of `f` over `r`'s peers (itself excluded) where it is defined.
fn peer_median(peers: &[Vec<usize>], r: usize, f: impl Fn(usize) -> Option<f64>) -> f64 {
    median_of(peers[r].iter().filter(|p| **p != r).filter_map(|p| f(*p)))
}

type Judged = (WindowClass, Option<usize>, String);

fn slow_or_healthy(
    b: &Burst,
    peers: &[Vec<usize>],
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
    let med_active: Vec<f64> = (0..b.active.len())
        .map(|r| peer_median(peers, r, |p| Some(b.active[p] as f64)))
        .collect();
    let stretch = |r: usize| b.active[r] as f64 / med_active[r].max(1e-9);
    let stretched = (0..b.active.len()).max_by(|x, y| stretch(*x).total_cmp(&stretch(*y)));
    if let Some(r) = stretched
        && med_active[r] > 0.0
        && stretch(r) >= s.comm_stretch
    {
        return (
            WindowClass::CommunicationSlow,
            Some(r),
            format!(
                "{head}; rank {r} transferred for {:.0} ms against its peers' median {:.0} ms",
                b.active[r] as f64 * step,
                med_active[r] * step
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
    let lags: Vec<(usize, f64)> = b
        .onset
        .iter()
        .enumerate()
        .filter_map(|(r, o)| {
            let med = peer_median(peers, r, |p| b.onset[p].map(|o| o as f64));
            o.map(|o| (r, o as f64 - med))
        })
        .collect();
    let excess = (period - base) / step;
    if let Some(&(r, lag)) = lags.iter().max_by(|x, y| x.1.total_cmp(&y.1))
        && lag >= (LATE_SHARE * excess).max(1.0)
    {
        return (
            WindowClass::NonCommunicationSlow,
            Some(r),
            format!(
                "{head}; rank {r} started its transfers {:.0} ms after its peers, network healthy",
                lag * step
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

/// Each rank's sending progress from the start of the burst before `bursts`' last to the
/// end of the series, in units of its own median bytes sent per earlier burst (ranks send
/// alike per collective but not byte for byte); only samples above the sent series'
/// activity threshold count (idle probe traffic differs between ranks and would drown
/// the half chunk that tells a stopped rank). `None` when the bytes sent are not known or
/// no earlier burst sets the unit.
fn sent_progress(sent: &[Vec<f64>], bursts: &[Burst], len: usize) -> Option<Vec<f64>> {
    let ranks = bursts.last()?.volume.len();
    if sent.len() != ranks || sent.iter().any(|r| r.len() < len) || bursts.len() < 3 {
        return None;
    }
    let th = threshold(sent)?;
    let from = bursts[bursts.len() - 2].start;
    let active =
        |r: &[f64], a: usize, b: usize| -> f64 { r[a..b].iter().filter(|x| **x > th).sum() };
    sent.iter()
        .map(|r| {
            let unit = median_of(
                bursts[..bursts.len() - 2]
                    .iter()
                    .map(|b| active(r, b.start, b.end)),
            );
            (unit > 0.0).then(|| active(r, from, len) / unit)
        })
        .collect()
}

/// The rank that stopped sending first, when sending progress singles out fewer ranks than
/// all: the least progress, ties (within [`SENT_TIE`] of a burst) broken by the least moved
/// in the last burst. A stopped process sends nothing, but its RNIC still takes in what it
/// had granted (or, on RDMA, what peers write), so moved bytes tie it with the successor it
/// stopped feeding, and bytes sent alone tie it with the predecessor waiting for its grant.
fn first_to_stop_sending(progress: &[f64], share: impl Fn(usize) -> f64) -> Option<usize> {
    let least = progress.iter().copied().fold(f64::INFINITY, f64::min);
    let tied: Vec<usize> = (0..progress.len())
        .filter(|r| progress[*r] <= least + SENT_TIE)
        .collect();
    if tied.len() == progress.len() {
        return None;
    }
    tied.into_iter()
        .min_by(|x, y| share(*x).total_cmp(&share(*y)))
}

fn hang(
    b: &Burst,
    peers: &[Vec<usize>],
    (silent, base): (f64, f64),
    (pairs, attributions, sent): (&[PairHealth], &[Attribution], Option<&[f64]>),
    s: &Settings,
) -> Judged {
    let head = format!(
        "no burst for {silent:.0} ms ({:.1}x the healthy period)",
        silent / base
    );
    let med: Vec<f64> = (0..b.volume.len())
        .map(|r| peer_median(peers, r, |p| Some(b.volume[p])))
        .collect();
    let share = |r: usize| b.volume[r] / med[r].max(1e-9);
    let least = (0..b.volume.len()).min_by(|x, y| share(*x).total_cmp(&share(*y)));
    // The rank that stopped sending first; or, where the bytes sent are not known or tell
    // no rank apart, the rank that moved the least against its peers, or else the one that
    // fell silent first (peers drain in-flight data after it stops).
    let straggler = sent.and_then(|sent| first_to_stop_sending(sent, share));
    let straggler = straggler
        .or_else(|| least.filter(|r| share(*r) < HANG_VOLUME))
        .or_else(|| {
            let silent_for = |r: usize| {
                let last = |p: usize| b.last[p].map_or(-1.0, |l| l as f64);
                peer_median(peers, r, |p| Some(last(p))) - last(r)
            };
            let mut order: Vec<(f64, usize)> =
                (0..b.last.len()).map(|r| (silent_for(r), r)).collect();
            order.sort_by(|x, y| y.0.total_cmp(&x.0));
            match order.as_slice() {
                [(first, r), (second, _), ..] if *first > 0.0 && first > second => Some(*r),
                _ => None,
            }
        });
    // A rank whose probes mostly fail is a dead endpoint: it is the straggler whatever its
    // peers' last transfers look like.
    let dead = attributions
        .iter()
        .find(|a| a.rank.is_some() && a.blame != Blame::Connection && a.loss >= s.hang_loss);
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
    let mut moved = format!(
        "rank {r} moved {:.0} % of its peers' median in the last burst",
        if med[r] > 0.0 { 100.0 * share(r) } else { 0.0 }
    );
    if let Some(p) = sent {
        moved += &format!(
            ", sent {:.3} bursts since the one before (peers' median {:.3})",
            p[r],
            peer_median(peers, r, |q| Some(p[q]))
        );
    }
    if let Some(a) = attributions.iter().find(|a| a.rank == Some(r)) {
        return (
            WindowClass::CommunicationHang,
            Some(r),
            format!("{head}; {moved}; probes: {}", a.evidence),
        );
    }
    let mut w = Window {
        from_ms: 0,
        to_ms: 0,
        class: WindowClass::NonCommunicationHang,
        straggler: Some(r),
        evidence: format!("{head}; {moved}"),
    };
    let t = tallies(pairs, r);
    if t.iter().any(|t| t.1 > 0) {
        confirm_hang(&mut w, &t, s);
    }
    (w.class, w.straggler, w.evidence)
}

/// Probe outcomes of one direction of a hang's straggler: what they are (for the
/// evidence: "to it", "from it", "on its RNIC"), probes, lost.
pub type Tally<'a> = (&'a str, u64, u64);

/// The straggler `r`'s tallies in `pairs`: probes to it, probes from it.
pub fn tallies(pairs: &[PairHealth], r: usize) -> [Tally<'static>; 2] {
    let sum = |f: &dyn Fn(&PairHealth) -> bool| {
        pairs
            .iter()
            .filter(|p| f(p))
            .fold((0u64, 0u64), |(n, l), p| (n + p.probes, l + p.lost))
    };
    let (to_n, to_l) = sum(&|p| p.dst == r);
    let (from_n, from_l) = sum(&|p| p.src == r);
    [("to it", to_n, to_l), ("from it", from_n, from_l)]
}

/// Reads a hang window again with its straggler's probe outcomes over the window, by
/// direction (its pairs, or its RNIC's totals where per-pair outcomes are not at hand):
/// losing at least `hang_loss` of them in any direction makes it a communication hang —
/// an unreachable endpoint, whatever its own prober reports (its probes may leave by
/// another interface) — answering in every direction makes it a non-communication hang
/// (the process stopped, the host and link are alive). Other windows, and hangs without a
/// straggler, are left alone.
pub fn confirm_hang(w: &mut Window, tallies: &[Tally], s: &Settings) {
    if !w.class.is_hang() || w.straggler.is_none() {
        return;
    }
    let measured: Vec<&Tally> = tallies.iter().filter(|t| t.1 > 0).collect();
    let worst = measured
        .iter()
        .max_by(|a, b| (a.2 as f64 / a.1 as f64).total_cmp(&(b.2 as f64 / b.1 as f64)));
    let (class, why) = match worst {
        None => (w.class, "no probes on its pairs".to_string()),
        Some((what, probes, lost)) if *lost as f64 >= s.hang_loss * *probes as f64 => (
            WindowClass::CommunicationHang,
            format!("{lost} of {probes} probes {what} lost"),
        ),
        Some(_) => {
            let each: Vec<String> = measured
                .iter()
                .map(|(what, probes, lost)| format!("{lost} of {probes} {what}"))
                .collect();
            (
                WindowClass::NonCommunicationHang,
                format!("its pairs answer probes (lost: {})", each.join(", ")),
            )
        }
    };
    w.class = class;
    w.evidence = format!("{}; {why}", w.evidence);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three ranks on a 10-sample rhythm (bursts of 3), then rank 1 stops; `lost` of rank
    /// 1's probes are lost.
    fn stopped(lost: u64) -> Health {
        let mut bytes = vec![vec![1.0; 100]; 3];
        for (r, series) in bytes.iter_mut().enumerate() {
            for it in 0..6 {
                for s in 0..3 {
                    series[it * 10 + s] = 1000.0;
                }
            }
            if r != 1 {
                series[60] = 500.0;
            }
        }
        let tp = Throughput {
            interval_ms: 100,
            start_ms: 0,
            bytes,
            sent: Vec::new(),
            groups: Vec::new(),
        };
        let pairs = [(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0)].map(|(src, dst)| PairHealth {
            src,
            dst,
            probes: 100,
            lost: if src == 1 || dst == 1 { lost } else { 0 },
            rtt_us: Some(10.0),
            local: false,
        });
        assess(&tp, &pairs, &Settings::default())
    }

    /// Four ranks sampled every 100 ms: iteration `it` (of `iterations`) is active at the
    /// samples `shape(it).0` after its start and lasts `shape(it).1` samples. The health
    /// and its windows that are not healthy.
    fn rhythm(
        len: usize,
        iterations: usize,
        shape: impl Fn(usize) -> (&'static [usize], usize),
    ) -> (Health, Vec<(i64, i64)>) {
        let mut bytes = vec![vec![0.0; len]; 4];
        for series in &mut bytes {
            let mut t = 0;
            for it in 0..iterations {
                let (active, length) = shape(it);
                for k in active {
                    series[t + k] = 1000.0;
                }
                t += length;
            }
        }
        let tp = Throughput {
            interval_ms: 100,
            start_ms: 0,
            bytes,
            sent: Vec::new(),
            groups: Vec::new(),
        };
        let h = assess(&tp, &[], &Settings::default());
        let slow = h
            .windows
            .iter()
            .filter(|w| w.class != WindowClass::Healthy)
            .map(|w| (w.from_ms, w.to_ms))
            .collect();
        (h, slow)
    }

    #[test]
    fn a_collective_split_by_a_stall_is_one_slow_window_not_two() {
        // A 10-sample rhythm (bursts of 4 samples); in iterations 6 and 7 a retransmission
        // timeout stalls the collective for 4 samples after 2, and the iteration takes 15
        // samples.
        let (h, slow) = rhythm(130, 12, |it| {
            if it == 6 || it == 7 {
                (&[0, 1, 6, 7, 8], 15)
            } else {
                (&[0, 1, 2, 3], 10)
            }
        });
        assert_eq!(h.baseline_period_ms, Some(1000.0), "{h:#?}");
        // Each stalled iteration is one window of 1.5 periods, not a fragment and a rest.
        assert_eq!(slow, vec![(6_000, 7_500), (7_500, 9_000)], "{h:#?}");
        assert!(
            h.windows.iter().all(|w| w.to_ms - w.from_ms >= 1_000),
            "{h:#?}"
        );
    }

    #[test]
    fn a_collective_that_stalls_near_its_end_is_one_slow_window() {
        // In iteration 6 a retransmission timeout stalls the last step for 5 samples, so
        // its rest starts 0.8 periods after the collective did, too late to be a fragment
        // by time alone.
        let (h, slow) = rhythm(120, 11, |it| {
            if it == 6 {
                (&[0, 1, 2, 8], 14)
            } else {
                (&[0, 1, 2, 3], 10)
            }
        });
        assert_eq!(slow, vec![(6_000, 7_400)], "{h:#?}");
        assert_eq!(h.windows.len(), 10, "{h:#?}");
    }

    #[test]
    fn a_job_running_three_times_slower_is_slow_until_its_silence_outlasts_its_pace() {
        // Six iterations of 10 samples, then three of 32 (3.2 periods: a starved rank) and
        // a burst at sample 156; the series ends some samples after it.
        let shape = |it: usize| -> (&'static [usize], usize) {
            (&[0, 1, 2, 3], if (6..9).contains(&it) { 32 } else { 10 })
        };
        // 3.1 healthy periods of silence: the next slow iteration is not due yet.
        let (h, _) = rhythm(156 + 31, 10, shape);
        assert_eq!(h.baseline_period_ms, Some(1000.0), "{h:#?}");
        assert_eq!(h.windows.len(), 9, "{h:#?}");
        assert!(h.windows.iter().all(|w| !w.class.is_hang()), "{h:#?}");
        assert!(
            h.windows[6..]
                .iter()
                .all(|w| w.class == WindowClass::NonCommunicationSlow),
            "{h:#?}"
        );
        // Silent for 1.5 times the slow pace: hung.
        let (h, _) = rhythm(156 + 49, 10, shape);
        assert_eq!(h.windows.len(), 10, "{h:#?}");
        assert!(h.worst().unwrap().class.is_hang(), "{h:#?}");
    }

    #[test]
    fn stray_traffic_during_a_hang_does_not_end_it() {
        // Ranks 0 and 2 keep the rhythm until sample 60, then the job hangs; 3 periods
        // later rank 2 sends a blip (a drained send, probes).
        let mut bytes = vec![vec![1.0; 100]; 3];
        for series in &mut bytes {
            for it in 0..6 {
                for s in 0..3 {
                    series[it * 10 + s] = 1000.0;
                }
            }
        }
        bytes[2][95] = 600.0;
        let mut tp = Throughput {
            interval_ms: 100,
            start_ms: 0,
            bytes,
            sent: Vec::new(),
            groups: Vec::new(),
        };
        let h = assess(&tp, &[], &Settings::default());
        let w = h.worst().unwrap();
        assert!(w.class.is_hang(), "{h:#?}");
        assert_eq!((w.from_ms, w.to_ms), (5_000, 10_000), "{h:#?}");
        // Most ranks starting to send is a collective beginning late: a slow iteration.
        tp.bytes[0][95] = 600.0;
        let h = assess(&tp, &[], &Settings::default());
        let w = h.worst().unwrap();
        assert!(!w.class.is_hang(), "{h:#?}");
        assert_eq!((w.from_ms, w.to_ms), (5_000, 9_500), "{h:#?}");
    }

    #[test]
    fn a_stopped_rank_hangs_the_job_and_its_probes_say_which_hang() {
        let h = stopped(0);
        assert_eq!(h.baseline_period_ms, Some(1000.0));
        let w = h.worst().unwrap();
        assert_eq!(
            (w.class, w.straggler, w.from_ms),
            (WindowClass::NonCommunicationHang, Some(1), 6000)
        );
        assert_eq!(
            h.windows
                .iter()
                .filter(|w| w.class == WindowClass::Healthy)
                .count(),
            6
        );
        let h = stopped(100);
        let w = h.worst().unwrap();
        assert_eq!(
            (w.class, w.straggler),
            (WindowClass::CommunicationHang, Some(1))
        );
        assert_eq!(h.attributions[0].rank, Some(1));
    }

    /// Two pipeline stages (ranks 0–2 and 3–5; stage 1 bursts 6 samples after stage 0) on
    /// a 20-sample rhythm; from iteration 6 on, rank 0's computation runs 8 samples long:
    /// its ready stage peers exchange a first chunk on time and wait, stage 1 follows late.
    fn pipeline(groups: Vec<Vec<usize>>) -> Health {
        let mut bytes = vec![vec![0.0; 16 * 20]; 6];
        let mut start = 0;
        for it in 0..11 {
            let late = if it >= 6 { 8 } else { 0 };
            for (r, series) in bytes.iter_mut().enumerate() {
                let stage = if r < 3 { 0 } else { 6 };
                let on = start + stage + late;
                if r != 0 && late > 0 {
                    series[start + stage] = 300.0;
                }
                series[on..on + 4].fill(1000.0);
            }
            start += 20 + late;
        }
        for series in &mut bytes {
            series.truncate(start + 10);
        }
        let tp = Throughput {
            interval_ms: 100,
            start_ms: 0,
            bytes,
            sent: Vec::new(),
            groups,
        };
        assess(&tp, &[], &Settings::default())
    }

    #[test]
    fn stage_offsets_are_judged_within_each_data_parallel_group() {
        let h = pipeline(vec![vec![0, 1, 2], vec![3, 4, 5]]);
        let slow: Vec<&Window> = h
            .windows
            .iter()
            .filter(|w| w.class != WindowClass::Healthy)
            .collect();
        assert!(!slow.is_empty(), "{h:?}");
        for w in &slow {
            assert_eq!(
                (w.class, w.straggler),
                (WindowClass::NonCommunicationSlow, Some(0)),
                "{w:?}"
            );
        }
        // Compared with every rank, the late stage hides rank 0 behind stage 1's offset.
        let h = pipeline(Vec::new());
        assert!(h.windows.iter().all(|w| w.straggler != Some(0)), "{h:?}");
    }

    #[test]
    fn confirm_hang_reads_probe_totals_and_leaves_other_windows() {
        let s = Settings::default();
        let hang = Window {
            from_ms: 0,
            to_ms: 1,
            class: WindowClass::NonCommunicationHang,
            straggler: Some(3),
            evidence: "stopped".into(),
        };
        let mut w = hang.clone();
        confirm_hang(&mut w, &[("on its RNIC", 100, 60)], &s);
        assert_eq!(w.class, WindowClass::CommunicationHang);
        assert!(
            w.evidence.ends_with("60 of 100 probes on its RNIC lost"),
            "{}",
            w.evidence
        );
        let mut w = hang.clone();
        confirm_hang(&mut w, &[("to it", 100, 2), ("from it", 50, 0)], &s);
        assert_eq!(w.class, WindowClass::NonCommunicationHang);
        assert!(
            w.evidence
                .ends_with("(lost: 2 of 100 to it, 0 of 50 from it)")
        );
        // A dead link loses the probes to it; its own prober's may leave by another
        // interface and be answered: one direction lost is enough.
        let mut w = hang.clone();
        confirm_hang(&mut w, &[("to it", 450, 450), ("from it", 500, 0)], &s);
        assert_eq!(w.class, WindowClass::CommunicationHang, "{}", w.evidence);
        assert!(w.evidence.ends_with("450 of 450 probes to it lost"));
        // A dead RNIC read over a period that began well before the hang: diluted.
        let mut w = hang.clone();
        confirm_hang(&mut w, &[("to it", 399, 196), ("from it", 353, 0)], &s);
        assert_eq!(w.class, WindowClass::CommunicationHang, "{}", w.evidence);
        let mut w = hang.clone();
        confirm_hang(&mut w, &[("to it", 0, 0)], &s);
        assert_eq!(w.class, WindowClass::NonCommunicationHang);
        let mut w = Window {
            class: WindowClass::CommunicationSlow,
            ..hang
        };
        confirm_hang(&mut w, &[("to it", 100, 100)], &s);
        assert_eq!(
            (w.class, w.evidence.as_str()),
            (WindowClass::CommunicationSlow, "stopped")
        );
    }
}
