//! C4D's matrix reading over a task's skeleton pairs: each cell is one (source,
//! destination) pair's probe loss and RTT. A rank whose row is bad is blamed as a source,
//! whose column is bad as a destination, both as an endpoint; bad cells no rank explains
//! are connections (or their paths). Ranks are chosen greedily, the one explaining the most
//! bad cells first, the way tomography picks the fewest components that explain the most.

use crate::{Attribution, Blame, PairHealth, Settings, quantile};
use rocemesh_proto::api::{ComponentKind, ProblemKind};

/// Pairs of one kind (under one ToR, or across ToRs) with an RTT needed to judge their
/// RTTs against their own median.
const MIN_KIND_RTTS: usize = 3;

#[derive(Debug, Clone, Copy)]
struct Cell {
    src: usize,
    dst: usize,
    probes: u64,
    lost: u64,
    by_loss: bool,
    /// Its median RTT over its kind's median, when both are known (µs).
    rtt: Option<(f64, f64)>,
}

/// Attributions of the bad cells of `pairs` over `ranks` ranks, strongest first.
pub fn attribute(ranks: usize, pairs: &[PairHealth], s: &Settings) -> Vec<Attribution> {
    let judged: Vec<&PairHealth> = pairs
        .iter()
        .filter(|p| p.probes >= s.min_probes && p.src < ranks && p.dst < ranks && p.src != p.dst)
        .collect();
    // A pair's RTT against the median of pairs of its kind (under one ToR, or across),
    // since the two cross different numbers of hops; against every pair's where its kind
    // has too few to make a median.
    let median_rtt = |local: Option<bool>| {
        let rtts: Vec<f64> = judged
            .iter()
            .filter(|p| local.is_none_or(|l| p.local == l))
            .filter_map(|p| p.rtt_us)
            .collect();
        (local.is_none() || rtts.len() >= MIN_KIND_RTTS)
            .then(|| quantile(&rtts, 0.5))
            .flatten()
    };
    let all = median_rtt(None);
    let by_kind = [false, true].map(|l| median_rtt(Some(l)).or(all));
    let bad = |p: &PairHealth, reference: Option<f64>| -> Option<bool> {
        let loss = p.lost as f64 / p.probes as f64;
        if p.lost >= s.min_lost && loss >= s.loss_bad {
            return Some(true);
        }
        match (p.rtt_us, reference) {
            (Some(r), Some(m)) if m > 0.0 && r > s.rtt_factor * m => Some(false),
            _ => None,
        }
    };
    let cells: Vec<(Cell, bool)> = judged
        .iter()
        .map(|p| {
            let reference = by_kind[usize::from(p.local)];
            let verdict = bad(p, reference);
            (
                Cell {
                    src: p.src,
                    dst: p.dst,
                    probes: p.probes,
                    lost: p.lost,
                    by_loss: verdict == Some(true),
                    rtt: p.rtt_us.zip(reference),
                },
                verdict.is_some(),
            )
        })
        .collect();
    let mut open: Vec<Cell> = cells.iter().filter(|(_, b)| *b).map(|(c, _)| *c).collect();
    let mut out = Vec::new();
    loop {
        // The rank touching the most unexplained bad cells, with a majority of its row or
        // column bad.
        let mut best: Option<(usize, usize, Blame)> = None;
        for r in 0..ranks {
            let row_n = cells.iter().filter(|(c, _)| c.src == r).count();
            let col_n = cells.iter().filter(|(c, _)| c.dst == r).count();
            let row_bad = open.iter().filter(|c| c.src == r).count();
            let col_bad = open.iter().filter(|c| c.dst == r).count();
            let row = row_bad > 0 && 2 * row_bad >= row_n;
            let col = col_bad > 0 && 2 * col_bad >= col_n;
            let blame = match (row, col) {
                (true, true) => Blame::Endpoint,
                (true, false) => Blame::Source,
                (false, true) => Blame::Destination,
                (false, false) => continue,
            };
            let explained = match blame {
                Blame::Source => row_bad,
                Blame::Destination => col_bad,
                _ => row_bad + col_bad,
            };
            if explained >= 2 && best.is_none_or(|(_, e, _)| explained > e) {
                best = Some((r, explained, blame));
            }
        }
        let Some((r, _, blame)) = best else { break };
        let (row_n, col_n) = (
            cells.iter().filter(|(c, _)| c.src == r).count(),
            cells.iter().filter(|(c, _)| c.dst == r).count(),
        );
        let takes = |c: &Cell| match blame {
            Blame::Source => c.src == r,
            Blame::Destination => c.dst == r,
            _ => c.src == r || c.dst == r,
        };
        let (mine, rest): (Vec<Cell>, Vec<Cell>) = open.into_iter().partition(|c| takes(c));
        open = rest;
        let cells_n = match blame {
            Blame::Source => row_n,
            Blame::Destination => col_n,
            _ => row_n + col_n,
        };
        let side = match blame {
            Blame::Source => "row (as source)",
            Blame::Destination => "column (as destination)",
            _ => "row and column",
        };
        out.push(finish(
            blame,
            Some(r),
            None,
            &mine,
            cells_n,
            format!(
                "rank {r}: {} of {cells_n} pairs of its {side} bad",
                mine.len()
            ),
        ));
    }
    for c in open {
        out.push(finish(
            Blame::Connection,
            None,
            Some((c.src, c.dst)),
            &[c],
            1,
            format!(
                "pair {} -> {} bad while its ranks' other pairs are healthy",
                c.src, c.dst
            ),
        ));
    }
    out
}

