//! The incremental window against a from-scratch recount of the results in the window,
//! on random results and ticks: per-flow totals, least RTTs, slow verdicts (with
//! baselines moving tick by tick), processing delays, timeouts held, idle flows forgotten.

use super::table::Slot;
use super::*;
use crate::registry::RnicEntry;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocemesh_proto::testing::probe_result;
use rocemesh_proto::{ProbeClass, ProbeStatus, TimestampSource};
use std::collections::HashMap;

const RNICS: u32 = 6;
const T0: i64 = 1_700_000_000_000;

fn registry() -> Registry {
    Registry::new(
        (1..=RNICS).map(|r| {
            let e = RnicEntry {
                host_id: r.div_ceil(2),
                tor: 0,
            };
            (r, e)
        }),
        vec!["t0".to_string()].into(),
    )
}

fn config() -> DiagnosisConfig {
    DiagnosisConfig {
        max_records: 1_000,
        // Factor rule and NIC floor within reach of the random RTTs.
        latency_factor: 2,
        latency_min_ns: 1_000,
        latency_min_nic_ns: 5_000,
        ..DiagnosisConfig::default()
    }
}

/// Flows on source port 50,001 are timed by NIC timestamps, the others in software.
fn nic(k: &FlowKey) -> bool {
    k.sport == 50_001
}

fn key(r: &ProbeResult) -> FlowKey {
    FlowKey {
        prober: r.prober_rnic,
        target: r.target_rnic,
        sport: r.src_port,
        dport: r.dst_port,
    }
}

/// What the window should hold at a tick, recounted from every result taken so far.
#[derive(Debug, Default, PartialEq)]
struct Recount {
    /// Per flow: (arrivals, slow, least RTT).
    flows: HashMap<FlowKey, (u32, u32, u32)>,
    /// Per RNIC: (delays, above the noise threshold).
    delays: HashMap<u32, (u32, u32)>,
    timeouts: usize,
}

/// The old way: every result sent in [now - window, now] read again. `slow[i]` is the
/// verdict result `i` got when it arrived (against the baseline of that time).
fn recount(taken: &[(ProbeResult, bool)], now: i64, cfg: &DiagnosisConfig) -> Recount {
    let mut c = Recount::default();
    let start = now - cfg.window_ms as i64;
    for (r, slow) in taken {
        let send = (r.send_unix_ns / 1_000_000) as i64;
        if send < start || send > now {
            continue;
        }
        if r.status.is_timeout() {
            c.timeouts += 1;
            continue;
        }
        let f = c.flows.entry(key(r)).or_insert((0, 0, u32::MAX));
        f.0 += 1;
        f.1 += u32::from(*slow);
        f.2 = f.2.min(r.network_rtt_ns);
        for (rnic, d) in [
            (r.prober_rnic, r.prober_delay_ns),
            (r.target_rnic, r.responder_delay_ns),
        ] {
            let t = c.delays.entry(rnic).or_default();
            t.0 += 1;
            t.1 += u32::from(u64::from(d) > cfg.noise_delay_ns);
        }
    }
    c
}

fn observed(w: &Window) -> Recount {
    let flows = w
        .flows()
        .indices()
        .map(|i| {
            let f = w.flows().get(i);
            (f.key, (f.ok, f.slow, f.min_rtt))
        })
        .collect();
    Recount {
        flows,
        delays: w.delays().totals().collect(),
        timeouts: w.timeouts().count(),
    }
}

fn random_result(rng: &mut StdRng, at: i64) -> ProbeResult {
    let prober = rng.random_range(1..=RNICS);
    let target = rng.random_range(1..=RNICS);
    let ok = rng.random_bool(0.9);
    let mut r = probe_result(
        prober,
        target,
        at - rng.random_range(0..12_000),
        ok,
        rng.random_range(10_000..40_000),
    );
    r.src_port = rng.random_range(50_000..50_003);
    if nic(&key(&r)) {
        r.ts_source = TimestampSource::Hardware;
    }
    r.prober_delay_ns = rng.random_range(0..8_000_000);
    r.responder_delay_ns = rng.random_range(0..8_000_000);
    if !ok && rng.random_bool(0.3) {
        r.status = ProbeStatus::Ack2Lost;
    }
    r
}

