//! The one scorer of every localization evaluation (the simulator's runs and the
//! namespace testbed's `rocemesh-lab eval`): reported problems against one ground-truth type,
//! and R-Pingmesh's Algorithm 1 (plain voting) on the same data. Nothing is assumed.
//!
//! Rules, applied to each truth independently:
//! - a report matches a truth when it names the truth's component and was first seen at
//!   or after the fault's onset; a report naming a component no probe can tell from the
//!   truth's ([`crate::twins`]) matches when it lists the truth's among its candidates;
//! - a flow-level truth (a dropped 5-tuple, a fault only one flow crosses: the probes
//!   cannot single out a component) matches only a [`ProblemKind::FlowFault`] whose
//!   candidates include the true component;
//! - a one-direction link fault is matched by its link; whether the verdict's direction is
//!   right is counted apart, where the verdict gives one;
//! - the non-network side effects a fault legitimately causes (an agent restart after a
//!   host came back) are neither right nor wrong; every other report that matches no
//!   truth is a false positive, also when several faults run at once.

use rocemesh_analyzer::BaselineVote;
pub use rocemesh_proto::api::Component;
use rocemesh_proto::api::{ComponentKind, LinkDirection, Problem, ProblemKind};
use serde::{Deserialize, Serialize};

/// The ground truth of one injected fault: what a perfect diagnosis reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    /// What was injected, as its injector describes it (e.g. the fault's JSON).
    pub fault: String,
    /// The problem kind a perfect diagnosis reports.
    pub kind: ProblemKind,
    /// The component to blame.
    pub component: Component,
    /// Answers as exact as the component: a flow-level truth's components on the flow's
    /// path (a spine's links for a 5-tuple it drops); else the components no probe can
    /// tell from it, right when they list the component among their candidates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub equivalent: Vec<Component>,
    /// A one-direction link fault: the faulty direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<LinkDirection>,
    /// No component can be singled out: only a flow problem listing it is right.
    #[serde(default)]
    pub flow_level: bool,
    /// Must be reported (counts in recall); `false` for faults a report may name but
    /// need not (an agent that restarted within seconds).
    #[serde(default = "yes")]
    pub required: bool,
    /// Non-network problem kinds this fault legitimately causes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<ProblemKind>,
    /// A hard fault (down, 100 % loss): counted in the hard-fault time to localize.
    #[serde(default)]
    pub hard: bool,
    /// When the fault started, ms since the Unix epoch (virtual time in the simulator).
    pub onset_ms: i64,
    /// When it ended, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<i64>,
}

fn yes() -> bool {
    true
}

impl Truth {
    /// The truth that `component` is at fault with a problem of `kind` from `onset_ms`;
    /// the other fields at their plain values (required, undirected, not flow-level).
    pub fn new(fault: String, kind: ProblemKind, component: Component, onset_ms: i64) -> Self {
        Self {
            fault,
            kind,
            component,
            equivalent: Vec::new(),
            direction: None,
            flow_level: false,
            required: true,
            side_effects: Vec::new(),
            hard: false,
            onset_ms,
            end_ms: None,
        }
    }

    fn names(&self, kind: ComponentKind, name: &str) -> bool {
        std::iter::once(&self.component)
            .chain(&self.equivalent)
            .any(|c| c.kind == kind && c.name == name)
    }

    fn matches(&self, v: &Verdict) -> bool {
        v.first_seen_ms >= self.onset_ms
            && if self.flow_level {
                v.kind == Some(ProblemKind::FlowFault)
                    && v.candidates
                        .iter()
                        .any(|(c, _)| self.names(c.kind, &c.name))
            } else {
                v.component == self.component
                    || self.names(v.component.kind, &v.component.name)
                        && v.candidates.iter().any(|(c, _)| *c == self.component)
            }
    }

    /// The direction `v` gives the truth's component: its own when it names it, else
    /// that of its candidate naming it.
    fn direction_in(&self, v: &Verdict) -> Option<LinkDirection> {
        if v.component == self.component {
            return v.direction.clone();
        }
        v.candidates
            .iter()
            .find(|(c, _)| *c == self.component)
            .and_then(|(_, d)| d.clone())
    }

    fn tolerates(&self, v: &Verdict) -> bool {
        v.first_seen_ms >= self.onset_ms
            && v.kind
                .is_some_and(|k| !k.is_network() && self.side_effects.contains(&k))
    }
}

