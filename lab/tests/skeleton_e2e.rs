//! Training-task skeleton inference end to end (issue #5): an emulated TP=2 PP=2 DP=4 job on
//! a rail-optimized namespace fabric (4 hosts × 4 RNICs, 4 rail ToRs) sends real UDP
//! traffic; the real agents sample their interfaces' counters every 250 ms and upload
//! them; the controller infers the task's groups. Runs `rocemesh-lab eval --suite skeleton
//! --scenario testbed` (the lab runs agents and helpers through the binary) and checks
//! what it read back over the REST API against the job's ground truth. Root only.

mod support;

use serde_json::Value;
use std::collections::BTreeSet;

fn groups(v: &Value) -> BTreeSet<BTreeSet<u64>> {
    v.as_array()
        .unwrap_or_else(|| panic!("groups: {v}"))
        .iter()
        .map(|g| {
            g.as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap())
                .collect()
        })
        .collect()
}

fn pairs(v: &Value) -> BTreeSet<(u64, u64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("pairs: {v}"))
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap()))
        .collect()
}

#[test]
fn emulated_job_groups_are_inferred_exactly_from_measured_counters() {
    if !support::is_root() {
        eprintln!("skipping skeleton_e2e: needs root (network namespaces)");
        return;
    }
    let report = support::eval_report(
        "skeleton-e2e",
        support::bin().args([
            "eval",
            "--suite",
            "skeleton",
            "--scenario",
            "testbed",
            "--json",
            "--prefix",
            "rmsk",
        ]),
    );
    let case = &report["cases"][0];
    assert_eq!(case["name"], "testbed");
    let run = &case["testbed"];
    assert_eq!(run["rnics"], 16);

    // No job traffic, only probes: the controller ran the inference and kept the basic list.
    let idle = &run["idle"];
    assert_eq!(idle["phase"], "basic_fallback", "idle task: {idle}");
    assert!(
        idle["skeleton"]["fallback_reason"].is_string(),
        "a fallback says why: {idle}"
    );

    // Under the job: a skeleton with exactly the true groups, and no other was ever accepted.
    let truth = groups(&run["truth_groups"]);
    assert_eq!(truth.len(), 4, "TP×PP = 4 positions");
    assert!(truth.iter().all(|g| g.len() == 4), "DP = 4");
    let last = &run["last"];
    assert_eq!(last["phase"], "skeleton", "final task: {last}");
    assert_eq!(groups(&last["skeleton"]["groups"]), truth);
    assert_eq!(last["skeleton"]["dp"], 4);
    assert_eq!(last["skeleton"]["tp_pp"], 4);
    for s in run["skeletons_seen"].as_array().unwrap() {
        assert_eq!(
            groups(&s["groups"]),
            truth,
            "a wrong skeleton was accepted: {s}"
        );
    }
    assert!(run["time_to_skeleton_s"].as_f64().is_some());

    // The pinglist: every task-service pair the agents are told to probe is a skeleton pair,
    // and every pair the job talks on (plus all DP peers) is probed.
    let probed = pairs(&run["pinglist_pairs"]);
    let talking = pairs(&run["truth_pairs"]);
    assert_eq!(probed, talking);
    assert_eq!(last["active_pairs"].as_u64(), Some(probed.len() as u64));
    assert_eq!(
        last["skeleton"]["pairs"].as_u64(),
        Some(probed.len() as u64)
    );
    assert_eq!(last["full_mesh_pairs"], 120);
    assert_eq!(case["grouping_accuracy"], 1.0);
    assert_eq!(case["correct"], true);
}
