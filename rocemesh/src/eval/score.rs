//! Running one scenario through its phases and scoring what the analyzer reported.

use super::scenarios::{Expect, Injected, Scenario, Undo, kind_str};
use crate::lab::Lab;
use anyhow::Result;
use rocemesh_proto::api::{ComponentKind, Problem};
use rocemesh_proto::now_unix_ms;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Lengths of the three phases.
pub struct Phases {
    /// Fault-free time before the injection.
    pub baseline: Duration,
    /// Time the fault lasts.
    pub fault: Duration,
    /// Observation after clearing.
    pub recovery: Duration,
}

/// The scored result of one scenario (the report's `scenarios[]` entries).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub name: String,
    /// Components that should be blamed (`kind:name`).
    pub expected: Vec<String>,
    /// Problems reported from the end of the warm-up on (`kind:name (problem kind)`).
    pub found: Vec<String>,
    /// The same problems with their lifetimes, seconds after the onset (an episode
    /// resolved and raised again shows as two entries: an alert that flapped).
    pub timeline: Vec<Episode>,
    /// Every expected component found, and nothing else blamed.
    pub correct: bool,
    /// The highest-confidence problem during the fault is an expected component.
    pub top1_correct: Option<bool>,
    /// First problem of any kind after the onset, seconds.
    pub time_to_detect_s: Option<f64>,
    /// When the last expected component was first reported, seconds after onset.
    pub time_to_localize_s: Option<f64>,
    /// Problems that match no expected component.
    pub false_positives: usize,
    /// Problems that match an expected component.
    pub true_positives: usize,
    /// Expected components that were found.
    pub expected_found: usize,
    /// Every matching problem was resolved by the end of the recovery phase.
    pub resolved_after_recovery: bool,
    /// What plain R-Pingmesh Alg. 1 voting blamed at the end of the fault (most votes).
    pub baseline_alg1: Vec<String>,
    /// Whether Alg. 1's top answer is an expected component (link/switch scenarios).
    pub baseline_alg1_correct: Option<bool>,
    /// Hard fault (link down, 100 % loss, RNIC down): counted in the ≤ 5 s target.
    pub hard_fault: bool,
}

/// One reported problem's lifetime relative to the fault's onset.
#[derive(Debug, Clone, Serialize)]
pub struct Episode {
    /// `kind:name (problem kind)`, as in [`Outcome::found`].
    pub problem: String,
    /// First seen, seconds after the onset.
    pub first_seen_s: f64,
    /// Last seen, seconds after the onset.
    pub last_seen_s: f64,
    /// Resolved, seconds after the onset (`None`: still active at the end).
    pub resolved_s: Option<f64>,
}

/// One row of the analyzer's Alg. 1 baseline endpoint.
#[derive(Debug, serde::Deserialize)]
struct Voted {
    component_kind: ComponentKind,
    component: String,
}

fn problem_label(p: &Problem) -> String {
    format!("{}:{}", kind_str(p.component_kind), p.component)
}

fn found_label(p: &Problem) -> String {
    format!("{} ({:?})", problem_label(p), p.kind)
}

fn alg1_answer(lab: &Lab) -> Vec<Voted> {
    lab.get("/api/v1/diagnosis/baseline").unwrap_or_default()
}

fn undo(lab: &mut Lab, inj: &Injected) -> Result<()> {
    for u in inj.undo.iter().rev() {
        match u {
            Undo::Fault(id) => lab.fabric.clear(*id)?,
            Undo::StartAgent(h) => lab.start_agent(h)?,
        }
    }
    Ok(())
}

/// Runs `s` on `lab` and scores it.
pub fn run_scenario(lab: &mut Lab, s: &Scenario, phases: &Phases) -> Result<Outcome> {
    lab.wait_ready(Duration::from_secs(30))?;
    let warm = now_unix_ms();
    std::thread::sleep(phases.baseline);
    let onset = now_unix_ms();
    let inj = s.inject(lab)?;
    let fault_end = Instant::now() + phases.fault;
    let mut alg1 = Vec::new();
    while Instant::now() < fault_end {
        std::thread::sleep(Duration::from_millis(1_000));
        let now = alg1_answer(lab);
        if !now.is_empty() {
            alg1 = now;
        }
    }
    let cleared = now_unix_ms();
    undo(lab, &inj)?;
    std::thread::sleep(phases.recovery);
    let problems: Vec<Problem> = lab
        .problems()?
        .into_iter()
        .filter(|p| p.first_seen_ms >= warm)
        .collect();
    Ok(score(s, &inj, &problems, onset, cleared, &alg1))
}

