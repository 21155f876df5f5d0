//! A stopped rank of a ring job, on counters recorded on the namespace testbed: each
//! fixture holds the bytes sent and received per 50 ms by every rank's RNIC, 8 s before
//! and 6 s after one rank's job process got SIGSTOP (`source` says which run).
//!
//! The stops fell where they fall in a real job: during the computation (the stopped rank
//! and its predecessor, waiting for its grant, send nothing in the peers' partial
//! collective) and in the middle of the last chunk of a collective (the stopped rank and
//! the successor it stopped feeding move the same bytes and both stall).

use rocemesh_taskhealth::{Settings, Throughput, WindowClass, assess};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    source: String,
    interval_ms: u32,
    stopped: usize,
    /// When the rank was stopped, ms into the series.
    stopped_at_ms: i64,
    tx: Vec<Vec<u64>>,
    rx: Vec<Vec<u64>>,
}

fn fixtures() -> Vec<(String, Fixture)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut out: Vec<(String, Fixture)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("stopped-ring"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (
                p.display().to_string(),
                serde_json::from_str(&text).unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 5, "fixtures in {}", dir.display());
    out
}

/// The hang window's straggler and start, judged with the bytes sent or on totals only,
/// with the ranks renumbered `r -> (r + rotate) % n` (the ring's order kept) and the
/// answer numbered back; and the healthy period.
fn hang(f: &Fixture, with_sent: bool, rotate: usize) -> (Option<usize>, i64, f64) {
    let n = f.tx.len();
    let order: Vec<usize> = (0..n).map(|i| (i + n - rotate) % n).collect();
    let sent: Vec<Vec<f64>> = order
        .iter()
        .map(|&r| f.tx[r].iter().map(|b| *b as f64).collect())
        .collect();
    let bytes = order
        .iter()
        .map(|&r| {
            f.tx[r]
                .iter()
                .zip(&f.rx[r])
                .map(|(t, r)| (t + r) as f64)
                .collect()
        })
        .collect();
    let tp = Throughput {
        interval_ms: f.interval_ms,
        start_ms: 0,
        bytes,
        sent: if with_sent { sent } else { Vec::new() },
        groups: Vec::new(),
    };
    let h = assess(&tp, &[], &Settings::default());
    let w = h.worst().expect("judged windows");
    assert_eq!(w.class, WindowClass::NonCommunicationHang, "{h:#?}");
    let base = h.baseline_period_ms.expect("a rhythm learned");
    (w.straggler.map(|i| order[i]), w.from_ms, base)
}

fn straggler(f: &Fixture, with_sent: bool, rotate: usize) -> Option<usize> {
    hang(f, with_sent, rotate).0
}

/// Every renumbering of a fixture's ranks.
fn rotations(f: &Fixture) -> std::ops::Range<usize> {
    0..f.tx.len()
}

#[test]
fn the_rank_that_stopped_sending_first_is_named() {
    for (path, f) in fixtures() {
        for k in rotations(&f) {
            let (straggler, from_ms, base) = hang(&f, true, k);
            assert_eq!(
                straggler,
                Some(f.stopped),
                "{path}, ranks renumbered +{k}: {}",
                f.source
            );
            // The hang begins with the collective the stop cut short, not with idle
            // traffic after it.
            assert!(
                (from_ms as f64) < f.stopped_at_ms as f64 + base,
                "{path}: the hang window starts at {from_ms} ms, the stop was at {} ms",
                f.stopped_at_ms
            );
        }
    }
}

#[test]
fn totals_alone_cannot_tell_every_stop() {
    // What the fixtures are for: on bytes moved alone the stopped rank can tie with a
    // neighbour, and then idle noise or the numbering decides.
    let wrong: Vec<String> = fixtures()
        .into_iter()
        .filter(|(_, f)| rotations(f).any(|k| straggler(f, false, k) != Some(f.stopped)))
        .map(|(p, _)| p)
        .collect();
    assert!(!wrong.is_empty(), "every fixture is read right on totals");
}
