//! `rocemesh-lab eval --suite tasks --testbed`: seeded cases of closed-loop ring jobs on
//! namespace fabrics ([`crate::lab::task_job`]), each on a fresh lab, cycling through
//! healthy, CPU-starved rank, lossy rank link, stopped rank, rank RNIC down and congested
//! uplinks of a ToR that one of two jobs crosses. Fabric size, faulty rank, quota, loss,
//! ToR and rate are drawn from the seed. The rank cases are scored like the simulated jobs
//! ([`jobsuite::score`]: every iteration window's class, its straggler, the matrix
//! attributions); the congestion case by the tasks its problems blame.

use super::super::EvalArgs;
use crate::lab::task_job::{self, Case, CaseRun, Injection, Placement};
use anyhow::{Context, Result, bail};
use rocemesh_impact::Verdict;
use rocemesh_proto::api::ComponentKind;
use rocemesh_sim::job::JobFault;
use rocemesh_sim::jobsuite::{self, JobOutcome, Report, Timeline};
use rocemesh_sim::rng::{Rng, hash};
use rocemesh_testbed::{FabricSpec, RingIteration};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Cases a suite cycles through: healthy, CPU starved, link loss, stopped, RNIC down,
/// congestion.
const CASES: u32 = 6;

/// A drawn case with what it is scored against.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Drawn {
    /// Index in the suite.
    pub index: u32,
    /// The case.
    pub case: Case,
    /// Each job's judged windows and attributions ([`summary`]).
    pub windows: Vec<Vec<String>>,
    /// The first job's iterations by its own record: `start (s from the injection) length`
    /// (the start of one all-reduce to the next's).
    pub iterations: Vec<String>,
    /// Its truth.
    #[serde(skip)]
    truth: Truth,
}

#[derive(Debug, Clone)]
enum Truth {
    /// The first job's windows, as a simulated job of this fault would be scored.
    Rank(JobFault),
    /// The problems on ToR `tor` or its uplinks blame job `crossing` and not job `other`.
    Blame {
        tor: String,
        crossing: String,
        other: String,
    },
}

/// Score of a congestion case.
#[derive(Debug, Clone, Serialize)]
pub(super) struct BlameOutcome {
    /// Case index.
    pub index: u32,
    /// The ToR whose uplinks were congested.
    pub tor: String,
    /// The job whose probed flows cross it.
    pub crossing: String,
    /// The job whose flows do not.
    pub other: String,
    /// Problems the analyzer reported on the ToR or its uplinks (`kind component`).
    pub problems: Vec<String>,
    /// Names their evidence blamed.
    pub blamed: Vec<String>,
    /// Every problem the analyzer reported: `kind component blamed…`.
    pub all_problems: Vec<String>,
    /// A problem there blamed the crossing job and none the other.
    pub right: bool,
}

/// The suite's report: the rank cases as the simulated suite reports them, plus blame.
#[derive(Debug, Serialize)]
pub(super) struct TestbedReport {
    /// Rank cases (`jobs[i].index` is the case index).
    #[serde(flatten)]
    pub report: Report,
    /// Per fault: cases whose verdict's worst window has the fault's class and straggler
    /// (right, cases).
    pub worst: BTreeMap<&'static str, (u32, u32)>,
    /// Congestion cases.
    pub blame: Vec<BlameOutcome>,
    /// Every case as drawn.
    pub cases: Vec<Drawn>,
}