/// One reported verdict, whoever reported it (the analyzer or Algorithm 1).
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Problem kind (`None`: Algorithm 1, which names components only).
    pub kind: Option<ProblemKind>,
    /// The component blamed (a flow problem: the flow).
    pub component: Component,
    /// A flow problem's candidate components, or a problem's component and those the
    /// probes cannot tell from it (its own first), each with the direction it names.
    pub candidates: Vec<(Component, Option<LinkDirection>)>,
    /// A link problem's faulty direction, when it names one.
    pub direction: Option<LinkDirection>,
    /// First reported, ms.
    pub first_seen_ms: i64,
    /// Confidence (top-1 is the most confident verdict).
    pub confidence: f64,
}

impl Verdict {
    /// The verdict of an analyzer problem.
    pub fn of(p: &Problem) -> Self {
        Self {
            kind: Some(p.kind),
            component: Component::new(p.component_kind, &p.component),
            candidates: p
                .evidence
                .candidates
                .iter()
                .map(|c| {
                    (
                        Component::new(c.component_kind, &c.component),
                        c.direction.clone(),
                    )
                })
                .collect(),
            direction: p.evidence.direction.clone(),
            first_seen_ms: p.first_seen_ms,
            confidence: p.confidence,
        }
    }

    fn label(&self) -> String {
        match self.kind {
            Some(k) => format!("{} ({k:?})", self.component.label()),
            None => self.component.label(),
        }
    }
}

/// How one truth fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthOutcome {
    /// The truth's component, `kind:name`.
    pub component: String,
    /// Must be found.
    pub required: bool,
    /// A hard fault.
    pub hard: bool,
    /// First matching report, seconds after the onset (`None`: never reported).
    pub localized_s: Option<f64>,
    /// A one-direction fault whose matching verdict named a direction: was it right.
    pub direction_right: Option<bool>,
    /// The direction the first matching verdict that names one named (any truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<LinkDirection>,
}

/// The scored outcome of one run (one scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Faults that must be found.
    pub truths: usize,
    /// Reports that match a truth.
    pub true_positives: usize,
    /// Reports that match none (side effects aside).
    pub false_positives: usize,
    /// `tp / (tp + fp)`; `None` when nothing was reported.
    pub precision: Option<f64>,
    /// Required truths found / required truths; `None` without any.
    pub recall: Option<f64>,
    /// The most confident report names a truth; `None` without required truths.
    pub top1: Option<bool>,
    /// When the last required truth was first reported, seconds after its onset.
    pub time_to_localize_s: Option<f64>,
    /// Every required truth found and no false positive.
    pub correct: bool,
    /// What was reported, `kind:name (problem kind)`.
    pub found: Vec<String>,
    /// Required truths never reported, `kind:name`.
    pub missed: Vec<String>,
    /// Each truth's outcome.
    pub outcomes: Vec<TruthOutcome>,
}

impl Score {
    /// One line: precision, recall, top-1 and time to localize (`-` where undefined).
    pub fn summary(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
        format!(
            "precision {} recall {} top-1 {} localize {} s",
            f(self.precision),
            f(self.recall),
            self.top1.map_or("-", |t| if t { "yes" } else { "no" }),
            f(self.time_to_localize_s)
        )
    }
}

/// `kind:name` of a component.
pub fn label(kind: ComponentKind, name: &str) -> String {
    format!("{}:{name}", kind.as_str())
}

