//! Running one scenario through its phases on a lab and scoring what the analyzer
//! reported with the one scorer of every evaluation ([`rocemesh_sim::score`]), Algorithm 1
//! (the analyzer's baseline votes, polled through the fault) alongside.

use super::scenarios::Injected;
use crate::lab::Lab;
use anyhow::Result;
use rocemesh_analyzer::BaselineVote;
use rocemesh_proto::api::Problem;
use rocemesh_proto::now_unix_ms;
use rocemesh_sim::score::{self, BaselineTracker, Score, Summary, Truth};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Lengths of the three phases.
pub(super) struct Phases {
    /// Fault-free time before the injection.
    pub baseline: Duration,
    /// Time the fault lasts.
    pub fault: Duration,
    /// Observation after clearing.
    pub recovery: Duration,
}

/// The scored result of one scenario (the report's `scenarios[]` entries).
#[derive(Debug, Clone, Serialize)]
pub(super) struct Outcome {
    /// Scenario name (random suites: `random-<index>`).
    pub name: String,
    /// The injected faults' ground truth.
    pub truth: Vec<Truth>,
    /// The analyzer's problems from the end of the warm-up on, scored.
    pub score: Score,
    /// Algorithm 1's answers through the fault, scored the same way.
    pub baseline: Score,
    /// The problems' lifetimes, seconds after the onset (an episode resolved and raised
    /// again shows as two entries: an alert that flapped).
    pub timeline: Vec<Episode>,
    /// Every network problem was resolved by the end of the recovery phase.
    pub resolved_after_recovery: bool,
}

/// One reported problem's lifetime relative to the fault's onset.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Episode {
    /// `kind:name (problem kind)`.
    pub problem: String,
    /// First seen, seconds after the onset.
    pub first_seen_s: f64,
    /// Last seen, seconds after the onset.
    pub last_seen_s: f64,
    /// Resolved, seconds after the onset (`None`: still active at the end).
    pub resolved_s: Option<f64>,
}

fn undo(lab: &mut Lab, inj: &Injected) -> Result<()> {
    for u in inj.undo.iter().rev() {
        match u {
            super::scenarios::Undo::Fault(id) => lab.fabric.clear(*id)?,
            super::scenarios::Undo::StartAgent(h) => lab.start_agent(h)?,
            super::scenarios::Undo::StopJob(name) => lab.fabric.stop_job(name)?,
        }
    }
    Ok(())
}

/// Runs one scenario on `lab`: a fault-free baseline, `inject`, the fault phase (Alg. 1
/// polled every second), the undo, the recovery; then scores it.
pub(super) fn run_scenario(
    lab: &mut Lab,
    name: &str,
    inject: impl FnOnce(&mut Lab) -> Result<Injected>,
    phases: &Phases,
) -> Result<Outcome> {
    lab.wait_ready(Duration::from_secs(30))?;
    let warm = now_unix_ms();
    std::thread::sleep(phases.baseline);
    let onset = now_unix_ms();
    let mut inj = inject(lab)?;
    for t in &mut inj.truth {
        t.onset_ms = onset;
    }
    let want = inj.truth.iter().filter(|t| t.required).count();
    let fault_end = Instant::now() + phases.fault;
    let mut alg1 = BaselineTracker::default();
    while Instant::now() < fault_end {
        std::thread::sleep(Duration::from_millis(1_000));
        let votes: Vec<BaselineVote> = lab.get("/api/v1/diagnosis/baseline").unwrap_or_default();
        alg1.observe(&votes, want, now_unix_ms());
    }
    let cleared = now_unix_ms();
    for t in &mut inj.truth {
        t.end_ms = Some(cleared);
    }
    let undone = undo(lab, &inj);
    std::thread::sleep(phases.recovery);
    undone?;
    let problems: Vec<Problem> = lab
        .problems()?
        .into_iter()
        .filter(|p| p.first_seen_ms >= warm)
        .collect();
    Ok(outcome(name, inj.truth, &problems, &alg1, warm, onset))
}

fn outcome(
    name: &str,
    truth: Vec<Truth>,
    problems: &[Problem],
    alg1: &BaselineTracker,
    warm: i64,
    onset: i64,
) -> Outcome {
    let secs = |ms: i64| (ms - onset) as f64 / 1000.0;
    Outcome {
        name: name.to_string(),
        score: score::score(&truth, problems, warm),
        baseline: alg1.score(&truth, warm),
        timeline: problems
            .iter()
            .map(|p| Episode {
                problem: format!(
                    "{} ({:?})",
                    score::label(p.component_kind, &p.component),
                    p.kind
                ),
                first_seen_s: secs(p.first_seen_ms),
                last_seen_s: secs(p.last_seen_ms),
                resolved_s: p.resolved_ms.map(secs),
            })
            .collect(),
        resolved_after_recovery: problems
            .iter()
            .filter(|p| p.network)
            .all(|p| p.resolved_ms.is_some()),
        truth,
    }
}