/// Draws case `index` of `seed`.
pub(super) fn draw(seed: u64, index: u32, baseline: Duration, fault_for: Duration) -> Drawn {
    let mut rng = Rng::new(hash(&[seed, u64::from(index), 0x7a5c]));
    let kind = index % CASES;
    let tors = if kind == 5 { 3 } else { 2 + rng.below(2) as u8 };
    let fabric = FabricSpec {
        tors,
        spines: 2,
        hosts_per_tor: 2,
        rnics_per_host: 1,
        ..FabricSpec::default()
    };
    let hosts = fabric.host_count();
    let rank = rng.below(hosts as u64) as usize;
    let all = vec![Placement {
        name: format!("ring{index}"),
        hosts: (0..hosts).collect(),
    }];
    let between = |rng: &mut Rng, lo: u8, hi: u8| lo + rng.below(u64::from(hi - lo) + 1) as u8;
    let (jobs, injection, truth) = match kind {
        0 => (all, Injection::None, Truth::Rank(JobFault::Healthy)),
        1 => {
            let percent = between(&mut rng, 2, 4);
            let fault = JobFault::CpuStarved {
                rank,
                factor: f64::from(BUSY_FACTOR) / f64::from(percent),
            };
            (
                all,
                Injection::CpuStarve { rank, percent },
                Truth::Rank(fault),
            )
        }
        2 => {
            let percent = between(&mut rng, 3, 6);
            let fault = JobFault::LinkLoss {
                rank,
                loss: f64::from(percent) / 100.0,
                // The stretch emerges from TCP's retransmissions.
                stretch: f64::NAN,
            };
            (
                all,
                Injection::LinkLoss { rank, percent },
                Truth::Rank(fault),
            )
        }
        3 => (
            all,
            Injection::Stop { rank },
            Truth::Rank(JobFault::Stopped { rank }),
        ),
        4 => (
            all,
            Injection::RnicDown { rank },
            Truth::Rank(JobFault::LinkDown { rank }),
        ),
        _ => {
            // Job a on h0..h2 (ToRs 0, 1), job b on h3..h5 (ToRs 1, 2): both cross spine
            // links, only a crosses ToR 0's and only b ToR 2's.
            let (a, b) = (format!("ring{index}a"), format!("ring{index}b"));
            let jobs = vec![
                Placement {
                    name: a.clone(),
                    hosts: vec![0, 1, 2],
                },
                Placement {
                    name: b.clone(),
                    hosts: vec![3, 4, 5],
                },
            ];
            let (tor, crossing, other) = if rng.chance(0.5) {
                ("t0", a, b)
            } else {
                ("t2", b, a)
            };
            let rate_kbit = 250 * u32::from(between(&mut rng, 2, 6));
            let truth = Truth::Blame {
                tor: tor.to_string(),
                crossing,
                other,
            };
            let tor = tor.to_string();
            (jobs, Injection::Congestion { tor, rate_kbit }, truth)
        }
    };
    Drawn {
        index,
        windows: Vec::new(),
        iterations: Vec::new(),
        case: Case {
            fabric,
            jobs,
            injection,
            baseline,
            fault_for,
        },
        truth,
    }
}

/// Share of one core a rank's computation burns when healthy, % (its CPU time over its
/// wall time): a quota of `p` % stretches it about `BUSY_FACTOR / p`-fold.
const BUSY_FACTOR: u32 = task_job::BUSY_MS * 100 / task_job::COMPUTE_MS;

/// A verdict's windows (`start (s from the injection) length class straggler`), then its
/// attributions' evidence.
fn summary(v: &Verdict, fault_at_ms: i64) -> Vec<String> {
    let Some(h) = &v.health else {
        return vec![v.health_note.clone().unwrap_or_default()];
    };
    let windows = h.health.windows.iter().map(|w| {
        format!(
            "{:+.1}s {} ms {} {}",
            (w.from_ms - fault_at_ms) as f64 / 1e3,
            w.to_ms - w.from_ms,
            w.class.as_str(),
            w.straggler.map_or("-".into(), |r| r.to_string())
        )
    });
    let attributions = h.health.attributions.iter().map(|a| a.evidence.clone());
    windows.chain(attributions).collect()
}

/// Scores the rank case `d` from what its run measured and when its first job's
/// iterations began (`starts`, [`collective_starts`]).
fn score_rank(
    d: &Drawn,
    fault: &JobFault,
    run: &CaseRun,
    starts: &[i64],
) -> Result<(JobOutcome, bool)> {
    let verdict = run.verdicts.first().context("no verdict")?;
    let Some(health) = &verdict.health else {
        bail!(
            "case {}: the verdict has no health: {}",
            d.index,
            verdict.health_note.as_deref().unwrap_or("no reason given")
        );
    };
    // The verdict names ranks `host/rnic`; the case numbers them in its task's order.
    let fault = match fault.rank() {
        Some(rank) => {
            let name = run.ranks[0].get(rank).context("rank out of range")?;
            let r = health
                .ranks
                .iter()
                .position(|r| r == name)
                .with_context(|| format!("the verdict does not list rank {name}"))?;
            fault.with_rank(r)
        }
        None => *fault,
    };
    // A hang window runs to the end of the series the verdict read.
    let end_ms = health
        .health
        .windows
        .iter()
        .map(|w| w.to_ms)
        .max()
        .unwrap_or(verdict.to);
    let timeline = Timeline {
        fault_at_ms: run.fault_at_ms,
        end_ms,
        iterations: starts,
    };
    let ranks = health.ranks.len();
    let interval = task_job::SAMPLE_INTERVAL_MS as u32;
    // What an operator reads first: the worst window's class and its straggler.
    let worst_right = health.worst == Some(fault.class())
        && fault.rank().map(|r| health.ranks[r].clone()) == health.straggler;
    let o = jobsuite::score(d.index, &fault, (ranks, interval), timeline, &health.health);
    Ok((o, worst_right))
}

