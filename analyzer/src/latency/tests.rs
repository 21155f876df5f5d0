//! The per-pair detectors on real result records, window by window, with
//! time-compressed windows (1 s short, 10 s look-back, 20 s long).

use super::*;
use rocemesh_anomaly::synth::{Burst, Fault, PairKind, PairSpec};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::testing::probe_result;

const SHORT: i64 = 1_000;
const T0: i64 = 1_700_000_000_000;

fn cfg() -> LatencyConfig {
    LatencyConfig {
        short_window_ms: SHORT as u64,
        lookback_ms: 10_000,
        long_window_ms: 20_000,
        close_after_ms: 0,
        ..LatencyConfig::default()
    }
}

fn rec(prober: u32, target: u32, send_ms: i64, rtt: u32) -> ProbeResult {
    ProbeResult {
        prober_delay_ns: 1_000,
        responder_delay_ns: 1_000,
        app_rtt_ns: rtt + 2_000,
        class: ProbeClass::InterTor,
        ..probe_result(prober, target, send_ms, true, rtt)
    }
}

/// Base RTT of the synthetic pairs: far enough above `min_rise_us` (50 µs) that a
/// +35 % rise is material.
const BASE_NS: f64 = 200_000.0;

fn spec(kind: PairKind, burst: Option<Burst>, fault: Option<Fault>) -> PairSpec {
    PairSpec {
        kind,
        base_ns: BASE_NS,
        sigma: 0.15,
        spike_prob: 0.005,
        burst,
        fault,
        seed: 42,
    }
}

/// One window's RTTs (ns) as pair (1, 2) records sent 16 ms apart from `start`.
fn window_records(rtts: &[f64], start: i64) -> impl Iterator<Item = ProbeResult> + '_ {
    rtts.iter()
        .enumerate()
        .map(move |(i, &x)| rec(1, 2, start + i as i64 * 16, x as u32))
}

/// Feeds `windows` windows of `spec` (60 probes each) as pair (1, 2) and closes each;
/// returns, per window, whether the pair was alarmed after it closed.
fn run(lat: &mut PairLatency, spec: &PairSpec, windows: usize) -> Vec<Option<PairAlarm>> {
    let mut g = spec.generator(60);
    let mut rtts = Vec::new();
    (0..windows)
        .map(|w| {
            g.next_window(&mut rtts);
            let start = T0 + w as i64 * SHORT;
            lat.take(window_records(&rtts, start), start + SHORT);
            lat.close(start + SHORT).get(1, 2).cloned()
        })
        .collect()
}

fn fresh() -> PairLatency {
    PairLatency::new(&cfg(), 100, T0).unwrap()
}

#[test]
fn stable_and_periodically_congested_pairs_raise_nothing() {
    let mut lat = fresh();
    let stable = run(&mut lat, &spec(PairKind::Stable, None, None), 120);
    assert!(stable.iter().all(Option::is_none), "stable pair alarmed");
    let burst = Burst {
        period: 4,
        length: 1,
        phase: 1,
        fraction: 0.4,
        factor: 2.5,
    };
    let mut lat = fresh();
    let bursty = run(&mut lat, &spec(PairKind::Bursty, Some(burst), None), 120);
    assert!(bursty.iter().all(Option::is_none), "bursty pair alarmed");
    let s = lat.stats();
    assert_eq!(
        (s.windows, s.short_term_alarms, s.long_term_alarms),
        (120, 0, 0)
    );
    assert!(s.long_windows_tested >= 4, "{s:?}");
}

#[test]
fn a_step_alarms_until_latency_returns() {
    let onset = 40;
    let step = spec(
        PairKind::Step,
        None,
        Some(Fault::Step { onset, factor: 1.6 }),
    );
    let mut lat = fresh();
    let alarms = run(&mut lat, &step, 60);
    assert!(alarms[..onset].iter().all(Option::is_none));
    let a = alarms[onset]
        .as_ref()
        .expect("the step's first window fires");
    assert_eq!(a.detector(), "short_term_lof");
    let v = a.short_term.unwrap();
    assert!(v.lof > 1.5 && v.shift > 0.4, "{v:?}");
    assert!((a.reference_ns / BASE_NS - 1.0).abs() < 0.1, "{a:?}");
    assert!(a.is_slow(320_000) && !a.is_slow(200_000));
    // The look-back absorbs the new level, the alarm stays while it lasts.
    assert!(alarms[onset..].iter().all(Option::is_some));
    // Back to normal: the first normal window ends it.
    let normal = spec(PairKind::Stable, None, None);
    let mut g = normal.generator(60);
    let mut rtts = Vec::new();
    g.next_window(&mut rtts);
    let start = T0 + 60 * SHORT;
    lat.take(window_records(&rtts, start), start + SHORT);
    assert!(lat.close(start + SHORT).is_empty());
}

