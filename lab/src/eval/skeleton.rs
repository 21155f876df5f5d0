//! `rocemesh-lab eval --suite skeleton`: traffic-skeleton inference on synthetic jobs with
//! known parallel groups (SkeletonHunter Fig. 8 shape and others), scored against the
//! generator's ground truth; pinglist reduction against the full mesh. The `testbed` case
//! (root) runs an emulated job on a namespace fabric instead, so the groups come from
//! counters the real agents measured and the controller's own inference
//! ([`crate::lab::skeleton_job`]).

use super::EvalArgs;
use crate::lab::skeleton_job::{self, SkeletonRun};
use anyhow::{Result, bail};
use rocemesh_proto::api::TaskPhase;
use rocemesh_skeleton::{InferenceConfig, Outcome, SyntheticJob, grouping_accuracy, infer};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Instant;

/// Name of the case run on the namespace fabric.
const TESTBED: &str = "testbed";
/// Name of the case without any training structure.
const UNSTRUCTURED: &str = "unstructured_64";

/// One inference case.
#[derive(Debug, Serialize)]
pub(super) struct Case {
    /// Case name.
    pub name: String,
    /// RNICs in the job.
    pub rnics: usize,
    /// True (TP, PP, DP); `None` for unstructured traffic.
    pub truth: Option<[usize; 3]>,
    /// Inferred (TP, PP, DP); `None` when the fidelity check fell back.
    pub inferred: Option<[usize; 3]>,
    /// Share of true DP groups recovered exactly.
    pub grouping_accuracy: Option<f64>,
    /// Why the basic list was kept, if it was.
    pub fallback: Option<String>,
    /// Right outcome: exact groups for a job, a fallback for unstructured traffic.
    pub correct: bool,
    /// Every pair that really carries traffic is in the pinglist.
    pub talking_pairs_covered: bool,
    /// Full-mesh pairs.
    pub full_mesh_pairs: usize,
    /// Same-rail (basic) pairs.
    pub basic_pairs: usize,
    /// Pairs of the pinglist in force (skeleton or basic).
    pub pinglist_pairs: usize,
    /// Full mesh / basic.
    pub basic_reduction_x: f64,
    /// 1 − pinglist / full mesh, in percent.
    pub pinglist_reduction_pct: f64,
    /// Inference time, ms (0 for the testbed case: the controller infers, see
    /// `testbed.time_to_skeleton_s`).
    pub infer_ms: f64,
    /// Why the case did not run (the testbed case needs root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What the testbed run measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub testbed: Option<SkeletonRun>,
}

/// Summary of the suite.
#[derive(Debug, Serialize)]
pub(super) struct Summary {
    /// Cases with the right outcome / cases run.
    pub correct: String,
    /// Cases not run, with the reason.
    pub skipped: Vec<String>,
    /// Mean grouping accuracy over the structured jobs.
    pub mean_grouping_accuracy: f64,
    /// Basic-list reduction of the Fig. 8 job, 8 RNICs per host (target ≥ 8×).
    pub fig8_basic_reduction_x: Option<f64>,
    /// Smallest skeleton reduction over accepted skeletons (target ≥ 95 % for Fig. 8).
    pub fig8_skeleton_reduction_pct: Option<f64>,
}

/// The suite's report.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    /// Cases.
    pub cases: Vec<Case>,
    /// Summary.
    pub summary: Summary,
}

fn jobs() -> Vec<(&'static str, SyntheticJob)> {
    let small = SyntheticJob {
        rnics_per_host: 4,
        ..SyntheticJob::new(2, 2, 4)
    };
    let noisy = SyntheticJob {
        noise: 0.10,
        seed: 7,
        ..SyntheticJob::fig8()
    };
    let jittery = SyntheticJob {
        iteration_jitter_s: 0.4,
        transfer_jitter_s: 0.2,
        seed: 11,
        ..SyntheticJob::fig8()
    };
    vec![
        ("tp2_pp2_dp4_16", small),
        ("fig8_tp8_pp8_dp8_512", SyntheticJob::fig8()),
        ("fig8_512_noise_2x", noisy),
        ("fig8_512_jitter_2x", jittery),
        ("tp8_pp8_dp32_2048", SyntheticJob::new(8, 8, 32)),
    ]
}

fn run_case(name: &str, job: Option<&SyntheticJob>, cfg: &InferenceConfig) -> Result<Case> {
    let (observations, truth_groups, talking) = match job {
        Some(j) => {
            let t = j.generate()?;
            (t.observations, Some(t.groups), t.talking_pairs)
        }
        None => (
            rocemesh_skeleton::synth::unstructured(16, 4, 240, 3),
            None,
            Vec::new(),
        ),
    };
    let started = Instant::now();
    let inference = infer(&observations, cfg)?;
    let infer_ms = started.elapsed().as_secs_f64() * 1000.0;
    let pinglist = inference.pinglist();
    let (inferred, accuracy, fallback) = match (&inference.outcome, &truth_groups) {
        (Outcome::Skeleton { structure, .. }, Some(truth)) => (
            Some([structure.tp, structure.pp, structure.dp]),
            Some(grouping_accuracy(truth, &structure.groups)),
            None,
        ),
        (Outcome::Skeleton { structure, .. }, None) => {
            (Some([structure.tp, structure.pp, structure.dp]), None, None)
        }
        (Outcome::Fallback { reason }, _) => (
            None,
            truth_groups.as_ref().map(|_| 0.0),
            Some(reason.to_string()),
        ),
    };
    let correct = match job {
        Some(_) => accuracy == Some(1.0),
        None => fallback.is_some(),
    };
    let covered = talking.iter().all(|p| pinglist.contains(p));
    let full = inference.full_mesh_len;
    Ok(Case {
        name: name.to_string(),
        rnics: observations.len(),
        truth: job.map(|j| [j.tp, j.pp, j.dp]),
        inferred,
        grouping_accuracy: accuracy,
        fallback,
        correct,
        talking_pairs_covered: covered,
        full_mesh_pairs: full,
        basic_pairs: inference.basic.len(),
        pinglist_pairs: pinglist.len(),
        basic_reduction_x: full as f64 / inference.basic.len().max(1) as f64,
        pinglist_reduction_pct: reduction_pct(pinglist.len(), full),
        infer_ms,
        skipped: None,
        testbed: None,
    })
}

