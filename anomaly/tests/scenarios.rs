//! The detectors on generated RTT streams: step, creep, stable, burst
//! congestion over 10 minutes and 24 hours, the mixed suite, and bad input.

use rand::{SeedableRng, rngs::StdRng};
use rocemesh_anomaly::{
    Error, LatencyMonitor, MonitorConfig, PairKind, PairSpec, Scratch, ShortTermConfig,
    SuiteConfig, run_pair, run_suite,
    synth::{Burst, Fault},
};

fn spec(burst: Option<Burst>, fault: Option<Fault>, seed: u64) -> PairSpec {
    PairSpec {
        kind: PairKind::Stable,
        base_ns: 25_000.0,
        sigma: 0.15,
        spike_prob: 0.005,
        burst,
        fault,
        seed,
    }
}

fn burst() -> Burst {
    Burst {
        period: 4,
        length: 1,
        phase: 1,
        fraction: 0.5,
        factor: 2.5,
    }
}

fn first_alarm(spec: &PairSpec, config: &SuiteConfig) -> Option<usize> {
    run_pair(spec, config)
        .unwrap()
        .verdicts
        .iter()
        .position(|v| v.alarm)
}

#[test]
fn step_is_flagged_in_the_first_or_second_window() {
    let cfg = SuiteConfig::default();
    for (seed, factor, bursty) in [
        (1, 1.5, false),
        (2, 2.0, false),
        (3, 1.5, true),
        (4, 3.0, true),
    ] {
        let s = spec(
            bursty.then(burst),
            Some(Fault::Step { onset: 100, factor }),
            seed,
        );
        let run = run_pair(&s, &cfg).unwrap();
        let first = run.verdicts.iter().position(|v| v.alarm);
        assert!(
            matches!(first, Some(100 | 101)),
            "x{factor} bursty={bursty}: first alarm {first:?}"
        );
        let v = run.verdicts[first.unwrap()].short_term.unwrap();
        assert!(v.anomaly && v.lof > 1.5 && v.shift > 0.15, "{v:?}");
    }
}

#[test]
fn creep_of_one_percent_per_window_is_caught_by_the_long_term_test() {
    let cfg = SuiteConfig::default();
    let s = spec(
        None,
        Some(Fault::Creep {
            onset: 60,
            rate: 0.01,
        }),
        5,
    );
    let run = run_pair(&s, &cfg).unwrap();
    assert!(
        run.verdicts
            .iter()
            .all(|v| !v.short_term.is_some_and(|s| s.anomaly)),
        "the creep is too slow for the short-term test"
    );
    let long = run.verdicts[119].long_term.unwrap();
    assert!(
        long.is_anomaly(),
        "end of the first creeping long window: {long:?}"
    );
    assert_eq!(first_alarm(&s, &cfg), Some(119));
}

#[test]
fn stable_and_bursty_traffic_raise_no_alarm_in_ten_minutes() {
    // 10 minutes = 20 windows of 30 s after the 5-minute warm-up; 60 pairs.
    let cfg = SuiteConfig {
        windows: 30,
        windows_per_long: 10,
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(10);
    for kind in [PairKind::Stable, PairKind::Bursty] {
        for _ in 0..30 {
            let s = PairSpec::random(kind, 30, 10, &mut rng);
            assert_eq!(first_alarm(&s, &cfg), None, "{s:?}");
        }
    }
}

#[test]
fn a_day_of_stable_or_bursty_traffic_raises_no_alarm() {
    // 24 h = 2,880 windows of 30 s and 48 long windows of 30 min.
    let cfg = SuiteConfig {
        windows: 2_880,
        ..Default::default()
    };
    for (seed, b) in [
        (20, None),
        (21, Some(burst())),
        (
            22,
            Some(Burst {
                period: 10,
                length: 2,
                phase: 3,
                fraction: 0.7,
                factor: 2.0,
            }),
        ),
    ] {
        let s = spec(b, None, seed);
        let run = run_pair(&s, &cfg).unwrap();
        let alarms: Vec<usize> = (0..cfg.windows)
            .filter(|&w| run.verdicts[w].alarm)
            .collect();
        assert!(alarms.is_empty(), "{b:?}: alarms at {alarms:?}");
        let tested = run
            .verdicts
            .iter()
            .filter(|v| v.long_term.is_some())
            .count();
        assert_eq!(tested, 48);
    }
}

#[test]
fn mixed_suite_reaches_precision_and_recall_of_0_95() {
    let report = run_suite(&SuiteConfig::default()).unwrap();
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let o = report.overall;
    assert_eq!(o.events, 3 * 60);
    assert!(o.precision() >= 0.95, "precision {} ({o:?})", o.precision());
    assert!(o.recall() >= 0.95, "recall {} ({o:?})", o.recall());
    for (kind, s) in &report.per_kind {
        if matches!(kind, PairKind::Stable | PairKind::Bursty) {
            assert!(s.false_alarms <= 2, "{kind:?}: {s:?}");
        }
    }
}

#[test]
fn bad_input_is_an_error_never_a_panic() {
    let mut m = LatencyMonitor::new(&MonitorConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    assert_eq!(
        m.observe_window(&[], &mut scratch).unwrap_err(),
        Error::EmptyWindow { rejected: 0 }
    );
    let junk = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -5.0, 0.0];
    assert_eq!(
        m.observe_window(&junk, &mut scratch).unwrap_err(),
        Error::EmptyWindow { rejected: 5 }
    );
    let report = m
        .observe_window(&[f64::NAN, 20_000.0, -1.0, 21_000.0], &mut scratch)
        .unwrap();
    assert_eq!((report.tally.accepted, report.tally.rejected), (2, 2));
    assert_eq!(report.short_term, None, "warming up");
    assert_eq!(
        (m.open_long_window().count, m.open_long_window().rejected),
        (2, 7)
    );
    assert_eq!(
        m.close_long_window(),
        Err(Error::TooFewSamples { have: 2, need: 30 })
    );

    let k_too_large = MonitorConfig {
        short_term: ShortTermConfig {
            k: 12,
            ..Default::default()
        },
        ..Default::default()
    };
    assert!(
        matches!(LatencyMonitor::new(&k_too_large), Err(Error::InvalidConfig(m)) if m.contains("k + 1"))
    );
}

#[test]
fn lof_quantiles_on_stable_traffic_justify_the_threshold() {
    let cfg = SuiteConfig {
        windows: 400,
        windows_per_long: 40,
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(30);
    let mut lofs: Vec<f64> = (0..20)
        .flat_map(|_| {
            let s = PairSpec::random(PairKind::Stable, 400, 40, &mut rng);
            run_pair(&s, &cfg)
                .unwrap()
                .verdicts
                .into_iter()
                .filter_map(|v| v.short_term.map(|s| s.lof))
        })
        .collect();
    lofs.sort_by(f64::total_cmp);
    let q = |p: f64| lofs[((lofs.len() - 1) as f64 * p) as usize];
    println!(
        "stable LOF over {} windows: p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2}",
        lofs.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999)
    );
    assert!(
        (0.9..1.2).contains(&q(0.5)),
        "inlier LOF is about 1: {}",
        q(0.5)
    );
    let above = lofs.iter().filter(|&&l| l > 1.5).count() as f64 / lofs.len() as f64;
    assert!(above < 0.1, "{above} of stable windows have LOF > 1.5");
}