/// One human-readable line per outcome: truth, verdicts, Alg. 1's answers.
pub(super) fn one_line(o: &Outcome) -> String {
    let truth: Vec<String> = o
        .truth
        .iter()
        .map(|t| match &t.direction {
            Some(d) => format!("{} [{} -> {}]", t.component.label(), d.from, d.to),
            None => t.component.label(),
        })
        .collect();
    format!(
        "{:<28} {:<7} truth {:?} found {:?} localize {} s, {} false positive(s); alg1 {:?}",
        o.name,
        if o.score.correct { "OK" } else { "WRONG" },
        truth,
        o.score.found,
        o.score
            .time_to_localize_s
            .map_or("-".into(), |t| format!("{t:.1}")),
        o.score.false_positives,
        o.baseline.found,
    )
}

/// The whole report printed by `rocemesh-lab eval --json`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Report {
    /// The random suite's seed (`None`: the fixed scenarios).
    pub seed: Option<u64>,
    /// One entry per scenario.
    pub scenarios: Vec<Outcome>,
    /// rocemesh's figures.
    pub summary: Summary,
    /// R-Pingmesh Alg. 1 voting on the same runs.
    pub baseline: Summary,
}

impl Report {
    /// Sums `outcomes` up.
    pub(super) fn new(seed: Option<u64>, outcomes: Vec<Outcome>) -> Self {
        Report {
            seed,
            summary: Summary::of(outcomes.iter().map(|o| &o.score)),
            baseline: Summary::of(outcomes.iter().map(|o| &o.baseline)),
            scenarios: outcomes,
        }
    }

    /// Plain-text table of the report.
    pub(super) fn table(&self) -> String {
        let mut out = String::new();
        for o in &self.scenarios {
            out.push_str(&one_line(o));
            out.push('\n');
        }
        if let Some(seed) = self.seed {
            out.push_str(&format!("seed {seed}\n"));
        }
        out.push_str(&format!("rocemesh {}\n", self.summary.line()));
        out.push_str(&format!("alg1     {}\n", self.baseline.line()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::scenarios::{agent_restart_truth, hard, truth};
    use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind, ProblemState};

    fn problem(kind: ProblemKind, ck: ComponentKind, name: &str, at: i64) -> Problem {
        Problem {
            id: 1,
            kind,
            component_kind: ck,
            component: name.into(),
            state: ProblemState::Resolved,
            confidence: 0.9,
            network: kind.is_network(),
            first_seen_ms: at,
            last_seen_ms: at,
            resolved_ms: Some(at + 1),
            evidence: Evidence::default(),
            priority: None,
            affected_tasks: Vec::new(),
        }
    }

    #[test]
    fn a_lab_outcome_is_scored_by_the_shared_scorer() {
        let mut link = hard(truth(
            "link_down",
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t2-s1",
        ));
        link.onset_ms = 1_000;
        let ps = [problem(
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t2-s1",
            3_500,
        )];
        let mut alg1 = BaselineTracker::default();
        let vote = BaselineVote {
            component_kind: ComponentKind::Link,
            component: "t2-s0".into(),
            votes: 3,
        };
        alg1.observe(&[vote], 1, 2_000);
        let o = outcome("x", vec![link], &ps, &alg1, 0, 1_000);
        assert!(o.score.correct && o.resolved_after_recovery);
        assert_eq!(o.score.time_to_localize_s, Some(2.5));
        assert_eq!(o.baseline.top1, Some(false));
        let r = Report::new(Some(9), vec![o]);
        assert_eq!(r.summary.hard_fault_median_time_to_localize_s, Some(2.5));
        assert_eq!(r.baseline.recall, Some(0.0));
        assert!(r.table().contains("seed 9"));
    }

    #[test]
    fn a_restarted_agent_may_be_reported_but_no_rnic_blamed() {
        let mut t = agent_restart_truth("h1");
        t.onset_ms = 1_000;
        let ok = [problem(
            ProblemKind::AgentRestart,
            ComponentKind::Agent,
            "h1",
            2_000,
        )];
        let alg1 = BaselineTracker::default();
        assert!(
            outcome("r", vec![t.clone()], &ok, &alg1, 0, 1_000)
                .score
                .correct
        );
        let blamed = [problem(
            ProblemKind::RnicFault,
            ComponentKind::Rnic,
            "h1/r0",
            2_000,
        )];
        let o = outcome("r", vec![t], &blamed, &alg1, 0, 1_000);
        assert!(!o.score.correct && o.score.false_positives == 1);
        assert_eq!(o.score.top1, None);
    }
}
