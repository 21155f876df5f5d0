//! C4D's matrix reading over a task's skeleton pairs: each cell is one (source,
//! destination) pair's probe loss and RTT. A rank whose row is bad is blamed as a source,
//! whose column is bad as a destination, both as an endpoint; bad cells no rank explains
//! are connections (or their paths). Ranks are chosen greedily, the one explaining the most
//! bad cells first, the way tomography picks the fewest components that explain the most.

use crate::{Attribution, Blame, PairHealth, Settings, quantile};
use rocemesh_proto::api::{ComponentKind, ProblemKind};

#[derive(Debug, Clone, Copy)]
struct Cell {
    src: usize,
    dst: usize,
    probes: u64,
    lost: u64,
    by_loss: bool,
}

/// Attributions of the bad cells of `pairs` over `ranks` ranks, strongest first.
pub fn attribute(ranks: usize, pairs: &[PairHealth], s: &Settings) -> Vec<Attribution> {
    let judged: Vec<&PairHealth> = pairs
        .iter()
        .filter(|p| p.probes >= s.min_probes && p.src < ranks && p.dst < ranks && p.src != p.dst)
        .collect();
    let rtts: Vec<f64> = judged.iter().filter_map(|p| p.rtt_us).collect();
    let median_rtt = quantile(&rtts, 0.5);
    let bad = |p: &PairHealth| -> Option<bool> {
        let loss = p.lost as f64 / p.probes as f64;
        if p.lost >= s.min_lost && loss >= s.loss_bad {
            return Some(true);
        }
        match (p.rtt_us, median_rtt) {
            (Some(r), Some(m)) if m > 0.0 && r > s.rtt_factor * m => Some(false),
            _ => None,
        }
    };
    let cells: Vec<(Cell, bool)> = judged
        .iter()
        .map(|p| {
            let verdict = bad(p);
            (
                Cell {
                    src: p.src,
                    dst: p.dst,
                    probes: p.probes,
                    lost: p.lost,
                    by_loss: verdict == Some(true),
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
        "median RTT above the task's".to_string()
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