#[test]
fn running_totals_equal_a_recount_of_the_window() {
    let cfg = config();
    let judge = Window::new(&cfg).judge;
    let registry = registry();
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut w = Window::new(&cfg);
        let mut taken: Vec<(ProbeResult, bool)> = Vec::new();
        let mut baselines: HashMap<FlowKey, f64> = HashMap::new();
        // Ticks every second from the window's start (the old window then holds the
        // same results).
        let mut now = T0;
        w.advance(now);
        for _ in 0..40 {
            let next = now + 1_000 * rng.random_range(0..3);
            for _ in 0..rng.random_range(0..4) {
                let at = rng.random_range(now..=next);
                let batch: Vec<ProbeResult> = (0..rng.random_range(0..60))
                    .map(|_| random_result(&mut rng, at))
                    .collect();
                for r in &batch {
                    let k = key(r);
                    let slow =
                        judge.above_baseline(baselines.get(&k).copied(), r.network_rtt_ns, nic(&k));
                    taken.push((*r, r.status == ProbeStatus::Ok && slow));
                }
                w.take(batch.into_iter(), &registry, at);
            }
            now = next;
            let expired = w.advance(now);
            w.sweep(&expired, |_, f| f.ok > 0);
            let want = recount(&taken, now, &cfg);
            assert_eq!(observed(&w), want, "seed {seed} at {}", now - T0);
            // Baselines as the old tick moved them (flows without arrivals forgotten).
            baselines.retain(|k, _| want.flows.contains_key(k));
            for (k, &(_, _, min)) in &want.flows {
                let b = judge.next_baseline(baselines.get(k).copied(), min, nic(k));
                baselines.insert(*k, b);
                let i = w.flows().find(k).map(|i| w.flows().get(i).baseline);
                assert_eq!(i, Some(Some(b)), "seed {seed}");
            }
        }
    }
}

#[test]
fn forgotten_flows_free_their_index_and_lists() {
    let mut t = FlowTable::new(3, 2);
    let k = |prober, target| FlowKey {
        prober,
        target,
        sport: 1,
        dport: 2,
    };
    let a = t.intern(k(1, 2), ProbeClass::TorMesh);
    let b = t.intern(k(1, 3), ProbeClass::TorMesh);
    assert_eq!((a, b), (Some(0), Some(1)));
    assert_eq!(t.intern(k(2, 3), ProbeClass::TorMesh), None, "full");
    t.arrive(1, 0, 100, false);
    t.sweep(&[], |_, f| f.ok > 0);
    assert_eq!((t.count(), t.find(&k(1, 2))), (1, None));
    assert_eq!(t.touching(2).count(), 0);
    assert_eq!(t.between(1, 3).collect::<Vec<_>>(), [1]);
    // The freed index is reused, with an empty ring.
    assert_eq!(t.intern(k(3, 1), ProbeClass::InterTor), Some(0));
    assert_eq!(t.ring(0), [Slot::EMPTY; 3]);
    assert_eq!(t.touching(1).collect::<Vec<_>>(), [1, 0]);
    // Expiring the slot that held the least RTT finds the next least.
    t.arrive(1, 1, 300, true);
    t.arrive(1, 2, 200, false);
    t.sweep(&[0], |_, _| true);
    let f = t.get(1);
    assert_eq!((f.ok, f.slow, f.min_rtt), (2, 1, 200));
}

#[test]
fn slow_on_arrival_against_baseline_and_alarms() {
    let cfg = config();
    let registry = registry();
    let mut w = Window::new(&cfg);
    let at = |ms: i64, rtt: u32| probe_result(1, 2, T0 + ms, true, rtt);
    w.take([at(0, 20_000)].into_iter(), &registry, T0);
    let expired = w.advance(T0 + 1_000);
    w.sweep(&expired, |_, _| true);
    // Baseline 20 us: 45 us is over twice it and 1 us more; 30 us is not.
    w.take(
        [at(1_000, 45_000), at(1_100, 30_000)].into_iter(),
        &registry,
        T0 + 1_200,
    );
    let i = w
        .flows()
        .find(&key(&at(0, 0)))
        .map(|i| w.flows().get(i).slow);
    assert_eq!(i, Some(1));
    // An alarmed pair: above its threshold is slow too.
    let mut alarms = HashMap::new();
    let alarm = crate::latency::PairAlarm {
        since_ms: T0,
        reference_ns: 20_000.0,
        slow_above_ns: 25_000.0,
        window: rocemesh_anomaly::WindowFeatures {
            p25: 0.0,
            p50: 0.0,
            p75: 0.0,
            min: 0.0,
            mean: 0.0,
            std: 0.0,
            max: 0.0,
        },
        short_term: None,
        long_term: None,
    };
    alarms.insert((1, 2), alarm);
    w.judge_with(Arc::new(Verdicts::new(alarms)));
    w.take([at(1_200, 30_000)].into_iter(), &registry, T0 + 1_300);
    let i = w
        .flows()
        .find(&key(&at(0, 0)))
        .map(|i| w.flows().get(i).slow);
    assert_eq!(i, Some(2));
}

