//! Synthetic training-job traffic (SkeletonHunter §3.2, Fig. 7-10): [`Fabric::start_job`] starts
//! one helper process per busy host namespace that sends real, paced UDP bursts between RNICs
//! shaped like a DP × PP × TP job (pipeline activations time-shifted by stage, then ring
//! all-reduce bursts per DP group, with jitter), and returns the placement as [`JobTruth`] so
//! skeleton inference is scored against it. Helpers are recorded in the state file:
//! [`Fabric::stop_job`] or [`Fabric::down`] kill them, also from another process.

mod plan;
mod record;
mod spec;
mod truth;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::fabric::Fabric;
use crate::netns;
use crate::process::TrackedProcess;
use crate::state::{StateLock, log_path};

pub(crate) use plan::{Plan, RnicRef, jitter_ms};
pub use record::RingIteration;
pub(crate) use record::{Recorder, path as record_path};
pub use spec::{
    Collective, JobSpec, MAX_BURST_MBPS, MAX_COMPUTE_MS, MAX_ITERATION_MS, MAX_JOB_NAME_LEN,
    MIN_ITERATION_MS,
};
pub use truth::{JobTruth, RnicRole};

/// UDP port every job RNIC sends from and to (one job per RNIC, so one port suffices).
pub const JOB_PORT: u16 = 18515;

/// Payload bytes of one job datagram.
pub const DATAGRAM: usize = 1024;

/// A helper process sending one host's share of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHelper {
    /// Host short name ("h3").
    pub host: String,
    /// The process (killed by `stop_job` and `down`).
    pub process: TrackedProcess,
}

/// A running job as recorded in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveJob {
    /// What was asked for.
    pub spec: JobSpec,
    /// Unix time (ms) of iteration 0; every helper keeps to this common clock.
    pub start_unix_ms: u64,
    /// Its helper processes.
    pub helpers: Vec<JobHelper>,
}

impl ActiveJob {
    /// Kills its helpers (already gone is fine).
    pub(crate) fn kill(&self) {
        for h in &self.helpers {
            h.process.kill();
        }
    }
}

/// What [`Fabric::start_job`] and [`Fabric::jobs`] return: the job and its ground truth
/// (serializes as `{"active": …, "truth": …}` for tools that print it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobHandle {
    active: ActiveJob,
    truth: JobTruth,
}

impl JobHandle {
    /// The job's name (pass to [`Fabric::stop_job`]).
    pub fn name(&self) -> &str {
        &self.active.spec.name
    }

    /// Its spec.
    pub fn spec(&self) -> &JobSpec {
        &self.active.spec
    }

    /// Placement, DP groups and the RNIC pairs that really carry its traffic.
    pub fn truth(&self) -> &JobTruth {
        &self.truth
    }

    /// Unix time (ms) of iteration 0.
    pub fn start_unix_ms(&self) -> u64 {
        self.active.start_unix_ms
    }

    /// Its helper processes, one per host with job traffic.
    pub fn helpers(&self) -> &[JobHelper] {
        &self.active.helpers
    }
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Fabric {
    /// Starts job `spec`: one traffic helper per host with RNIC traffic, sharing a clock. Fails,
    /// with nothing left running, on an invalid spec, a duplicate name or hosts already used by
    /// another job.
    pub fn start_job(&self, spec: &JobSpec) -> Result<JobHandle> {
        let plan = Plan::new(self.topology(), spec)?;
        let prefix = &self.spec().prefix;
        let lock = StateLock::acquire(prefix)?;
        let mut state = lock.load_existing()?;
        for other in &state.jobs {
            if other.spec.name == spec.name {
                bail!("job {:?} is already running", spec.name);
            }
            let theirs = Plan::new(self.topology(), &other.spec)?.hosts();
            let mine = plan.hosts();
            if mine.start < theirs.end && theirs.start < mine.end {
                bail!(
                    "job {:?} needs hosts {mine:?}, job {:?} holds {theirs:?}",
                    spec.name,
                    other.spec.name
                );
            }
        }
        let mut active = ActiveJob {
            spec: spec.clone(),
            start_unix_ms: now_unix_ms(),
            helpers: Vec::new(),
        };
        for host in plan.busy_hosts() {
            match self.spawn_job_helper(&active, host) {
                Ok(h) => active.helpers.push(h),
                Err(e) => {
                    active.kill();
                    return Err(e.context(format!("starting job {:?}", spec.name)));
                }
            }
        }
        state.jobs.push(active.clone());
        if let Err(e) = lock.save(&state) {
            active.kill();
            return Err(e);
        }
        tracing::info!(
            job = spec.name,
            helpers = active.helpers.len(),
            "job started"
        );
        Ok(JobHandle {
            truth: JobTruth::of(&plan),
            active,
        })
    }

    fn spawn_job_helper(&self, job: &ActiveJob, host: usize) -> Result<JobHelper> {
        let h = &self.hosts()[host];
        let helper = self.helper()?;
        let mut cmd: Command = netns::command(&h.netns, &helper.program.to_string_lossy());
        cmd.args(&helper.args).args([
            "job".to_string(),
            serde_json::to_string(self.spec())?,
            serde_json::to_string(&job.spec)?,
            host.to_string(),
            job.start_unix_ms.to_string(),
        ]);
        let log = log_path(
            &self.spec().prefix,
            &format!("job-{}-{}", job.spec.name, h.name),
        );
        Ok(JobHelper {
            host: h.name.clone(),
            process: TrackedProcess::spawn(cmd, &log, true)?,
        })
    }

    /// Stops job `name`: its helpers are killed and it leaves the state file.
    pub fn stop_job(&self, name: &str) -> Result<()> {
        let lock = StateLock::acquire(&self.spec().prefix)?;
        let mut state = lock.load_existing()?;
        let pos = state
            .jobs
            .iter()
            .position(|j| j.spec.name == name)
            .with_context(|| format!("no running job {name:?}"))?;
        let job = state.jobs.remove(pos);
        job.kill();
        lock.save(&state)?;
        tracing::info!(job = name, "job stopped");
        Ok(())
    }

    /// What the ranks of running ring job `name` recorded of their iterations so far
    /// ([`RingIteration`]), ordered by start; an error for a paced job, which records none.
    pub fn job_iterations(&self, name: &str) -> Result<Vec<RingIteration>> {
        let state = StateLock::acquire(&self.spec().prefix)?.load_existing()?;
        let job = state
            .jobs
            .iter()
            .find(|j| j.spec.name == name)
            .with_context(|| format!("no running job {name:?}"))?;
        if !matches!(job.spec.collective, Collective::Ring { .. }) {
            bail!("job {name:?} is paced: only ring jobs record their iterations");
        }
        let mut all = Vec::new();
        for h in &job.helpers {
            all.extend(record::read(&record::path(
                &self.spec().prefix,
                name,
                &h.host,
            ))?);
        }
        all.sort_by_key(|it| (it.start_unix_ms, it.rank));
        Ok(all)
    }

    /// Jobs running on the fabric (e.g. started by another process), with their truth.
    pub fn jobs(&self) -> Result<Vec<JobHandle>> {
        let state = StateLock::acquire(&self.spec().prefix)?.load_existing()?;
        state
            .jobs
            .into_iter()
            .map(|active| {
                let plan = Plan::new(self.topology(), &active.spec)?;
                Ok(JobHandle {
                    truth: JobTruth::of(&plan),
                    active,
                })
            })
            .collect()
    }
}