/// When each iteration's all-reduce began: its first rank's start (the ring is lock-step,
/// so iteration `k` of every rank is the same collective and traffic begins with the
/// first rank done computing).
fn collective_starts(its: &[RingIteration]) -> Vec<i64> {
    let mut first: BTreeMap<u64, i64> = BTreeMap::new();
    for it in its {
        let s = first.entry(it.iteration).or_insert(it.start_unix_ms);
        *s = (*s).min(it.start_unix_ms);
    }
    first.into_values().collect()
}

fn score_blame(index: u32, tor: &str, crossing: &str, other: &str, run: &CaseRun) -> BlameOutcome {
    let uplink = format!("{tor}-");
    let on_link: Vec<_> = run
        .problems
        .iter()
        .filter(|p| match p.component_kind {
            ComponentKind::Link => p.component.starts_with(&uplink),
            ComponentKind::Switch => p.component == tor,
            _ => false,
        })
        .collect();
    let blamed: BTreeSet<String> = on_link
        .iter()
        .flat_map(|p| p.evidence.blamed.iter().map(|b| b.name.clone()))
        .collect();
    BlameOutcome {
        index,
        tor: tor.to_string(),
        crossing: crossing.to_string(),
        other: other.to_string(),
        problems: on_link
            .iter()
            .map(|p| format!("{:?} {}", p.kind, p.component))
            .collect(),
        all_problems: run
            .problems
            .iter()
            .map(|p| {
                let names: Vec<&str> = p.evidence.blamed.iter().map(|b| b.name.as_str()).collect();
                format!("{:?} {} {names:?}", p.kind, p.component)
            })
            .collect(),
        right: blamed.contains(crossing) && !blamed.contains(other),
        blamed: blamed.into_iter().collect(),
    }
}