#[test]
fn timeouts_are_bounded_and_results_of_unknown_rnics_ignored() {
    let cfg = DiagnosisConfig {
        max_records: 1_000,
        ..DiagnosisConfig::default()
    };
    let mut w = Window::new(&cfg);
    let lost = (0..1_500).map(|i| probe_result(1, 2, T0 + i, false, 0));
    w.take(lost, &registry(), T0 + 2_000);
    assert_eq!(w.timeouts().count(), 1_000);
    assert_eq!(
        w.timeouts().next().map(|r| r.send_unix_ns),
        Some((T0 + 500) as u64 * 1_000_000)
    );
    let stranger = probe_result(1, 99, T0, true, 10_000);
    w.take([stranger].into_iter(), &registry(), T0 + 2_000);
    assert_eq!(w.flows().count(), 0);
    let s = w.stats();
    assert_eq!((s.timeouts, s.dropped_timeouts), (1_000, 500));
}

#[test]
fn nic_timed_rtts_are_slow_tens_of_microseconds_above_their_baseline() {
    let judge = Window::new(&DiagnosisConfig::default()).judge;
    let b = Some(10_000.0);
    // NIC timestamps: fabric queueing is the only jitter; 15 µs above the baseline is slow.
    assert!(judge.above_baseline(b, 30_000, true));
    assert!(!judge.above_baseline(b, 20_000, true));
    // Software timestamps: a busy host stack alone multiplies RTTs; only gross delays.
    assert!(!judge.above_baseline(b, 30_000, false));
    assert!(!judge.above_baseline(b, 900_000, false));
    assert!(judge.above_baseline(b, 2_000_000, false));
    // The baseline does not follow a slow window minimum either way.
    assert_eq!(judge.next_baseline(b, 40_000, true), 10_000.0);
    assert!(judge.next_baseline(b, 40_000, false) > 10_000.0);
}

#[test]
fn flows_beyond_one_page_keep_their_rings_apart() {
    // Three pages' worth: every flow's ring and totals stay its own across page edges.
    let n = 2_500u32;
    let mut t = FlowTable::new(4, 10_000);
    let k = |i: u32| FlowKey {
        prober: i % 50,
        target: 1_000 + i,
        sport: 7,
        dport: 9,
    };
    for i in 0..n {
        assert_eq!(t.intern(k(i), ProbeClass::TorMesh), Some(i));
        t.arrive(i, (i % 4) as usize, 1_000 + i, i % 3 == 0);
    }
    assert_eq!((t.count(), t.bound()), (n as usize, n as usize));
    for i in 0..n {
        let f = t.get(i);
        assert_eq!((f.key, f.ok, f.min_rtt), (k(i), 1, 1_000 + i));
        assert_eq!(t.ring(i)[(i % 4) as usize].min_rtt, 1_000 + i);
        assert_eq!(t.find(&k(i)), Some(i));
    }
    // Forget the odd flows: their indices come back, the even ones stay where they were.
    t.sweep(&[], |i, _| i % 2 == 0);
    assert_eq!(t.indices().count(), (n / 2) as usize);
    assert!(t.indices().all(|i| i % 2 == 0 && t.get(i).ok == 1));
    let again = t.intern(k(n), ProbeClass::TorMesh);
    assert!(again.is_some_and(|i| i % 2 == 1 && t.ring(i).iter().all(|s| *s == Slot::EMPTY)));
}
