//! Training-task skeleton inference end to end (SkeletonHunter §5.1) on a lab: an emulated
//! job's real UDP traffic is sampled by the real agents, uploaded to the controller, and the
//! controller infers the task's parallel groups; everything is read back over the REST API
//! and set against the job's ground truth. The root test and `rocemesh-lab eval --suite
//! skeleton` both run it.

use super::{Lab, LabTiming};
use anyhow::{Context, Result, bail};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{HostInfo, Pinglist, SkeletonInfo, TaskInfo, TaskPhase};
use rocemesh_testbed::{FabricSpec, JobSpec, JobTruth};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Throughput sampling interval of the agents.
pub const SAMPLE_INTERVAL_MS: u64 = 250;
/// Samples the controller infers on (24 s at 250 ms: 12 iterations of [`job_spec`]).
pub const INFERENCE_SAMPLES: usize = 96;
/// STFT window of the inference, samples (8 iterations: with fewer the harmonic comb covers
/// most of the spectrum and even clean bursts look aperiodic).
pub const STFT_WINDOW: usize = 64;
/// How often the controller infers again.
pub const INFERENCE_EVERY_MS: u64 = 2_000;

/// A probe pair of RNIC ids, smaller first.
pub type RnicPair = (u32, u32);

/// 4 hosts × 4 RNICs, RNIC i of every host on rail ToR i, 2 spines.
pub fn fabric_spec(prefix: &str) -> FabricSpec {
    FabricSpec {
        prefix: prefix.to_string(),
        tors: 4,
        spines: 2,
        hosts_per_tor: 4,
        rnics_per_host: 4,
        rail_optimized: true,
        management: true,
    }
}

