//! Cost per short window for 10,000 RNIC pairs: feature extraction, LOF
//! against a 10-window look-back, the log-normal sufficient-statistics update,
//! and the long-window z-test. Prints a table; runs in a few seconds.

use std::{hint::black_box, time::Instant};

use rand::{SeedableRng, rngs::StdRng};
use rocemesh_anomaly::{
    LogSummary, LongTermConfig, LongTermDetector, PairKind, PairSpec, ShortTermConfig,
    ShortTermDetector, WindowFeatures,
};

const PAIRS: usize = 10_000;
const SAMPLES: usize = 60;
const ROUNDS: usize = 10;

fn main() {
    let mut rng = StdRng::seed_from_u64(42);
    let specs: Vec<PairSpec> = (0..PAIRS)
        .map(|i| PairSpec::random(PairKind::ALL[i % 2], 240, 60, &mut rng))
        .collect();
    let mut generators: Vec<_> = specs.iter().map(|s| s.generator(SAMPLES)).collect();
    // windows[r][p]: RTTs of pair p in round r (10 warm-up + ROUNDS measured).
    let mut windows: Vec<Vec<Vec<f64>>> = Vec::new();
    for _ in 0..(10 + ROUNDS) {
        let round = generators
            .iter_mut()
            .map(|g| {
                let mut out = Vec::new();
                g.next_window(&mut out);
                out
            })
            .collect();
        windows.push(round);
    }
    let mut scratch = Vec::new();
    let features: Vec<Vec<WindowFeatures>> = windows
        .iter()
        .map(|round| {
            round
                .iter()
                .map(|w| {
                    WindowFeatures::from_samples(w, &mut scratch)
                        .expect("valid window")
                        .0
                })
                .collect()
        })
        .collect();
    let mut detectors: Vec<ShortTermDetector> = (0..PAIRS)
        .map(|_| ShortTermDetector::new(ShortTermConfig::default()).expect("default config"))
        .collect();
    for round in &features[..10] {
        for (d, f) in detectors.iter_mut().zip(round) {
            d.observe(f).expect("valid features");
        }
    }

    let mut rows = Vec::new();
    let t = Instant::now();
    for round in &windows[10..] {
        for w in round {
            black_box(WindowFeatures::from_samples(black_box(w), &mut scratch).ok());
        }
    }
    rows.push((format!("window features ({SAMPLES} samples)"), t.elapsed()));

    let t = Instant::now();
    let mut alarms = 0usize;
    for round in &features[10..] {
        for (d, f) in detectors.iter_mut().zip(round) {
            let v = d.observe(black_box(f)).expect("valid features");
            alarms += usize::from(v.is_some_and(|v| v.anomaly));
        }
    }
    rows.push(("LOF observe (look-back 10, k 5)".into(), t.elapsed()));

    let mut summaries = vec![LogSummary::default(); PAIRS];
    let t = Instant::now();
    for round in &windows[10..] {
        for (s, w) in summaries.iter_mut().zip(round) {
            s.extend(black_box(w));
        }
    }
    rows.push((
        format!("log-normal update ({SAMPLES} samples)"),
        t.elapsed(),
    ));

    let mut long: Vec<LongTermDetector> = (0..PAIRS)
        .map(|_| LongTermDetector::new(LongTermConfig::default()).expect("default config"))
        .collect();
    for (d, s) in long.iter_mut().zip(&summaries) {
        d.observe(s).expect("enough samples");
    }
    let t = Instant::now();
    for _ in 0..ROUNDS {
        for (d, s) in long.iter_mut().zip(&summaries) {
            black_box(d.observe(black_box(s)).expect("enough samples"));
        }
    }
    rows.push(("z-test + refit (per long window)".into(), t.elapsed()));

    println!(
        "{PAIRS} RNIC pairs, {ROUNDS} windows each (LOF alarms on stable/bursty pairs: {alarms})"
    );
    println!(
        "{:<38} {:>14} {:>18}",
        "stage", "ns per pair", "ms per 10k pairs"
    );
    for (name, elapsed) in rows {
        let per_pair = elapsed.as_nanos() as f64 / (PAIRS * ROUNDS) as f64;
        println!(
            "{name:<38} {per_pair:>14.0} {:>18.2}",
            per_pair * PAIRS as f64 / 1e6
        );
    }
}
