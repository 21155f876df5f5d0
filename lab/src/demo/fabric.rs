//! The root demo: a namespace fabric, a server, one agent per host; after a baseline a
//! fault is injected and the problem rocemesh finds (what and where) is printed.

use super::DemoArgs;
use crate::lab::{Lab, LabTiming};
use anyhow::{Context, Result};
use rocemesh_proto::api::{Problem, SlaRow};
use rocemesh_proto::now_unix_ms;
use rocemesh_testbed::Fault;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn print_new_problems(
    lab: &Lab,
    seen: &mut HashSet<(i64, bool)>,
    onset: Option<i64>,
) -> Result<()> {
    let problems: Vec<Problem> = lab.problems()?;
    for p in problems {
        let resolved = p.resolved_ms.is_some();
        if !seen.insert((p.id, resolved)) {
            continue;
        }
        let after = onset.map_or(String::new(), |o| {
            format!(
                " {:.1} s after the fault",
                (p.first_seen_ms - o) as f64 / 1000.0
            )
        });
        if resolved {
            println!(
                "resolved: {:?} {} {}",
                p.kind,
                p.component_kind.as_str(),
                p.component
            );
        } else {
            println!(
                "FOUND{after}: {:?} on {} {} (confidence {:.2}, network at fault: {}) — {}",
                p.kind,
                p.component_kind.as_str(),
                p.component,
                p.confidence,
                p.network,
                p.evidence.detail
            );
        }
    }
    Ok(())
}

fn print_sla(lab: &Lab) {
    if let Ok(rows) = lab.get::<Vec<SlaRow>>("/api/v1/sla/latest?scope=cluster")
        && let Some(c) = rows.first()
    {
        println!(
            "SLA last period: {} probes, {:.2} % timeouts, network RTT p50 {} µs p99 {} µs",
            c.probes,
            c.timeout_rate * 100.0,
            super::table::us(c.network_rtt_ns.p50),
            super::table::us(c.network_rtt_ns.p99)
        );
    }
}

/// Runs the fabric demo.
pub(super) fn run(args: DemoArgs) -> Result<()> {
    let fault: Fault = serde_json::from_str(&args.fault)
        .context("--fault is not a valid fault (JSON, see `rocemesh-lab testbed fault --help`)")?;
    let spec = crate::eval::lab_spec("rmdemo");
    println!(
        "rocemesh-lab demo: building a {}-ToR x {}-spine fabric with {} hosts in network namespaces ...",
        spec.tors,
        spec.spines,
        spec.host_count()
    );
    let lab = Lab::up(spec, &LabTiming::default())?;
    lab.wait_ready(Duration::from_secs(30))?;
    println!(
        "server {} (try {}/api/v1/problems), agents registered; baseline for {} s",
        lab.url, lab.url, args.baseline_secs
    );
    let started = Instant::now();
    let mut seen = HashSet::new();
    let mut onset = None;
    let mut last_sla = Instant::now();
    loop {
        if lab.sleep_or_interrupt(Duration::from_millis(500)) {
            break;
        }
        if onset.is_none() && started.elapsed() >= Duration::from_secs(args.baseline_secs) {
            let handle = lab.fabric.apply(&fault)?;
            onset = Some(now_unix_ms());
            let truth = match &handle.truth {
                Some(t) => format!("{:?} {}", t.kind, t.name),
                None => "a process outside the fabric".into(),
            };
            println!(">>> injected {} (ground truth: {truth})", args.fault);
        }
        print_new_problems(&lab, &mut seen, onset)?;
        if last_sla.elapsed() >= Duration::from_secs(5) {
            last_sla = Instant::now();
            print_sla(&lab);
        }
        if args.duration_secs > 0 && started.elapsed() >= Duration::from_secs(args.duration_secs) {
            break;
        }
    }
    println!("tearing the fabric down");
    drop(lab);
    Ok(())
}