fn finish(
    blame: Blame,
    rank: Option<usize>,
    pair: Option<(usize, usize)>,
    cells: &[Cell],
    total: usize,
    what: String,
) -> Attribution {
    let probes: u64 = cells.iter().map(|c| c.probes).sum();
    let lost: u64 = cells.iter().map(|c| c.lost).sum();
    let loss = if probes == 0 {
        0.0
    } else {
        lost as f64 / probes as f64
    };
    let by_loss = cells.iter().any(|c| c.by_loss);
    let kind = match (by_loss, blame) {
        (false, _) => ProblemKind::HighLatency,
        (true, Blame::Connection) => ProblemKind::FlowFault,
        (true, _) => ProblemKind::RnicFault,
    };
    let component_kind = if blame == Blame::Connection {
        ComponentKind::Flow
    } else {
        ComponentKind::Rnic
    };
    let symptom = if by_loss {
        format!("{lost} of {probes} probes lost ({:.2} %)", loss * 100.0)
    } else {
        let worst = cells
            .iter()
            .filter_map(|c| c.rtt)
            .max_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
        match worst {
            Some((rtt, kind)) => format!(
                "median RTT up to {rtt:.1} µs against {kind:.1} µs, the median of its kind \
                 (pairs under one ToR, or across)"
            ),
            None => "median RTT above its kind's".to_string(),
        }
    };
    Attribution {
        blame,
        kind,
        component_kind,
        rank,
        pair,
        bad_cells: cells.len() as u32,
        cells: total as u32,
        loss,
        evidence: format!("{what}: {symptom}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(n: usize, bad: impl Fn(usize, usize) -> u64) -> Vec<PairHealth> {
        let mut v = Vec::new();
        for s in 0..n {
            for d in 0..n {
                if s != d {
                    v.push(PairHealth {
                        src: s,
                        dst: d,
                        probes: 1000,
                        lost: bad(s, d),
                        rtt_us: Some(10.0),
                        local: false,
                    });
                }
            }
        }
        v
    }

    #[test]
    fn rows_columns_crosses_and_cells() {
        let s = Settings::default();
        let a = attribute(6, &mesh(6, |s, _| if s == 2 { 30 } else { 0 }), &s);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(
            (a[0].blame, a[0].rank, a[0].bad_cells),
            (Blame::Source, Some(2), 5)
        );
        assert_eq!(a[0].kind, ProblemKind::RnicFault);
        let a = attribute(6, &mesh(6, |_, d| if d == 4 { 30 } else { 0 }), &s);
        assert_eq!((a[0].blame, a[0].rank), (Blame::Destination, Some(4)));
        let a = attribute(
            6,
            &mesh(6, |s, d| if s == 1 || d == 1 { 30 } else { 0 }),
            &s,
        );
        assert_eq!(
            (a.len(), a[0].blame, a[0].rank),
            (1, Blame::Endpoint, Some(1))
        );
        let a = attribute(
            6,
            &mesh(6, |s, d| if (s, d) == (3, 5) { 30 } else { 0 }),
            &s,
        );
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].blame, a[0].pair), (Blame::Connection, Some((3, 5))));
        assert_eq!(a[0].component_kind, ComponentKind::Flow);
        // Noise below the thresholds blames nothing.
        assert!(attribute(6, &mesh(6, |s, d| u64::from(s == 0 && d == 1) * 2), &s).is_empty());
    }

    #[test]
    fn a_ring_blames_the_rank_both_its_pairs_cross() {
        // Each rank probes its ring neighbours only: rank 3's two cells are bad, and each
        // of its neighbours has one bad cell of two.
        let n = 8;
        let mut pairs = Vec::new();
        for r in 0..n {
            for d in [(r + 1) % n, (r + n - 1) % n] {
                let lost = if r == 3 || d == 3 { 50 } else { 0 };
                pairs.push(PairHealth {
                    src: r,
                    dst: d,
                    probes: 500,
                    lost,
                    rtt_us: None,
                    local: false,
                });
            }
        }
        let a = attribute(n, &pairs, &Settings::default());
        assert_eq!(
            (a.len(), a[0].blame, a[0].rank, a[0].bad_cells),
            (1, Blame::Endpoint, Some(3), 4)
        );
    }

    #[test]
    fn pairs_across_tors_are_judged_against_their_own_kind() {
        // Ranks 0–2 under one ToR and 3–5 under another, each probing its ToR's peers and
        // the ring across (2 and 3, 5 and 0): probes across ToRs cross two more hops and
        // take 2.5 times as long, and that alone is no fault.
        let tor = |r: usize| r / 3;
        let across = [(2, 3), (3, 2), (5, 0), (0, 5)];
        let mut pairs: Vec<PairHealth> = mesh(6, |_, _| 0)
            .into_iter()
            .filter(|p| tor(p.src) == tor(p.dst) || across.contains(&(p.src, p.dst)))
            .map(|p| {
                let local = tor(p.src) == tor(p.dst);
                PairHealth {
                    local,
                    rtt_us: Some(if local { 10.0 } else { 25.0 }),
                    ..p
                }
            })
            .collect();
        let s = Settings::default();
        assert!(attribute(6, &pairs, &s).is_empty());
        // Judged against every pair's median (most are under one ToR), they look slow.
        let mixed: Vec<PairHealth> = pairs
            .iter()
            .map(|p| PairHealth { local: false, ..*p })
            .collect();
        assert!(!attribute(6, &mixed, &s).is_empty());
        // A pair across ToRs twice as slow as its kind is still bad.
        for p in pairs.iter_mut().filter(|p| (p.src, p.dst) == (2, 3)) {
            p.rtt_us = Some(60.0);
        }
        let a = attribute(6, &pairs, &s);
        assert_eq!(
            (a.len(), a[0].pair, a[0].kind),
            (1, Some((2, 3)), ProblemKind::HighLatency),
            "{a:?}"
        );
    }

    #[test]
    fn high_rtt_without_loss_is_latency() {
        let mut pairs = mesh(5, |_, _| 0);
        for p in pairs.iter_mut().filter(|p| p.dst == 0) {
            p.rtt_us = Some(100.0);
        }
        let a = attribute(5, &pairs, &Settings::default());
        assert_eq!(
            (a[0].blame, a[0].rank, a[0].kind),
            (Blame::Destination, Some(0), ProblemKind::HighLatency)
        );
    }
}
