//! Task health end to end on a lab (Pulse §6.2, C4D §III-A, Vedrfolnir §III-D): closed-loop
//! ring jobs ([`Collective::Ring`]) run on a namespace fabric as tasks, the real agents
//! sample their RNICs' counters and probe the task pairs, one fault is injected with a real
//! mechanism (a CPU quota, nftables loss, SIGSTOP, an RNIC down, tbf-shaped links), and
//! each task's verdict and the analyzer's problems are read back over the REST API.
//! `rocemesh-lab eval --suite tasks --testbed` runs it.

use super::{Lab, LabTiming};
use anyhow::{Context, Result, bail};
use rocemesh_impact::Verdict;
use rocemesh_proto::api::{Problem, TaskInfo};
use rocemesh_testbed::{
    Collective, Direction, FabricSpec, Fault, JobHandle, JobSpec, RingIteration,
};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Throughput sampling interval of the agents: a tenth of an iteration or less.
pub const SAMPLE_INTERVAL_MS: u64 = 50;
/// Wall time of a rank's computation per iteration.
pub const COMPUTE_MS: u32 = 400;
/// CPU time the computation burns (a CPU quota stretches it).
pub const BUSY_MS: u32 = 40;
/// Bytes of one ring step's chunk.
pub const CHUNK_BYTES: u64 = 64 * 1024;
/// A rank's sending rate, Mbit/s (a step's chunk takes 64 ms).
pub const RING_MBPS: u32 = 8;
/// Samples the controller keeps per RNIC (60 s): the verdict's whole interval.
const THROUGHPUT_WINDOW: usize = 1_200;
/// The verdict skips the job's first seconds (connections, first iterations).
const WARMUP: Duration = Duration::from_secs(3);

/// One job of a case: a ring over the single RNICs of `hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Job and task name.
    pub name: String,
    /// Fabric host indices, in rank order.
    pub hosts: Vec<usize>,
}

/// What is done, `fault_for` before the verdicts are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Injection {
    /// Nothing.
    None,
    /// Rank `rank` of the first job: its job process gets `percent` % of one core.
    CpuStarve {
        /// Rank index.
        rank: usize,
        /// CPU quota, % of one core.
        percent: u8,
    },
    /// Rank `rank`'s RNIC link loses `percent` % of packets each way.
    LinkLoss {
        /// Rank index.
        rank: usize,
        /// Loss, %.
        percent: u8,
    },
    /// Rank `rank`'s job process is stopped (SIGSTOP).
    Stop {
        /// Rank index.
        rank: usize,
    },
    /// Rank `rank`'s RNIC goes down.
    RnicDown {
        /// Rank index.
        rank: usize,
    },
    /// Every uplink of ToR `tor` is shaped to `rate_kbit` both ways (tbf): whatever path
    /// ECMP gives a flow leaving the ToR's hosts, it crosses a congested link.
    Congestion {
        /// ToR name ("t0").
        tor: String,
        /// Rate, kbit/s.
        rate_kbit: u32,
    },
}

/// One task-health case on a fresh lab.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    /// The lab's fabric (one RNIC per host).
    pub fabric: FabricSpec,
    /// Jobs (the first is the one rank injections act on).
    pub jobs: Vec<Placement>,
    /// The fault.
    pub injection: Injection,
    /// Time from the jobs' start to the injection.
    pub baseline: Duration,
    /// Time from the injection to reading the verdicts.
    pub fault_for: Duration,
}

/// What a case measured.
#[derive(Debug, Clone, Serialize)]
pub struct CaseRun {
    /// Each job's verdict over `[start + warm-up, end]`, in the order of [`Case::jobs`].
    pub verdicts: Vec<Verdict>,
    /// `host/rnic` of each rank of each job, in rank order (as the verdicts name them).
    pub ranks: Vec<Vec<String>>,
    /// Unix ms of the injection.
    pub fault_at_ms: i64,
    /// What each job's ranks recorded of their iterations, in the order of [`Case::jobs`].
    pub iterations: Vec<Vec<RingIteration>>,
    /// Network problems the analyzer had open or resolved by the end.
    pub problems: Vec<Problem>,
}

/// The ring job of placement `p`: 64 KiB steps at 8 Mbit/s after each computation.
pub fn ring_spec(p: &Placement, seed: u64) -> JobSpec {
    let n = p.hosts.len() as u32;
    JobSpec {
        name: p.name.clone(),
        tp: 1,
        pp: 1,
        dp: n,
        iteration_ms: 1_000,
        pp_offset_ms: 0,
        allreduce_bytes: CHUNK_BYTES * u64::from(n),
        activation_bytes: 0,
        jitter_ms: 0,
        seed,
        first_host: p.hosts.first().map_or(0, |&h| h as u32),
        burst_mbps: RING_MBPS,
        collective: Collective::Ring {
            compute_ms: COMPUTE_MS,
            busy_ms: BUSY_MS,
        },
    }
}