#[test]
fn a_rise_below_the_absolute_floor_is_host_jitter() {
    // The same +60 % step on a 20 µs pair is +12 µs: under the 50 µs floor nothing
    // fires; with the floor off the LOF detector fires at once.
    let step = |lat: &mut PairLatency| {
        let s = PairSpec {
            base_ns: 20_000.0,
            ..spec(
                PairKind::Step,
                None,
                Some(Fault::Step {
                    onset: 40,
                    factor: 1.6,
                }),
            )
        };
        run(lat, &s, 60)
    };
    let mut floored = fresh();
    assert!(step(&mut floored).iter().all(Option::is_none));
    assert_eq!(floored.stats().short_term_alarms, 0);
    let no_floor = LatencyConfig {
        min_rise_us: 0,
        ..cfg()
    };
    let mut bare = PairLatency::new(&no_floor, 100, T0).unwrap();
    assert!(step(&mut bare)[40].is_some());
}

#[test]
fn a_slow_creep_is_caught_by_the_long_term_test_only() {
    // +1.5 % per window from window 40 (long windows of 20): never a material
    // window-to-window change, +35 % by window 60.
    let creep = spec(
        PairKind::Creep,
        None,
        Some(Fault::Creep {
            onset: 40,
            rate: 0.015,
        }),
    );
    let mut lat = fresh();
    let alarms = run(&mut lat, &creep, 80);
    let first = alarms
        .iter()
        .position(Option::is_some)
        .expect("creep caught");
    let a = alarms[first].as_ref().unwrap();
    assert_eq!(a.detector(), "long_term_ztest", "{a:?}");
    let z = a.long_term.unwrap();
    assert!(z.ln_shift > 0.1 && z.p_value < 1e-3, "{z:?}");
    assert!((40..80).contains(&first), "caught at window {first}");
    assert_eq!(lat.stats().short_term_alarms, 0);
}

#[test]
fn the_first_partial_long_window_is_not_the_baseline() {
    let mut lat = fresh();
    // The pair appears 15 s into a long window at 5x its later level: if that partial
    // window became the baseline, nothing would look slow for long.
    let long_start = (T0 / 20_000 + 1) * 20_000;
    let first = long_start - 5_000;
    for w in 0..5 {
        let recs = (0..20).map(|i| rec(1, 2, first + w * SHORT + i * 40, 100_000));
        lat.take(recs, first + (w + 1) * SHORT);
        lat.close(first + (w + 1) * SHORT);
    }
    let stats = lat.stats();
    assert_eq!(stats.long_windows_fitted, 0, "partial window discarded");
    for w in 0..20 {
        let start = long_start + w * SHORT;
        let recs = (0..20).map(|i| rec(1, 2, start + i * 40, 20_000 + i as u32 * 10));
        lat.take(recs, start + SHORT);
        lat.close(start + SHORT);
    }
    assert_eq!(lat.stats().long_windows_fitted, 1);
}

#[test]
fn memory_is_bounded_and_odd_input_counted() {
    let mut lat = PairLatency::new(
        &LatencyConfig {
            max_pairs: 2,
            max_samples_per_window: 10,
            idle_evict_ms: 2_000,
            ..cfg()
        },
        100,
        T0,
    )
    .unwrap();
    let at = T0 + 10;
    let mut recs: Vec<_> = (1..=3).map(|t| rec(9, t, at, 20_000)).collect();
    recs.extend((0..15).map(|_| rec(9, 1, at, 20_000)));
    recs.push(rec(9, 1, T0 - 5_000, 20_000)); // window already closed
    recs.push(rec(9, 1, T0 + 3_600_000, 20_000)); // an hour ahead
    recs.push(ProbeResult {
        status: ProbeStatus::Timeout,
        network_rtt_ns: 0,
        ..rec(9, 2, at, 0)
    });
    lat.take(recs.into_iter(), at);
    let s = lat.stats();
    assert_eq!((s.samples, s.refused_samples, s.capped_samples), (11, 1, 6));
    assert_eq!((s.late_samples, s.future_samples), (1, 1));
    lat.close(T0 + 10_000);
    let s = lat.stats();
    assert_eq!((s.pairs, s.evicted_pairs), (0, 2), "idle pairs forgotten");
}

#[test]
fn disabled_detectors_take_nothing() {
    let mut lat = PairLatency::new(
        &LatencyConfig {
            enabled: false,
            ..cfg()
        },
        100,
        T0,
    )
    .unwrap();
    lat.take([rec(1, 2, T0 + 10, 20_000)].into_iter(), T0 + 10);
    assert_eq!(lat.stats(), LatencyStats::default());
}