/// Runs the suite (`--random N`, default one case of each kind; `--only I` replays one).
pub(super) fn run(args: &EvalArgs) -> Result<()> {
    let (n, seed) = super::size_and_seed(args, CASES)?;
    let indices = super::super::indices(args, n)?;
    crate::lab::require_root("rocemesh-lab eval --suite tasks --testbed")?;
    eprintln!(
        "eval: task suite on the testbed, {n} cases, seed {seed} (replay: --suite tasks --testbed --random {n} --seed {seed} [--only I])"
    );
    let (baseline, fault_for) = (
        Duration::from_secs(args.baseline_secs),
        Duration::from_secs(args.fault_secs),
    );
    let mut outcomes = Vec::new();
    let mut blame = Vec::new();
    let mut worst: BTreeMap<&'static str, (u32, u32)> = BTreeMap::new();
    let mut cases = Vec::new();
    for i in indices {
        let d = draw(seed, i, baseline, fault_for);
        eprintln!(
            "eval tasks: case {i}: {} ToRs, {}",
            d.case.fabric.tors,
            serde_json::to_string(&d.case.injection)?
        );
        let run = task_job::run(&args.prefix, &d.case, seed ^ u64::from(i))?;
        let mut d = d;
        d.windows = run
            .verdicts
            .iter()
            .map(|v| summary(v, run.fault_at_ms))
            .collect();
        let starts = collective_starts(run.iterations.first().context("no iterations")?);
        d.iterations = starts
            .windows(2)
            .map(|w| {
                let at = (w[0] - run.fault_at_ms) as f64 / 1e3;
                format!("{at:+.1}s {} ms", w[1] - w[0])
            })
            .collect();
        match &d.truth {
            Truth::Rank(fault) => {
                let (o, worst_right) = score_rank(&d, fault, &run, &starts)?;
                let w = worst.entry(o.fault).or_default();
                w.0 += u32::from(worst_right);
                w.1 += 1;
                eprintln!(
                    "eval tasks: case {i} {}: {}/{} healthy, {}/{} faulty windows right, straggler {}/{}, attribution {}{}",
                    o.fault,
                    o.healthy_right,
                    o.healthy_windows,
                    o.faulty_right,
                    o.faulty_windows,
                    o.straggler_right,
                    o.faulty_right,
                    if o.attribution_right {
                        "right"
                    } else {
                        "wrong"
                    },
                    if o.wrong.is_empty() {
                        String::new()
                    } else {
                        format!("; wrong: {}", o.wrong.join("; "))
                    }
                );
                outcomes.push(o);
            }
            Truth::Blame {
                tor,
                crossing,
                other,
            } => {
                let b = score_blame(i, tor, crossing, other, &run);
                eprintln!(
                    "eval tasks: case {i} congestion on {tor}'s uplinks: problems {:?}, blamed {:?} ({})",
                    b.problems,
                    b.blamed,
                    if b.right { "right" } else { "wrong" }
                );
                blame.push(b);
            }
        }
        cases.push(d);
    }
    let report = TestbedReport {
        report: Report::new(seed, outcomes),
        worst,
        blame,
        cases,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.report.table());
        println!("\n{:<24} {:>8} {:>8}", "worst window", "jobs", "right");
        for (fault, (right, n)) in &report.worst {
            println!("{fault:<24} {n:>8} {right:>8}");
        }
        let right = report.blame.iter().filter(|b| b.right).count();
        println!(
            "\n{:<24} {:>8} {:>8}",
            "flow blame",
            report.blame.len(),
            right
        );
        for j in report.report.jobs.iter().filter(|j| !j.wrong.is_empty()) {
            println!("#{} {}: {}", j.index, j.fault, j.wrong.join("; "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_cycle_through_every_case_on_valid_ring_jobs() {
        let seed = rocemesh_proto::now_unix_ns() as u64;
        eprintln!("seed {seed}");
        let d = Duration::from_secs(1);
        for i in 0..2 * CASES {
            let drawn = draw(seed, i, d, d);
            let c = &drawn.case;
            for p in &c.jobs {
                task_job::ring_spec(p, seed)
                    .validate(&c.fabric)
                    .unwrap_or_else(|e| panic!("case {i}: {e:#}"));
            }
            let hosts: BTreeSet<usize> = c.jobs.iter().flat_map(|p| p.hosts.clone()).collect();
            assert_eq!(
                hosts.len(),
                c.jobs.iter().map(|p| p.hosts.len()).sum::<usize>(),
                "jobs share no host"
            );
            match (&drawn.truth, &c.injection) {
                (Truth::Blame { tor, crossing, .. }, Injection::Congestion { tor: t, .. }) => {
                    assert_eq!(tor, t);
                    // The crossing job has a host under the ToR, the other none.
                    let tor: usize = tor[1..].parse().unwrap();
                    let under = |name: &str| {
                        c.jobs
                            .iter()
                            .find(|p| p.name == name)
                            .unwrap()
                            .hosts
                            .iter()
                            .any(|h| h / 2 == tor)
                    };
                    assert!(under(crossing));
                    let other = c.jobs.iter().find(|p| p.name != *crossing).unwrap();
                    assert!(!under(&other.name));
                }
                (Truth::Rank(f), inj) => {
                    assert_eq!(f.rank().is_some(), *inj != Injection::None, "{inj:?}");
                    assert!(f.rank().is_none_or(|r| r < c.jobs[0].hosts.len()));
                }
                (t, i) => panic!("case {i:?} with truth {t:?}"),
            }
        }
    }

    #[test]
    fn an_iteration_begins_with_its_first_rank_done_computing() {
        let it = |rank, iteration, start_unix_ms| RingIteration {
            rank,
            iteration,
            start_unix_ms,
            end_unix_ms: start_unix_ms + 300,
        };
        // Rank 1 computes 200 ms longer each time; its record comes first.
        let its = [
            it(1, 0, 1_200),
            it(1, 1, 2_200),
            it(0, 0, 1_000),
            it(0, 1, 2_000),
            it(0, 2, 3_000),
        ];
        assert_eq!(collective_starts(&its), [1_000, 2_000, 3_000]);
    }
}