/// TP=2, PP=2, DP=4 on the 16 RNICs: 2 s iterations (8 samples), stage 1 bursting 250 ms
/// (one sample) after stage 0, 80 ms jitter per collective.
pub fn job_spec() -> JobSpec {
    JobSpec {
        iteration_ms: 2_000,
        pp_offset_ms: 250,
        ..JobSpec::tp2_pp2_dp4("llm-e2e")
    }
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SkeletonRun {
    /// RNICs of the task.
    pub rnics: usize,
    /// The job's DP groups as RNIC ids (ground truth).
    pub truth_groups: Vec<Vec<u32>>,
    /// Pairs that really carry job traffic plus all pairs inside a true group (what the
    /// skeleton pinglist must hold), as RNIC ids.
    pub truth_pairs: Vec<RnicPair>,
    /// Task after the first inference without job traffic.
    pub idle: TaskInfo,
    /// Seconds from the task's creation to that first inference.
    pub idle_inference_s: f64,
    /// Every distinct skeleton the controller accepted while the job ran, in order.
    pub skeletons_seen: Vec<SkeletonInfo>,
    /// Task at the end (phase `skeleton` unless the run timed out).
    pub last: TaskInfo,
    /// Seconds from the job's start to the first accepted skeleton.
    pub time_to_skeleton_s: Option<f64>,
    /// Task-service pairs in the agents' pinglists at the end, as RNIC ids.
    pub pinglist_pairs: Vec<RnicPair>,
}

impl SkeletonRun {
    /// The accepted skeleton's groups equal the true groups (as sets of sets).
    pub fn groups_exact(&self) -> bool {
        self.last.phase == TaskPhase::Skeleton
            && self
                .last
                .skeleton
                .as_ref()
                .is_some_and(|s| as_sets(&s.groups) == as_sets(&self.truth_groups))
    }

    /// Share of true groups recovered exactly by the final skeleton (0 without one).
    pub fn grouping_accuracy(&self) -> f64 {
        match (&self.last.phase, &self.last.skeleton) {
            (TaskPhase::Skeleton, Some(s)) => {
                rocemesh_skeleton::grouping_accuracy(&self.truth_groups, &s.groups)
            }
            _ => 0.0,
        }
    }
}

fn as_sets(groups: &[Vec<u32>]) -> BTreeSet<BTreeSet<u32>> {
    groups.iter().map(|g| g.iter().copied().collect()).collect()
}

/// Runs the whole scenario on a fresh lab with `prefix` (root only); the lab is torn
/// down before returning.
pub fn run(prefix: &str) -> Result<SkeletonRun> {
    let timing = LabTiming {
        sample_interval_ms: Some(SAMPLE_INTERVAL_MS),
        ..LabTiming::default()
    };
    let lab = Lab::up_with(fabric_spec(prefix), &timing, |cfg| {
        let c = &mut cfg.controller;
        // Slack for one host's upload arriving a little after the others'.
        c.throughput_window = INFERENCE_SAMPLES + 8;
        c.skeleton_min_samples = INFERENCE_SAMPLES;
        c.skeleton_interval_ms = INFERENCE_EVERY_MS;
        c.skeleton.features.window = STFT_WINDOW;
    })?;
    lab.wait_ready(Duration::from_secs(30))?;
    let all: Vec<usize> = (0..lab.fabric.hosts().len()).collect();
    let mut task = lab.create_task(&job_spec().name, &all)?;
    let created = Instant::now();
    // Fill the inference window once without job traffic (probes only), plus an upload
    // period and an inference period of slack.
    let window = Duration::from_millis(INFERENCE_SAMPLES as u64 * SAMPLE_INTERVAL_MS);
    let idle_limit = window * 2 + Duration::from_secs(10);
    while task.phase == TaskPhase::Preload {
        if created.elapsed() > idle_limit {
            bail!(
                "the controller applied no inference within {idle_limit:?} of the task's creation \
                 (are agents uploading throughput and the skeleton loop running?)"
            );
        }
        std::thread::sleep(Duration::from_millis(250));
        task = lab.get(&format!("/api/v1/tasks/{}", task.id))?;
    }
    let idle = task.clone();
    let idle_inference_s = created.elapsed().as_secs_f64();

    let job = lab.fabric.start_job(&job_spec())?;
    let started = Instant::now();
    let truth = truth_ids(&lab, job.truth(), &task)?;
    let mut skeletons_seen: Vec<SkeletonInfo> = Vec::new();
    let mut time_to_skeleton_s = None;
    // Wait for the window to hold job traffic only, then a little longer: a skeleton
    // accepted meanwhile must hold too.
    let settle = started + window + Duration::from_millis(3 * INFERENCE_EVERY_MS);
    let deadline = started + window * 3;
    loop {
        task = lab.get(&format!("/api/v1/tasks/{}", task.id))?;
        if task.phase == TaskPhase::Skeleton
            && let Some(s) = &task.skeleton
        {
            time_to_skeleton_s.get_or_insert(started.elapsed().as_secs_f64());
            if skeletons_seen.last() != Some(s) {
                skeletons_seen.push(s.clone());
            }
        }
        let now = Instant::now();
        if (now > settle && task.phase == TaskPhase::Skeleton) || now > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let pinglist_pairs = service_pairs(&lab)?;
    lab.fabric.stop_job(job.name())?;
    Ok(SkeletonRun {
        rnics: task.endpoints.len(),
        truth_groups: truth.0,
        truth_pairs: truth.1,
        idle,
        idle_inference_s,
        skeletons_seen,
        last: task,
        time_to_skeleton_s,
        pinglist_pairs,
    })
}

/// The truth's groups and skeleton pairs as RNIC ids of the task.
fn truth_ids(
    lab: &Lab,
    truth: &JobTruth,
    task: &TaskInfo,
) -> Result<(Vec<Vec<u32>>, Vec<RnicPair>)> {
    let by_endpoint: BTreeMap<(&str, &str), u32> = task
        .endpoints
        .iter()
        .filter_map(|(e, id)| Some(((e.host.as_str(), e.rnic.as_str()), (*id)?)))
        .collect();
    let id_of = |fabric_name: &str| -> Result<u32> {
        lab.fabric
            .hosts()
            .iter()
            .flat_map(|h| h.rnics.iter().map(move |r| (h, r)))
            .find(|(_, r)| r.name == fabric_name)
            .and_then(|(h, r)| by_endpoint.get(&(h.name.as_str(), r.ifname.as_str())))
            .copied()
            .with_context(|| format!("job RNIC {fabric_name} is not a task endpoint"))
    };
    let groups = truth
        .dp_groups
        .iter()
        .map(|g| g.iter().map(|n| id_of(n)).collect::<Result<Vec<_>>>())
        .collect::<Result<Vec<_>>>()?;
    let mut pairs = BTreeSet::new();
    for [a, b] in truth.dp_pairs.iter().chain(&truth.pp_pairs) {
        pairs.insert(ordered(id_of(a)?, id_of(b)?));
    }
    for g in &groups {
        for (i, &a) in g.iter().enumerate() {
            for &b in &g[i + 1..] {
                pairs.insert(ordered(a, b));
            }
        }
    }
    Ok((groups, pairs.into_iter().collect()))
}

fn ordered(a: u32, b: u32) -> RnicPair {
    (a.min(b), a.max(b))
}

/// Every (prober, target) of the controller's task-service lists, as unordered pairs.
fn service_pairs(lab: &Lab) -> Result<Vec<RnicPair>> {
    let hosts: Vec<HostInfo> = lab.get("/api/v1/hosts")?;
    let mut pairs = BTreeSet::new();
    for h in hosts {
        let list: Pinglist = lab.get(&format!("/api/v1/pinglists/{}", h.id))?;
        for r in &list.rnics {
            for l in r.lists.iter().filter(|l| l.class == ProbeClass::Service) {
                pairs.extend(l.entries.iter().map(|t| ordered(r.rnic_id, t.rnic_id)));
            }
        }
    }
    Ok(pairs.into_iter().collect())
}
