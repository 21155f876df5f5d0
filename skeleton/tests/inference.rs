//! End-to-end inference on synthetic jobs: grouping accuracy, stage order,
//! skeleton coverage and size, fallback on structureless traffic.

use std::collections::HashSet;

use rocemesh_skeleton::{
    FallbackReason, InferenceConfig, Outcome, Pair, SyntheticJob, SyntheticTrace, basic_pairs,
    grouping_accuracy, infer, synth,
};

/// Truth position (TP rank, stage) of an RNIC of a synthetic job.
fn position(job: &SyntheticJob, id: u32) -> (usize, usize) {
    let rank = (id - job.first_id) as usize;
    (rank % job.tp, (rank / job.tp) % job.pp)
}

fn covers(skeleton: &[Pair], trace: &SyntheticTrace) -> Vec<Pair> {
    let set: HashSet<&Pair> = skeleton.iter().collect();
    trace
        .talking_pairs
        .iter()
        .filter(|p| !set.contains(p))
        .copied()
        .collect()
}

/// Runs inference and checks everything a correct structure implies:
/// groups, degrees, stage order, coverage of the pairs that really talk.
fn check_recovers(job: &SyntheticJob) -> (f64, usize, usize) {
    let trace = job.generate().expect("valid job");
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    let Outcome::Skeleton { structure, pairs } = &inference.outcome else {
        panic!("fell back: {:?}", inference.outcome);
    };
    let accuracy = grouping_accuracy(&trace.groups, &structure.groups);
    assert_eq!(
        (structure.dp, structure.tp, structure.pp),
        (job.dp, job.tp, job.pp)
    );
    for (group, stage) in structure.groups.iter().zip(&structure.stage_of_group) {
        let true_stage = position(job, group[0]).1;
        assert_eq!(*stage, true_stage, "group {group:?}");
    }
    let missing = covers(pairs, &trace);
    assert!(
        missing.is_empty(),
        "skeleton misses talking pairs {missing:?}"
    );
    (accuracy, inference.basic.len(), pairs.len())
}

#[test]
fn fig8_job_groups_stages_and_reduction() {
    let job = SyntheticJob::fig8();
    let (accuracy, basic, skeleton) = check_recovers(&job);
    let full = 512 * 511 / 2;
    println!(
        "fig8 512 RNICs: accuracy {:.1} %, full mesh {full}, basic {basic} ({:.2}x), skeleton {skeleton} ({:.2} % smaller)",
        accuracy * 100.0,
        full as f64 / basic as f64,
        (1.0 - skeleton as f64 / full as f64) * 100.0
    );
    assert!(accuracy >= 0.95, "accuracy {accuracy}");
    assert!(full as f64 / basic as f64 >= 8.0);
    assert!(skeleton as f64 <= 0.05 * full as f64);
}

#[test]
fn fig8_job_survives_other_seeds_and_more_noise() {
    for seed in [7, 8] {
        let job = SyntheticJob {
            seed,
            noise: 0.1,
            iteration_jitter_s: 0.3,
            ..SyntheticJob::fig8()
        };
        let (accuracy, _, _) = check_recovers(&job);
        assert!(accuracy >= 0.95, "seed {seed}: accuracy {accuracy}");
    }
}

#[test]
fn small_job_is_recovered_exactly() {
    // 16 RNICs on 4-RNIC hosts: each host is one replica (TP x PP = 4).
    let job = SyntheticJob {
        rnics_per_host: 4,
        ..SyntheticJob::new(2, 2, 4)
    };
    let (accuracy, _, _) = check_recovers(&job);
    assert_eq!(accuracy, 1.0);
}

#[test]
fn replica_spanning_hosts_with_cross_rail_pipeline_is_covered() {
    // TP=4 on 8-RNIC hosts: stages 0-1 share a host, 1 -> 2 crosses hosts
    // and rails (relayed on the receiver's rail).
    let job = SyntheticJob::new(4, 4, 4);
    let (accuracy, _, _) = check_recovers(&job);
    assert_eq!(accuracy, 1.0);
}

#[test]
fn structureless_traffic_falls_back_to_the_basic_list() {
    let observations = synth::unstructured(16, 8, 240, 5);
    let inference = infer(&observations, &InferenceConfig::default()).expect("valid input");
    let Outcome::Fallback { reason } = &inference.outcome else {
        panic!(
            "accepted a skeleton for random traffic: {:?}",
            inference.structure()
        );
    };
    assert!(
        matches!(reason, FallbackReason::WeakPeriodicity { .. }),
        "{reason}"
    );
    let endpoints: Vec<_> = observations.iter().map(|o| o.endpoint).collect();
    assert_eq!(
        inference.pinglist(),
        basic_pairs(&endpoints).expect("endpoints").as_slice()
    );
}

#[test]
fn periodic_traffic_without_replicas_falls_back() {
    // DP = 1: every position is unique, nothing to group.
    let trace = SyntheticJob::new(8, 8, 1).generate().expect("valid job");
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    assert!(
        matches!(inference.outcome, Outcome::Fallback { .. }),
        "{:?}",
        inference.structure()
    );
    assert_eq!(inference.pinglist(), inference.basic.as_slice());
}

#[test]
fn periodic_bursts_at_unrelated_phases_fall_back() {
    // Every RNIC bursts every 10 s, each at its own offset: periodic, but no
    // two RNICs share a position.
    let mut trace = SyntheticJob::fig8().generate().expect("valid job");
    for (k, o) in trace.observations.iter_mut().enumerate() {
        let shift = (k * 37) % 10;
        o.bytes.rotate_left(shift);
    }
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    assert!(
        matches!(inference.outcome, Outcome::Fallback { .. }),
        "{:?}",
        inference.structure()
    );
}

