//! Self-fault: an agent crashes (SIGKILL) and restarts (issue 8 item 3), root only: on a
//! namespace lab with real agents, the analyzer recognizes the QPN reset as an agent
//! restart (kind `agent_restart`, component kind `agent`) and raises no network alarm.

mod support;

use rocemesh_analyzer::IngestStats;
use rocemesh_lab::lab::{Lab, LabTiming};
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind};
use std::time::{Duration, Instant};
use support::self_fault::assert_no_false_alarm;

const PREFIX: &str = "rmsf4";
const HOST: &str = "h3";

/// The epoch the analyzer last saw from `host_id`.
fn epoch_of(lab: &Lab, host_id: u32) -> Option<u32> {
    let stats: IngestStats = lab.get("/api/v1/ingest/stats").ok()?;
    stats
        .hosts
        .iter()
        .find(|h| h.host_id == host_id)
        .map(|h| h.epoch)
}

#[test]
fn agent_crash_is_an_agent_restart_not_a_network_fault() {
    if !support::is_root() {
        println!("skipping self_fault_agent: needs root (network namespaces)");
        return;
    }
    let mut lab =
        Lab::up(rocemesh_lab::eval::lab_spec(PREFIX), &LabTiming::default()).expect("lab up");
    lab.wait_ready(Duration::from_secs(60))
        .expect("agents ready");
    std::thread::sleep(Duration::from_secs(5)); // baseline
    assert_no_false_alarm(&lab.url, "before the crash");
    let host_id = lab
        .get::<Vec<rocemesh_proto::api::HostInfo>>("/api/v1/hosts")
        .expect("hosts")
        .into_iter()
        .find(|h| h.host == HOST)
        .expect("h3 registered")
        .id;
    let epoch_before = epoch_of(&lab, host_id).expect("h3 uploads");

    let crash = Instant::now();
    lab.kill_agent(HOST);
    lab.start_agent(HOST).expect("restart the agent");
    let restart: Problem =
        support::wait_for("the agent restart problem", Duration::from_secs(30), || {
            lab.problems()
                .unwrap_or_default()
                .into_iter()
                .find(|p| p.kind == ProblemKind::AgentRestart && p.component == HOST)
        });
    let recognized = crash.elapsed();
    assert_eq!(restart.component_kind, ComponentKind::Agent);
    assert!(!restart.network, "{restart:#?}");
    let epoch_after =
        support::wait_for("uploads of the new agent", Duration::from_secs(10), || {
            epoch_of(&lab, host_id).filter(|&e| e != epoch_before)
        });
    // Long enough for the diagnosis window to have judged the probes towards the dead QPN.
    std::thread::sleep(Duration::from_secs(10));
    assert_no_false_alarm(&lab.url, "after the agent crash");
    let others: Vec<Problem> = lab
        .problems()
        .expect("problems")
        .into_iter()
        .filter(|p| p.component != HOST)
        .collect();
    assert!(others.is_empty(), "a problem blamed elsewhere: {others:#?}");
    eprintln!(
        "self_fault_agent: restart recognized {:.1} s after the crash (epoch {epoch_before} -> {epoch_after}): {}",
        recognized.as_secs_f64(),
        restart.evidence.detail
    );
}