fn score(
    s: &Scenario,
    inj: &Injected,
    problems: &[Problem],
    onset: i64,
    cleared: i64,
    alg1: &[Voted],
) -> Outcome {
    let matches = |p: &Problem, e: &Expect| p.first_seen_ms >= onset && e.matches_problem(p);
    let benign = |p: &Problem| {
        p.first_seen_ms >= onset && !p.kind.is_network() && inj.benign.contains(&p.kind)
    };
    let tp: Vec<&Problem> = problems
        .iter()
        .filter(|p| inj.expected.iter().any(|e| matches(p, e)))
        .collect();
    let fp = problems
        .iter()
        .filter(|p| !inj.expected.iter().any(|e| matches(p, e)) && !benign(p))
        .count();
    let secs = |ms: i64| (ms - onset) as f64 / 1000.0;
    let first_seen_of = |e: &Expect| {
        problems
            .iter()
            .filter(|p| matches(p, e))
            .map(|p| p.first_seen_ms)
            .min()
    };
    let localized: Vec<Option<i64>> = inj.expected.iter().map(first_seen_of).collect();
    let expected_found = localized.iter().filter(|t| t.is_some()).count();
    let time_to_localize_s = (!localized.is_empty() && localized.iter().all(Option::is_some))
        .then(|| secs(localized.iter().flatten().copied().max().unwrap_or(onset)));
    let during: Vec<&Problem> = problems
        .iter()
        .filter(|p| p.first_seen_ms >= onset && p.first_seen_ms <= cleared)
        .collect();
    let top = during
        .iter()
        .filter(|p| !benign(p))
        .max_by(|a, b| a.confidence.total_cmp(&b.confidence));
    let top1_correct = (!inj.expected.is_empty())
        .then(|| top.is_some_and(|p| inj.expected.iter().any(|e| matches(p, e))));
    let structural = inj.expected.iter().any(|e| {
        e.alternatives
            .iter()
            .any(|(k, _)| matches!(k, ComponentKind::Link | ComponentKind::Switch))
    });
    let baseline_alg1_correct = structural.then(|| {
        alg1.first().is_some_and(|v| {
            inj.expected
                .iter()
                .any(|e| e.matches(v.component_kind, &v.component))
        })
    });
    Outcome {
        name: s.name.to_string(),
        expected: inj.expected.iter().map(Expect::label).collect(),
        found: problems.iter().map(found_label).collect(),
        timeline: problems
            .iter()
            .map(|p| Episode {
                problem: found_label(p),
                first_seen_s: secs(p.first_seen_ms),
                last_seen_s: secs(p.last_seen_ms),
                resolved_s: p.resolved_ms.map(secs),
            })
            .collect(),
        correct: expected_found == inj.expected.len() && fp == 0,
        top1_correct,
        time_to_detect_s: problems
            .iter()
            .filter(|p| p.first_seen_ms >= onset)
            .map(|p| p.first_seen_ms)
            .min()
            .map(secs),
        time_to_localize_s,
        false_positives: fp,
        true_positives: tp.len(),
        expected_found,
        resolved_after_recovery: tp.iter().all(|p| p.resolved_ms.is_some()),
        baseline_alg1: alg1
            .iter()
            .take(3)
            .map(|v| format!("{}:{}", kind_str(v.component_kind), v.component))
            .collect(),
        baseline_alg1_correct,
        hard_fault: matches!(s.name, "link_down" | "link_loss_100pct" | "rnic_down"),
    }
}

/// One human-readable line per outcome.
pub fn one_line(o: &Outcome) -> String {
    format!(
        "{:<28} {:<7} expected {:?} found {:?} localize {} s, {} false positive(s)",
        o.name,
        if o.correct { "OK" } else { "WRONG" },
        o.expected,
        o.found,
        o.time_to_localize_s
            .map_or("-".into(), |t| format!("{t:.1}")),
        o.false_positives
    )
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// Summary figures over all scenarios.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Reported problems that were right / all reported problems (1.0 when none reported).
    pub precision: f64,
    /// Expected components found / expected components.
    pub recall: Option<f64>,
    /// Scenarios whose top-1 problem was right / scenarios with a fault to localize.
    pub top1_accuracy: Option<f64>,
    /// Median time to localize over localized scenarios.
    pub median_time_to_localize_s: Option<f64>,
    /// Median time to localize over the hard faults (link down, 100 % loss, RNIC down).
    pub hard_fault_median_time_to_localize_s: Option<f64>,
    /// Scenarios correct / scenarios.
    pub scenarios_correct: String,
}