#[test]
fn generator_is_deterministic_by_seed() {
    let job = SyntheticJob {
        samples: 64,
        ..SyntheticJob::new(8, 2, 2)
    };
    let a = job.generate().expect("valid job");
    let b = job.generate().expect("valid job");
    assert_eq!(a, b);
    let c = SyntheticJob { seed: 2, ..job }
        .generate()
        .expect("valid job");
    assert_ne!(a.observations, c.observations);
    assert_eq!(a.groups, c.groups);
}

#[test]
fn tensor_parallel_across_hosts_merges_groups_but_still_covers_the_traffic() {
    // TP=16 on 8-RNIC hosts: TP ranks t and t+8 sit on the same rail of the
    // stage's two hosts and burst identically, so traffic cannot split them;
    // their groups merge (DP reads 2x) and the skeleton stays a superset.
    let job = SyntheticJob::new(16, 4, 4);
    let trace = job.generate().expect("valid job");
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    let Outcome::Skeleton { structure, pairs } = &inference.outcome else {
        panic!("fell back: {:?}", inference.outcome);
    };
    assert_eq!((structure.dp, structure.pp), (8, 4));
    for group in &structure.groups {
        let tp_ranks: HashSet<usize> = group.iter().map(|&id| position(&job, id).0 % 8).collect();
        let stages: HashSet<usize> = group.iter().map(|&id| position(&job, id).1).collect();
        assert_eq!(
            (tp_ranks.len(), stages.len()),
            (1, 1),
            "group {group:?} mixes positions"
        );
    }
    assert!(covers(pairs, &trace).is_empty());
    assert!(pairs.len() < inference.basic.len());
}

#[test]
fn pure_data_parallel_job_is_one_group_per_rail() {
    // PP=1: every host is a replica, every same-rail pair all-reduces, so
    // the skeleton is the whole basic list.
    let job = SyntheticJob::new(8, 1, 16);
    let (accuracy, basic, skeleton) = check_recovers(&job);
    assert_eq!(accuracy, 1.0);
    assert_eq!(skeleton, basic);
}

#[test]
fn outcome_serializes_for_the_rest_api() {
    let observations = synth::unstructured(4, 8, 128, 1);
    let inference = infer(&observations, &InferenceConfig::default()).expect("valid input");
    let json = serde_json::to_value(&inference.outcome).expect("serializable");
    assert_eq!(json["kind"], "fallback");
    assert_eq!(json["reason"]["reason"], "weak_periodicity");
    let trace = SyntheticJob {
        samples: 128,
        ..SyntheticJob::new(8, 2, 4)
    }
    .generate()
    .expect("valid job");
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    let json = serde_json::to_value(&inference).expect("serializable");
    assert_eq!(json["outcome"]["kind"], "skeleton", "{json}");
    assert_eq!(json["outcome"]["structure"]["dp"], 4);
}

#[test]
fn iteration_periods_from_5_to_60_samples_are_recovered() {
    // The default 64-sample window: short periods give many iterations per
    // frame, periods near the window fall below one STFT bin but keep their
    // burst phase.
    for period_s in [5.0, 20.0, 60.0] {
        let job = SyntheticJob {
            period_s,
            pipeline_offset_s: period_s * 0.04,
            samples: 600,
            ..SyntheticJob::new(8, 4, 4)
        };
        let (accuracy, _, _) = check_recovers(&job);
        assert_eq!(accuracy, 1.0, "period {period_s} s");
    }
}

#[test]
fn mixed_hosts_are_grouped_rail_by_rail() {
    // Rail 7 moved onto hosts of its own: hosts no longer share one rail
    // set, so the per-rail clustering runs instead of the host clustering.
    let job = SyntheticJob::fig8();
    let mut trace = job.generate().expect("valid job");
    for o in trace
        .observations
        .iter_mut()
        .filter(|o| o.endpoint.rail == 7)
    {
        o.endpoint.host += 1000;
    }
    let inference = infer(&trace.observations, &InferenceConfig::default()).expect("valid input");
    let structure = inference.structure().expect("skeleton accepted");
    assert_eq!(grouping_accuracy(&trace.groups, &structure.groups), 1.0);
    assert_eq!((structure.dp, structure.tp, structure.pp), (8, 8, 8));
}

#[test]
fn testbed_shaped_job_is_recovered_on_a_short_window() {
    // The root e2e run's shape (lab/src/lab/skeleton_job.rs): 250 ms samples, 2 s
    // iterations, stage 1 one sample after stage 0, bursts shorter than a sample, 24 s of
    // samples, 16 s STFT window (4 iterations in 32 samples leave the comb too wide).
    let job = SyntheticJob {
        rnics_per_host: 4,
        samples: 96,
        interval_s: 0.25,
        period_s: 2.0,
        pipeline_offset_s: 0.25,
        burst_s: 0.11,
        iteration_jitter_s: 0.0,
        transfer_jitter_s: 0.04,
        ..SyntheticJob::new(2, 2, 4)
    };
    let trace = job.generate().unwrap();
    let mut cfg = InferenceConfig::default();
    cfg.features.window = 64;
    let inference = infer(&trace.observations, &cfg).unwrap();
    let Outcome::Skeleton { structure, .. } = &inference.outcome else {
        panic!("fell back: {:?}", inference.outcome);
    };
    assert_eq!(grouping_accuracy(&trace.groups, &structure.groups), 1.0);
    assert_eq!((structure.dp, structure.tp, structure.pp), (4, 2, 2));
}
