//! Latency anomaly detection end to end on a namespace fabric with real agents
//! (root only): time-compressed SkeletonHunter windows (1 s short, 10 s look-back,
//! 10 s long), the factor rule switched off so the per-pair detectors alone judge.
//! (c) stable traffic (with a constant 8 ms delay on h3r0's cable) raises no
//! HighLatency; (b) raising that delay 1 ms at a time (+12.5 % RTT per step, below
//! the short-term gate) is caught by the long-term z-test on h3/r0; (a) a 1 ms step on
//! h0r0's cable is caught by short-term LOF on h0/r0 and resolves after clearing.

mod support;

use rocemesh_lab::lab::{Lab, LabTiming};
use rocemesh_proto::api::{Problem, ProblemKind, ProblemState};
use rocemesh_testbed::{Direction, Fault};
use std::time::{Duration, Instant};

fn delay(link: &str, ms: u32) -> Fault {
    Fault::Delay {
        link: link.into(),
        direction: Direction::Both,
        ms,
    }
}

fn high_latency(lab: &Lab) -> Vec<Problem> {
    lab.problems()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.kind == ProblemKind::HighLatency)
        .collect()
}

/// Polls until `want` returns a problem or `timeout` passes.
fn wait_for(lab: &Lab, timeout: Duration, want: impl Fn(&Problem) -> bool) -> Option<Problem> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(p) = high_latency(lab).into_iter().find(|p| want(p)) {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

#[test]
fn latency_step_and_creep_are_found_and_stable_traffic_is_quiet() {
    if !support::is_root() {
        eprintln!("skipping latency_e2e: needs root (network namespaces)");
        return;
    }
    let spec = rocemesh_lab::eval::lab_spec("rmlat");
    let lab = Lab::up_with(spec, &LabTiming::default(), |cfg| {
        let l = &mut cfg.analyzer.latency;
        l.short_window_ms = 1_000;
        l.lookback_ms = 10_000;
        l.long_window_ms = 10_000;
        l.close_after_ms = 2_000;
        cfg.analyzer.diagnosis.latency_factor = 1_000_000;
    })
    .expect("lab up");
    let base = lab.fabric.apply(&delay("h3r0-t1", 8)).expect("base delay");
    lab.wait_ready(Duration::from_secs(30))
        .expect("agents ready");

    // (c) stable: a baseline long window, then another one tested.
    std::thread::sleep(Duration::from_secs(28));
    let noise = high_latency(&lab);
    assert!(noise.is_empty(), "stable traffic raised {noise:#?}");

    // (b) creep: 8 -> 11 ms one way, a step every 3 s.
    let started = Instant::now();
    let mut current = base;
    for ms in 9..=11 {
        let next = lab.fabric.apply(&delay("h3r0-t1", ms)).expect("creep step");
        lab.fabric.clear(current.id).expect("clear previous step");
        current = next;
        std::thread::sleep(Duration::from_secs(3));
    }
    let creep = wait_for(&lab, Duration::from_secs(30), |p| p.component == "h3/r0")
        .unwrap_or_else(|| panic!("creep not found: {:#?}", high_latency(&lab)));
    eprintln!(
        "creep found {:.1} s after it began: {}",
        started.elapsed().as_secs_f64(),
        creep.evidence.detail
    );
    assert!(
        creep
            .evidence
            .latency_pairs
            .iter()
            .any(|p| p.detector.contains("long_term_ztest")),
        "{creep:#?}"
    );
    lab.fabric.clear(current.id).expect("clear creep");

    // (a) step on another cable.
    let started = Instant::now();
    let step = lab.fabric.apply(&delay("h0r0-t0", 1)).expect("step");
    let found = wait_for(&lab, Duration::from_secs(20), |p| {
        p.component == "h0/r0" && p.state == ProblemState::Active
    })
    .unwrap_or_else(|| panic!("step not found: {:#?}", high_latency(&lab)));
    let took = started.elapsed().as_secs_f64();
    eprintln!("step found in {took:.1} s: {}", found.evidence.detail);
    assert!(
        found
            .evidence
            .latency_pairs
            .iter()
            .any(|p| p.detector.contains("short_term_lof")),
        "{found:#?}"
    );
    let wrong: Vec<_> = high_latency(&lab)
        .into_iter()
        .filter(|p| p.component != "h0/r0" && p.component != "h3/r0")
        .collect();
    assert!(wrong.is_empty(), "blamed elsewhere: {wrong:#?}");
    lab.fabric.clear(step.id).expect("clear step");
    let cleared = Instant::now();
    let deadline = cleared + Duration::from_secs(20);
    while high_latency(&lab)
        .iter()
        .any(|p| p.component == "h0/r0" && p.state == ProblemState::Active)
    {
        assert!(
            Instant::now() < deadline,
            "step not resolved after clearing"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "step resolved {:.1} s after clearing",
        cleared.elapsed().as_secs_f64()
    );
}