fn reduction_pct(pairs: usize, full: usize) -> f64 {
    100.0 * (1.0 - pairs as f64 / full.max(1) as f64)
}

/// The testbed case: right when the idle task kept the basic list, the skeleton accepted
/// under job traffic has exactly the true groups, and its pinglist holds every pair the
/// job talks on.
fn testbed_case(prefix: &str) -> Result<Case> {
    let job = skeleton_job::job_spec();
    let truth = Some([job.tp as usize, job.pp as usize, job.dp as usize]);
    let mut case = Case {
        name: TESTBED.to_string(),
        rnics: job.gpus() as usize,
        truth,
        inferred: None,
        grouping_accuracy: None,
        fallback: None,
        correct: false,
        talking_pairs_covered: false,
        full_mesh_pairs: 0,
        basic_pairs: 0,
        pinglist_pairs: 0,
        basic_reduction_x: 0.0,
        pinglist_reduction_pct: 0.0,
        infer_ms: 0.0,
        skipped: None,
        testbed: None,
    };
    if let Err(e) = crate::lab::require_root("the testbed case") {
        case.skipped = Some(e.to_string());
        return Ok(case);
    }
    let run = skeleton_job::run(prefix)?;
    let last = &run.last;
    let pinglist: BTreeSet<_> = run.pinglist_pairs.iter().collect();
    case.talking_pairs_covered = run.truth_pairs.iter().all(|p| pinglist.contains(p));
    case.grouping_accuracy = Some(run.grouping_accuracy());
    case.fallback = last
        .skeleton
        .as_ref()
        .and_then(|s| s.fallback_reason.clone());
    case.correct = run.groups_exact()
        && run.idle.phase == TaskPhase::BasicFallback
        && case.talking_pairs_covered;
    case.full_mesh_pairs = last.full_mesh_pairs;
    case.basic_pairs = last.basic_pairs;
    case.pinglist_pairs = last.active_pairs;
    case.basic_reduction_x = last.full_mesh_pairs as f64 / last.basic_pairs.max(1) as f64;
    case.pinglist_reduction_pct = reduction_pct(last.active_pairs, last.full_mesh_pairs);
    case.testbed = Some(run);
    Ok(case)
}

/// Runs the cases `args.scenarios` names (default: all); the testbed case on a lab with
/// `args.prefix`.
pub(super) fn run(args: &EvalArgs) -> Result<Report> {
    let jobs = jobs();
    let known: Vec<&str> = jobs
        .iter()
        .map(|(n, _)| *n)
        .chain([UNSTRUCTURED, TESTBED])
        .collect();
    if let Some(bad) = args.scenarios.iter().find(|s| !known.contains(&s.as_str())) {
        bail!("unknown skeleton case {bad:?}; cases: {}", known.join(", "));
    }
    let wanted = |name: &str| args.scenarios.is_empty() || args.scenarios.iter().any(|s| s == name);
    let cfg = InferenceConfig::default();
    let mut cases = Vec::new();
    for (name, job) in jobs.iter().filter(|(n, _)| wanted(n)) {
        eprintln!("eval skeleton: {name} ...");
        cases.push(run_case(name, Some(job), &cfg)?);
    }
    if wanted(UNSTRUCTURED) {
        cases.push(run_case(UNSTRUCTURED, None, &cfg)?);
    }
    if wanted(TESTBED) {
        eprintln!("eval skeleton: {TESTBED} (prefix {}) ...", args.prefix);
        cases.push(testbed_case(&args.prefix)?);
    }
    let ran: Vec<&Case> = cases.iter().filter(|c| c.skipped.is_none()).collect();
    let structured: Vec<&&Case> = ran.iter().filter(|c| c.truth.is_some()).collect();
    let fig8 = cases.iter().find(|c| c.name == "fig8_tp8_pp8_dp8_512");
    let summary = Summary {
        correct: format!("{}/{}", ran.iter().filter(|c| c.correct).count(), ran.len()),
        skipped: cases
            .iter()
            .filter_map(|c| Some(format!("{}: {}", c.name, c.skipped.as_ref()?)))
            .collect(),
        mean_grouping_accuracy: structured
            .iter()
            .filter_map(|c| c.grouping_accuracy)
            .sum::<f64>()
            / structured.len().max(1) as f64,
        fig8_basic_reduction_x: fig8.map(|c| c.basic_reduction_x),
        fig8_skeleton_reduction_pct: fig8
            .filter(|c| c.fallback.is_none())
            .map(|c| c.pinglist_reduction_pct),
    };
    Ok(Report { cases, summary })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_small_job_and_the_fallback_case_score_right() {
        let cfg = rocemesh_skeleton::InferenceConfig::default();
        let small = super::jobs().into_iter().next().unwrap().1;
        let c = super::run_case("small", Some(&small), &cfg).unwrap();
        assert!(c.correct && c.talking_pairs_covered, "{c:?}");
        assert_eq!(c.inferred, Some([2, 2, 4]));
        let u = super::run_case("u", None, &cfg).unwrap();
        assert!(
            u.correct && u.fallback.is_some() && u.pinglist_pairs == u.basic_pairs,
            "{u:?}"
        );
    }
}
