//! Cost per short window for 10,000 RNIC pairs: feature extraction, LOF
//! against a 10-window look-back, the log-normal sufficient-statistics update,
//! and the long-window z-test; then the heap a pair's [`LatencyMonitor`] holds
//! once its look-back is full and scored, against that look-back's features as
//! `f64` points (what scoring reads).
//! Prints a table; runs in a few seconds.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicIsize, Ordering},
    time::Instant,
};

use rand::{SeedableRng, rngs::StdRng};
use rocemesh_anomaly::{
    LatencyMonitor, LogSummary, LongTermConfig, LongTermDetector, MonitorConfig, PairKind,
    PairSpec, Scratch, ShortTermConfig, ShortTermDetector, WindowFeatures, lof::Point,
};

/// The system allocator, counting the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

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
    let mut shared = Scratch::default();
    for round in &features[..10] {
        for (d, f) in detectors.iter_mut().zip(round) {
            d.observe(f, &mut shared).expect("valid features");
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
            let v = d
                .observe(black_box(f), &mut shared)
                .expect("valid features");
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

    let per_pair = monitor_heap_per_pair(&windows);
    let lookback = ShortTermConfig::default().lookback * size_of::<Point>();

    println!(
        "{PAIRS} RNIC pairs, {ROUNDS} windows each (LOF alarms on stable/bursty pairs: {alarms})"
    );
    println!(
        "{:<38} {:>14} {:>18}",
        "stage", "ns per pair", "ms per 10k pairs"
    );
    for (name, elapsed) in rows {
        let per_window = elapsed.as_nanos() as f64 / (PAIRS * ROUNDS) as f64;
        println!(
            "{name:<38} {per_window:>14.0} {:>18.2}",
            per_window * PAIRS as f64 / 1e6
        );
    }
    println!(
        "heap per pair, LatencyMonitor with a full, scored look-back: {per_pair:.0} B \
         (its look-back's features as f64 points: {lookback} B, {:.2}x)",
        per_pair / lookback as f64
    );
}

/// Heap bytes each of `PAIRS` monitors holds after every round of `windows`, each a
/// clone of one template and all scored with one shared [`Scratch`], as the analyzer
/// makes and scores its pairs.
fn monitor_heap_per_pair(windows: &[Vec<Vec<f64>>]) -> f64 {
    let mut scratch = Scratch::default();
    let before = LIVE.load(Ordering::Relaxed);
    let template = LatencyMonitor::new(&MonitorConfig::default()).expect("default config");
    let mut monitors: Vec<LatencyMonitor> = (0..PAIRS).map(|_| template.clone()).collect();
    for round in windows {
        for (m, w) in monitors.iter_mut().zip(round) {
            m.observe_window(w, &mut scratch).expect("valid window");
        }
    }
    drop(scratch);
    let after = LIVE.load(Ordering::Relaxed);
    black_box(&monitors);
    (after - before) as f64 / PAIRS as f64
}