/// Runs `case` on a fresh lab with `prefix` (root only); the lab is torn down before
/// returning.
pub fn run(prefix: &str, case: &Case, seed: u64) -> Result<CaseRun> {
    for p in &case.jobs {
        if p.hosts.windows(2).any(|w| w[1] != w[0] + 1) {
            bail!("job {} must sit on consecutive hosts", p.name);
        }
    }
    let timing = LabTiming {
        sample_interval_ms: Some(SAMPLE_INTERVAL_MS),
        ..LabTiming::default()
    };
    let fabric = FabricSpec {
        prefix: prefix.to_string(),
        ..case.fabric.clone()
    };
    let lab = Lab::up_with(fabric, &timing, |cfg| {
        cfg.controller.throughput_window = THROUGHPUT_WINDOW;
    })?;
    lab.wait_ready(Duration::from_secs(30))?;
    let mut tasks = Vec::new();
    let mut jobs = Vec::new();
    for p in &case.jobs {
        tasks.push(lab.create_task(&p.name, &p.hosts)?);
        jobs.push(lab.fabric.start_job(&ring_spec(p, seed))?);
    }
    let started = Instant::now();
    let from = rocemesh_proto::now_unix_ms() + WARMUP.as_millis() as i64;
    std::thread::sleep(case.baseline);
    let fault_at_ms = rocemesh_proto::now_unix_ms();
    let undo = inject(&lab, case, &jobs)?;
    eprintln!(
        "eval tasks: {:?} injected {:.1} s after the jobs started",
        case.injection,
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(case.fault_for);
    let to = rocemesh_proto::now_unix_ms();
    let read = read_back(&lab, &tasks, from, to);
    let iterations = jobs
        .iter()
        .map(|j| lab.fabric.job_iterations(j.name()))
        .collect::<Result<Vec<_>>>();
    undo.run(&lab);
    for j in &jobs {
        lab.fabric.stop_job(j.name())?;
    }
    let (verdicts, problems) = read?;
    Ok(CaseRun {
        iterations: iterations?,
        ranks: tasks
            .iter()
            .map(|t| {
                t.endpoints
                    .iter()
                    .map(|(e, _)| format!("{}/{}", e.host, e.rnic))
                    .collect()
            })
            .collect(),
        verdicts,
        fault_at_ms,
        problems,
    })
}

fn read_back(
    lab: &Lab,
    tasks: &[TaskInfo],
    from: i64,
    to: i64,
) -> Result<(Vec<Verdict>, Vec<Problem>)> {
    let verdicts = tasks
        .iter()
        .map(|t| {
            lab.get(&format!(
                "/api/v1/tasks/{}/verdict?from={from}&to={to}",
                t.id
            ))
        })
        .collect::<Result<Vec<Verdict>>>()?;
    Ok((verdicts, lab.problems()?))
}

/// How to take an injection back.
enum Undo {
    Nothing,
    Clear(Vec<u16>),
    Continue(u32),
}

impl Undo {
    fn run(self, lab: &Lab) {
        match self {
            Undo::Nothing => {}
            Undo::Clear(ids) => {
                for id in ids {
                    if let Err(e) = lab.fabric.clear(id) {
                        eprintln!("eval tasks: clearing fault {id}: {e:#}");
                    }
                }
            }
            Undo::Continue(pid) => signal(pid, libc::SIGCONT),
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory preconditions; the pid is a helper this lab started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

fn inject(lab: &Lab, case: &Case, jobs: &[JobHandle]) -> Result<Undo> {
    let first = case.jobs.first().context("a case needs a job")?;
    let job = jobs.first().context("a case needs a job")?;
    let host_of = |rank: usize| -> Result<&rocemesh_testbed::Host> {
        let i = *first
            .hosts
            .get(rank)
            .with_context(|| format!("job {} has no rank {rank}", first.name))?;
        lab.fabric
            .hosts()
            .get(i)
            .with_context(|| format!("no host {i}"))
    };
    let pid_of = |rank: usize| -> Result<u32> {
        let host = host_of(rank)?;
        job.helpers()
            .iter()
            .find(|h| h.host == host.name)
            .map(|h| h.process.pid)
            .with_context(|| format!("no job process on {}", host.name))
    };
    let rnic_of = |rank: usize| -> Result<String> {
        let host = host_of(rank)?;
        Ok(host
            .rnics
            .first()
            .context("host without RNIC")?
            .name
            .clone())
    };
    let fault = match &case.injection {
        Injection::None => return Ok(Undo::Nothing),
        Injection::Stop { rank } => {
            let pid = pid_of(*rank)?;
            signal(pid, libc::SIGSTOP);
            return Ok(Undo::Continue(pid));
        }
        Injection::CpuStarve { rank, percent } => Fault::CpuStarve {
            pid: pid_of(*rank)?,
            percent: *percent,
        },
        Injection::LinkLoss { rank, percent } => {
            let rnic = rnic_of(*rank)?;
            let host = host_of(*rank)?;
            let link = lab
                .fabric
                .topology()
                .links_of(&host.name)
                .find(|l| l.name.starts_with(&format!("{rnic}-")))
                .with_context(|| format!("{rnic} has no link"))?
                .name
                .clone();
            Fault::Loss {
                link,
                direction: Direction::Both,
                percent: *percent,
            }
        }
        Injection::RnicDown { rank } => Fault::RnicDown {
            rnic: rnic_of(*rank)?,
        },
        Injection::Congestion { tor, rate_kbit } => {
            let uplinks: Vec<String> = lab
                .fabric
                .topology()
                .links_of(tor)
                .filter(|l| l.a.node == *tor)
                .map(|l| l.name.clone())
                .collect();
            if uplinks.is_empty() {
                bail!("{tor} has no uplinks");
            }
            let mut ids = Vec::new();
            for link in uplinks {
                let shaped = Fault::Congestion {
                    link,
                    direction: Direction::Both,
                    rate_kbit: *rate_kbit,
                    background: None,
                };
                match lab.fabric.apply(&shaped) {
                    Ok(h) => ids.push(h.id),
                    Err(e) => {
                        Undo::Clear(ids).run(lab);
                        return Err(e);
                    }
                }
            }
            return Ok(Undo::Clear(ids));
        }
    };
    Ok(Undo::Clear(vec![lab.fabric.apply(&fault)?.id]))
}