/// The plain R-Pingmesh Alg. 1 baseline scored on the same runs.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineRow {
    /// Method name.
    pub method: &'static str,
    /// Scenarios with a link/switch fault where Alg. 1's most-voted answer was right.
    pub top1_accuracy: Option<f64>,
    /// rocemesh's own top-1 accuracy on the same scenarios, for comparison.
    pub rocemesh_top1_accuracy: Option<f64>,
}

/// The whole report printed by `rocemesh eval --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// One entry per scenario.
    pub scenarios: Vec<Outcome>,
    /// rocemesh's figures.
    pub summary: Summary,
    /// Alg. 1 on the same data.
    pub baseline: BaselineRow,
}

impl Report {
    /// Computes the summary of `outcomes`.
    pub fn new(outcomes: Vec<Outcome>) -> Self {
        let tp: usize = outcomes.iter().map(|o| o.true_positives).sum();
        let fp: usize = outcomes.iter().map(|o| o.false_positives).sum();
        let expected: usize = outcomes.iter().map(|o| o.expected.len()).sum();
        let found: usize = outcomes.iter().map(|o| o.expected_found).sum();
        let with_fault: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.top1_correct.is_some())
            .collect();
        let structural: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.baseline_alg1_correct.is_some())
            .collect();
        let summary = Summary {
            precision: ratio(tp, tp + fp).unwrap_or(1.0),
            recall: ratio(found, expected),
            top1_accuracy: ratio(
                with_fault
                    .iter()
                    .filter(|o| o.top1_correct == Some(true))
                    .count(),
                with_fault.len(),
            ),
            median_time_to_localize_s: median(
                outcomes
                    .iter()
                    .filter_map(|o| o.time_to_localize_s)
                    .collect(),
            ),
            hard_fault_median_time_to_localize_s: median(
                outcomes
                    .iter()
                    .filter(|o| o.hard_fault)
                    .filter_map(|o| o.time_to_localize_s)
                    .collect(),
            ),
            scenarios_correct: format!(
                "{}/{}",
                outcomes.iter().filter(|o| o.correct).count(),
                outcomes.len()
            ),
        };
        let baseline = BaselineRow {
            method: "r-pingmesh-alg1-voting",
            top1_accuracy: ratio(
                structural
                    .iter()
                    .filter(|o| o.baseline_alg1_correct == Some(true))
                    .count(),
                structural.len(),
            ),
            rocemesh_top1_accuracy: ratio(
                structural
                    .iter()
                    .filter(|o| o.top1_correct == Some(true))
                    .count(),
                structural.len(),
            ),
        };
        Report {
            scenarios: outcomes,
            summary,
            baseline,
        }
    }

    /// Plain-text table of the report.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for o in &self.scenarios {
            out.push_str(&one_line(o));
            out.push('\n');
        }
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
        let s = &self.summary;
        out.push_str(&format!(
            "precision {:.3}  recall {}  top-1 {}  median localize {} s  hard faults {} s  correct {}\n",
            s.precision,
            f(s.recall),
            f(s.top1_accuracy),
            f(s.median_time_to_localize_s),
            f(s.hard_fault_median_time_to_localize_s),
            s.scenarios_correct
        ));
        out.push_str(&format!(
            "baseline {}: top-1 {} (rocemesh on the same scenarios: {})\n",
            self.baseline.method,
            f(self.baseline.top1_accuracy),
            f(self.baseline.rocemesh_top1_accuracy)
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::{Evidence, ProblemKind, ProblemState};

    fn problem(kind: ProblemKind, ck: ComponentKind, name: &str, at: i64, conf: f64) -> Problem {
        Problem {
            id: 1,
            kind,
            component_kind: ck,
            component: name.into(),
            state: ProblemState::Resolved,
            confidence: conf,
            network: kind.is_network(),
            first_seen_ms: at,
            last_seen_ms: at,
            resolved_ms: Some(at + 1),
            evidence: Evidence::default(),
            priority: None,
            affected_tasks: Vec::new(),
        }
    }

    fn scenario(name: &'static str) -> Scenario {
        super::super::scenarios::all()
            .into_iter()
            .find(|s| s.name == name)
            .unwrap()
    }

    fn link(name: &str) -> Expect {
        Expect {
            alternatives: vec![(ComponentKind::Link, name.into())],
            flow: false,
        }
    }

    #[test]
    fn a_dropped_5_tuple_counts_only_as_a_flow_problem_listing_the_truth() {
        let inj = Injected {
            expected: vec![Expect {
                flow: true,
                ..link("t0-s1")
            }],
            ..Injected::default()
        };
        let suspect = |name: &str| rocemesh_proto::api::SuspectComponent {
            component_kind: ComponentKind::Link,
            component: name.into(),
            direction: None,
            confidence: 0.5,
        };
        let flow = |suspects: &[&str]| {
            let mut p = problem(
                ProblemKind::FlowFault,
                ComponentKind::Flow,
                "h0/r0 -> h4/r0 sport 50001",
                3_000,
                0.9,
            );
            p.evidence.candidates = suspects.iter().map(|s| suspect(s)).collect();
            p
        };
        let s = scenario("five_tuple_silent_drop");
        let right = score(&s, &inj, &[flow(&["t0-s1", "t2-s1"])], 1_000, 20_000, &[]);
        assert!(right.correct && right.top1_correct == Some(true));
        let elsewhere = score(&s, &inj, &[flow(&["t0-s0", "t2-s0"])], 1_000, 20_000, &[]);
        assert!(!elsewhere.correct && elsewhere.false_positives == 1);
        let guessed = problem(
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t0-s1",
            3_000,
            0.8,
        );
        let guess = score(&s, &inj, &[guessed], 1_000, 20_000, &[]);
        assert!(!guess.correct && guess.false_positives == 1);
    }

    #[test]
    fn a_right_answer_scores_as_right() {
        let inj = Injected {
            expected: vec![link("t0-s1")],
            ..Injected::default()
        };
        let ps = vec![problem(
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t0-s1",
            3_500,
            0.9,
        )];
        let alg1 = vec![Voted {
            component_kind: ComponentKind::Link,
            component: "t0-s0".into(),
        }];
        let o = score(&scenario("link_down"), &inj, &ps, 1_000, 20_000, &alg1);
        assert!(o.correct && o.top1_correct == Some(true));
        assert_eq!(o.time_to_localize_s, Some(2.5));
        assert_eq!(o.baseline_alg1_correct, Some(false));
        assert!(o.hard_fault);
    }

    #[test]
    fn wrong_blame_and_early_reports_are_false_positives() {
        let inj = Injected {
            expected: vec![link("t0-s1")],
            ..Injected::default()
        };
        let ps = vec![
            problem(
                ProblemKind::LinkFault,
                ComponentKind::Link,
                "t0-s0",
                2_000,
                0.95,
            ),
            problem(
                ProblemKind::LinkFault,
                ComponentKind::Link,
                "t0-s1",
                500,
                0.5,
            ), // before onset
        ];
        let o = score(&scenario("link_down"), &inj, &ps, 1_000, 20_000, &[]);
        assert!(!o.correct);
        assert_eq!(o.false_positives, 2);
        assert_eq!(o.top1_correct, Some(false));
        assert_eq!(o.time_to_localize_s, None);
    }

    #[test]
    fn non_network_scenarios_allow_only_their_benign_kinds() {
        let inj = Injected {
            benign: vec![ProblemKind::AgentRestart],
            ..Injected::default()
        };
        let ok = vec![problem(
            ProblemKind::AgentRestart,
            ComponentKind::Agent,
            "h3",
            2_000,
            1.0,
        )];
        assert!(score(&scenario("agent_restart"), &inj, &ok, 1_000, 5_000, &[]).correct);
        let blamed = vec![problem(
            ProblemKind::RnicFault,
            ComponentKind::Rnic,
            "h3/r0",
            2_000,
            1.0,
        )];
        let o = score(&scenario("agent_restart"), &inj, &blamed, 1_000, 5_000, &[]);
        assert!(!o.correct && o.false_positives == 1 && o.top1_correct.is_none());
    }

    #[test]
    fn summary_counts_across_scenarios() {
        let inj = Injected {
            expected: vec![link("t0-s0"), link("t1-s1")],
            ..Injected::default()
        };
        let half = vec![problem(
            ProblemKind::LinkFault,
            ComponentKind::Link,
            "t0-s0",
            2_000,
            0.9,
        )];
        let a = score(
            &scenario("two_links_different_spines"),
            &inj,
            &half,
            1_000,
            9_000,
            &[],
        );
        let b = score(
            &scenario("fault_free"),
            &Injected::default(),
            &[],
            1_000,
            9_000,
            &[],
        );
        let r = Report::new(vec![a, b]);
        assert_eq!(r.summary.recall, Some(0.5));
        assert_eq!(r.summary.precision, 1.0);
        assert_eq!(r.summary.scenarios_correct, "1/2");
        assert_eq!(r.summary.median_time_to_localize_s, None);
    }
}