/// Scores `verdicts` against `truth` (see the module doc for the rules).
pub fn score_verdicts(truth: &[Truth], verdicts: &[Verdict]) -> Score {
    let counted: Vec<&Verdict> = verdicts
        .iter()
        .filter(|v| truth.iter().any(|t| t.matches(v)) || !truth.iter().any(|t| t.tolerates(v)))
        .collect();
    let tp = counted
        .iter()
        .filter(|v| truth.iter().any(|t| t.matches(v)))
        .count();
    let fp = counted.len() - tp;
    let outcomes: Vec<TruthOutcome> = truth
        .iter()
        .map(|t| {
            let hits: Vec<&&Verdict> = counted.iter().filter(|v| t.matches(v)).collect();
            let named = hits.iter().find_map(|v| t.direction_in(v));
            let direction_right = t
                .direction
                .as_ref()
                .and_then(|want| named.as_ref().map(|got| got == want));
            TruthOutcome {
                component: t.component.label(),
                required: t.required,
                hard: t.hard,
                localized_s: hits
                    .iter()
                    .map(|v| v.first_seen_ms - t.onset_ms)
                    .min()
                    .map(|ms| ms as f64 / 1e3),
                direction_right,
                direction: named,
            }
        })
        .collect();
    let required: Vec<&TruthOutcome> = outcomes.iter().filter(|o| o.required).collect();
    let found = required.iter().filter(|o| o.localized_s.is_some()).count();
    let onset = truth
        .iter()
        .filter(|t| t.required)
        .map(|t| t.onset_ms)
        .min();
    let top = counted
        .iter()
        .filter(|v| onset.is_some_and(|o| v.first_seen_ms >= o))
        .max_by(|a, b| a.confidence.total_cmp(&b.confidence));
    let any_required = !required.is_empty();
    Score {
        truths: required.len(),
        true_positives: tp,
        false_positives: fp,
        precision: (!counted.is_empty()).then(|| tp as f64 / counted.len() as f64),
        recall: any_required.then(|| found as f64 / required.len() as f64),
        top1: any_required.then(|| top.is_some_and(|v| truth.iter().any(|t| t.matches(v)))),
        time_to_localize_s: (any_required && found == required.len()).then(|| {
            required
                .iter()
                .filter_map(|o| o.localized_s)
                .fold(0.0, f64::max)
        }),
        correct: found == required.len() && fp == 0,
        found: counted.iter().map(|v| v.label()).collect(),
        missed: required
            .iter()
            .filter(|o| o.localized_s.is_none())
            .map(|o| o.component.clone())
            .collect(),
        outcomes,
    }
}

/// Scores the analyzer's problems first seen at or after `since_ms` (the end of the
/// warm-up) against `truth`.
pub fn score(truth: &[Truth], problems: &[Problem], since_ms: i64) -> Score {
    let verdicts: Vec<Verdict> = problems
        .iter()
        .filter(|p| p.first_seen_ms >= since_ms)
        .map(Verdict::of)
        .collect();
    score_verdicts(truth, &verdicts)
}

/// R-Pingmesh Algorithm 1 followed tick by tick: its answer at a tick is the `m` most
/// voted components (m = number of truths, at least one); a component counts as
/// reported from the first tick it is in the answer. Its top-1 is the most voted
/// component of the latest tick with votes.
#[derive(Debug, Default)]
pub struct BaselineTracker {
    /// (component, first tick it was answered, best rank seen).
    answered: Vec<(Component, i64, usize)>,
    /// The most voted component of the latest tick with votes, and that tick.
    top: Option<(Component, i64)>,
}

impl BaselineTracker {
    /// Takes the votes of the tick at `now_ms` when `want` components are sought.
    pub fn observe(&mut self, votes: &[BaselineVote], want: usize, now_ms: i64) {
        if let Some(v) = votes.first() {
            self.top = Some((Component::new(v.component_kind, &v.component), now_ms));
        }
        for (rank, v) in votes.iter().take(want.max(1)).enumerate() {
            let c = Component::new(v.component_kind, &v.component);
            match self.answered.iter_mut().find(|a| a.0 == c) {
                Some(a) => a.2 = a.2.min(rank),
                None => self.answered.push((c, now_ms, rank)),
            }
        }
    }

    /// Scores what Algorithm 1 answered from `since_ms` on against `truth`.
    pub fn score(&self, truth: &[Truth], since_ms: i64) -> Score {
        let verdicts: Vec<Verdict> = self
            .answered
            .iter()
            .filter(|a| a.1 >= since_ms)
            .map(|(c, first, rank)| Verdict {
                kind: None,
                component: c.clone(),
                candidates: Vec::new(),
                direction: None,
                first_seen_ms: *first,
                confidence: 1.0 / (1.0 + *rank as f64),
            })
            .collect();
        let mut s = score_verdicts(truth, &verdicts);
        s.top1 = s.top1.map(|_| {
            self.top.as_ref().is_some_and(|(c, at)| {
                let v = Verdict {
                    kind: None,
                    component: c.clone(),
                    candidates: Vec::new(),
                    direction: None,
                    first_seen_ms: *at,
                    confidence: 1.0,
                };
                truth.iter().any(|t| t.matches(&v))
            })
        });
        s
    }
}

/// The median of `v`; `None` when empty.
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
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

/// Figures over many scored runs: what a suite reports and CI checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Runs scored.
    pub scenarios: usize,
    /// Runs with every required truth found and no false positive.
    pub correct: usize,
    /// Matching reports / all counted reports (1.0 when nothing was reported).
    pub precision: f64,
    /// Required truths found / required truths.
    pub recall: Option<f64>,
    /// Runs whose most confident report named a truth / runs with a required truth.
    pub top1_accuracy: Option<f64>,
    /// Median over found required truths of the time to their first report, s.
    pub median_time_to_localize_s: Option<f64>,
    /// The same over hard faults.
    pub hard_fault_median_time_to_localize_s: Option<f64>,
    /// One-direction faults whose verdict named the right direction / those naming one.
    pub direction_accuracy: Option<f64>,
    /// One-direction faults whose verdict named a direction.
    pub directions_checked: usize,
}

impl Summary {
    /// Sums `scores` up.
    pub fn of<'a>(scores: impl IntoIterator<Item = &'a Score>) -> Self {
        let scores: Vec<&Score> = scores.into_iter().collect();
        let (tp, fp) = scores.iter().fold((0, 0), |(tp, fp), s| {
            (tp + s.true_positives, fp + s.false_positives)
        });
        let required: Vec<&TruthOutcome> = scores
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter(|o| o.required)
            .collect();
        let found: Vec<&TruthOutcome> = required
            .iter()
            .copied()
            .filter(|o| o.localized_s.is_some())
            .collect();
        let with_truth: Vec<bool> = scores.iter().filter_map(|s| s.top1).collect();
        let directions: Vec<bool> = scores
            .iter()
            .flat_map(|s| &s.outcomes)
            .filter_map(|o| o.direction_right)
            .collect();
        Self {
            scenarios: scores.len(),
            correct: scores.iter().filter(|s| s.correct).count(),
            precision: ratio(tp, tp + fp).unwrap_or(1.0),
            recall: ratio(found.len(), required.len()),
            top1_accuracy: ratio(with_truth.iter().filter(|&&t| t).count(), with_truth.len()),
            median_time_to_localize_s: median(found.iter().filter_map(|o| o.localized_s).collect()),
            hard_fault_median_time_to_localize_s: median(
                found
                    .iter()
                    .filter(|o| o.hard)
                    .filter_map(|o| o.localized_s)
                    .collect(),
            ),
            direction_accuracy: ratio(directions.iter().filter(|&&d| d).count(), directions.len()),
            directions_checked: directions.len(),
        }
    }

    /// One line of figures (`-` where undefined).
    pub fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
        format!(
            "precision {:.3} recall {} top-1 {} median localize {} s hard faults {} s direction {} ({} checked) correct {}/{}",
            self.precision,
            f(self.recall),
            f(self.top1_accuracy),
            f(self.median_time_to_localize_s),
            f(self.hard_fault_median_time_to_localize_s),
            f(self.direction_accuracy),
            self.directions_checked,
            self.correct,
            self.scenarios
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::{Evidence, ProblemState, SuspectComponent};

    fn truth(link: &str, onset: i64) -> Truth {
        let mut t = Truth::new(
            format!("link_down {link}"),
            ProblemKind::LinkFault,
            Component::new(ComponentKind::Link, link),
            onset,
        );
        t.hard = true;
        t
    }

    fn problem(kind: ComponentKind, name: &str, first: i64, confidence: f64) -> Problem {
        Problem {
            id: 1,
            kind: if kind == ComponentKind::Flow {
                ProblemKind::FlowFault
            } else {
                ProblemKind::LinkFault
            },
            component_kind: kind,
            component: name.into(),
            state: ProblemState::Active,
            confidence,
            network: true,
            first_seen_ms: first,
            last_seen_ms: first,
            resolved_ms: None,
            evidence: Evidence::default(),
            priority: None,
            affected_tasks: Vec::new(),
        }
    }

    fn direction(from: &str, to: &str) -> LinkDirection {
        LinkDirection {
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn exact_matches_score_one_and_wrong_truth_scores_less() {
        let problems = [problem(ComponentKind::Link, "t0-s1", 13_000, 0.9)];
        let s = score(&[truth("t0-s1", 10_000)], &problems, 5_000);
        assert_eq!(
            (s.precision, s.recall, s.top1, s.correct),
            (Some(1.0), Some(1.0), Some(true), true)
        );
        assert_eq!(s.time_to_localize_s, Some(3.0));
        assert_eq!(
            s.summary(),
            "precision 1.00 recall 1.00 top-1 yes localize 3.00 s"
        );
        // Handed the wrong truth, the same problems score zero.
        let s = score(&[truth("t1-s1", 10_000)], &problems, 5_000);
        assert_eq!(
            (s.precision, s.recall, s.top1, s.correct),
            (Some(0.0), Some(0.0), Some(false), false)
        );
        assert_eq!(s.missed, ["link:t1-s1"]);
        // A report before the onset is not a detection; one before the warm-up is ignored.
        let s = score(&[truth("t0-s1", 20_000)], &problems, 5_000);
        assert_eq!((s.recall, s.false_positives), (Some(0.0), 1));
        assert_eq!(score(&[], &problems, 20_000).precision, None);
        // Same name, other kind: no match.
        let rnic = [problem(ComponentKind::Rnic, "t0-s1", 13_000, 0.9)];
        assert_eq!(score(&[truth("t0-s1", 10_000)], &rnic, 0).true_positives, 0);
    }

    #[test]
    fn concurrent_truths_are_matched_one_by_one_and_extra_verdicts_are_false() {
        let truths = [truth("t0-s0", 10_000), truth("t2-s1", 10_000)];
        let ps = [
            problem(ComponentKind::Link, "t2-s1", 12_000, 0.9),
            problem(ComponentKind::Switch, "t2", 12_500, 0.95),
        ];
        let s = score(&truths, &ps, 0);
        assert_eq!((s.true_positives, s.false_positives), (1, 1));
        assert_eq!(
            (s.recall, s.top1, s.correct),
            (Some(0.5), Some(false), false)
        );
        assert_eq!(s.missed, ["link:t0-s0"]);
        assert_eq!(s.time_to_localize_s, None, "one truth never localized");
    }

    #[test]
    fn flow_level_truth_counts_only_as_a_flow_problem_listing_it() {
        let mut t = Truth::new(
            "flow_drop".into(),
            ProblemKind::FlowFault,
            Component::new(ComponentKind::Switch, "t1"),
            10_000,
        );
        t.flow_level = true;
        let guessed = [problem(ComponentKind::Switch, "t1", 11_000, 0.8)];
        let s = score(std::slice::from_ref(&t), &guessed, 0);
        assert_eq!(
            (s.true_positives, s.false_positives),
            (0, 1),
            "a guess, not a verdict"
        );
        let mut flow = problem(
            ComponentKind::Flow,
            "h0/r0 -> h5/r0 sport 50001",
            11_000,
            0.8,
        );
        let suspect = |kind, name: &str| SuspectComponent {
            component_kind: kind,
            component: name.into(),
            direction: None,
            confidence: 0.3,
        };
        flow.evidence.candidates = vec![
            suspect(ComponentKind::Link, "t0-s1"),
            suspect(ComponentKind::Switch, "t2"),
        ];
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&flow), 0);
        assert_eq!(
            (s.true_positives, s.false_positives),
            (0, 1),
            "t1 not a candidate"
        );
        flow.evidence
            .candidates
            .push(suspect(ComponentKind::Switch, "t1"));
        let s = score(&[t], &[flow], 0);
        assert!(s.correct && s.top1 == Some(true), "{s:?}");
    }

    #[test]
    fn direction_is_matched_by_link_and_checked_apart() {
        let mut t = truth("t2-s0", 10_000);
        t.direction = Some(direction("s0", "t2"));
        let mut p = problem(ComponentKind::Link, "t2-s0", 12_000, 0.9);
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&p), 0);
        assert!(s.correct);
        assert_eq!(s.outcomes[0].direction_right, None, "no direction given");
        p.evidence.direction = Some(direction("t2", "s0"));
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&p), 0);
        assert!(s.correct, "the link is right");
        assert_eq!(s.outcomes[0].direction_right, Some(false));
        p.evidence.direction = Some(direction("s0", "t2"));
        let right = score(&[t], &[p], 0);
        let sum = Summary::of([&s, &right]);
        assert_eq!(
            (sum.direction_accuracy, sum.directions_checked),
            (Some(0.5), 2)
        );
    }

    #[test]
    fn a_twin_counts_only_when_it_lists_the_truth_and_its_direction_is_the_truths() {
        // Into s0 on t1-s0, in a 2-ToR fabric: the same probes as s0 into t0 on t0-s0.
        let mut t = truth("t1-s0", 10_000);
        t.direction = Some(direction("t1", "s0"));
        t.equivalent = vec![Component::new(ComponentKind::Link, "t0-s0")];
        let mut p = problem(ComponentKind::Link, "t0-s0", 12_000, 0.9);
        p.evidence.direction = Some(direction("s0", "t0"));
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&p), 0);
        assert_eq!((s.true_positives, s.false_positives), (0, 1), "a guess");
        let suspect = |name: &str, d: LinkDirection| SuspectComponent {
            component_kind: ComponentKind::Link,
            component: name.into(),
            direction: Some(d),
            confidence: 0.5,
        };
        p.evidence.candidates = vec![
            suspect("t0-s0", direction("s0", "t0")),
            suspect("t1-s0", direction("t1", "s0")),
        ];
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&p), 0);
        assert!(s.correct, "{s:?}");
        assert_eq!(s.outcomes[0].direction_right, Some(true), "the twin's own");
        // Listing a component the truth has no twin in is no match.
        let other = truth("t1-s1", 10_000);
        p.evidence
            .candidates
            .push(suspect("t1-s1", direction("t1", "s1")));
        assert_eq!(score(&[other], &[p], 0).true_positives, 0);
    }

    #[test]
    fn side_effects_are_tolerated_and_optional_truths_need_no_report() {
        let mut t = Truth::new(
            "agent_restart h3".into(),
            ProblemKind::AgentRestart,
            Component::new(ComponentKind::Agent, "h3"),
            1_000,
        );
        t.required = false;
        t.side_effects = vec![ProblemKind::HostDown];
        let mut down = problem(ComponentKind::Host, "h3", 2_000, 1.0);
        down.kind = ProblemKind::HostDown;
        down.network = false;
        let s = score(std::slice::from_ref(&t), std::slice::from_ref(&down), 0);
        assert_eq!((s.false_positives, s.recall, s.top1), (0, None, None));
        assert!(s.correct);
        let mut rnic = problem(ComponentKind::Rnic, "h3/r0", 2_000, 1.0);
        rnic.kind = ProblemKind::RnicFault;
        let s = score(&[t], &[down, rnic], 0);
        assert_eq!(s.false_positives, 1);
        assert!(!s.correct);
    }

    #[test]
    fn summary_counts_across_runs() {
        let two = [truth("t0-s0", 1_000), truth("t1-s1", 1_000)];
        let half = score(
            &two,
            &[problem(ComponentKind::Link, "t0-s0", 2_000, 0.9)],
            0,
        );
        let clean = score(&[], &[], 0);
        let fast = score(
            &[truth("t3-s0", 1_000)],
            &[problem(ComponentKind::Link, "t3-s0", 4_000, 0.9)],
            0,
        );
        let r = Summary::of([&half, &clean, &fast]);
        assert_eq!(r.recall, Some(2.0 / 3.0));
        assert_eq!(r.precision, 1.0);
        assert_eq!((r.correct, r.scenarios), (2, 3));
        assert_eq!(r.top1_accuracy, Some(1.0));
        assert_eq!(r.hard_fault_median_time_to_localize_s, Some(2.0));
    }

    #[test]
    fn baseline_answers_are_tracked_per_tick() {
        let vote = |name: &str| BaselineVote {
            component_kind: ComponentKind::Link,
            component: name.into(),
            votes: 5,
        };
        let mut b = BaselineTracker::default();
        b.observe(&[vote("t1-s0"), vote("t0-s1")], 1, 11_000);
        b.observe(&[vote("t0-s1"), vote("t1-s0")], 1, 12_000);
        let s = b.score(&[truth("t0-s1", 10_000)], 0);
        assert_eq!((s.true_positives, s.false_positives), (1, 1));
        assert_eq!(s.time_to_localize_s, Some(2.0));
        assert_eq!(s.top1, Some(true), "its latest top vote");
        b.observe(&[vote("t1-s0")], 1, 13_000);
        assert_eq!(b.score(&[truth("t0-s1", 10_000)], 0).top1, Some(false));
    }
}
