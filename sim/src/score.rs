//! Scoring against the exported ground truth: precision, recall, top-1 localization and
//! time to localize of the analyzer's problems, and the same figures for R-Pingmesh's
//! Algorithm 1 (plain voting) on the same data. Nothing is assumed: a problem counts only
//! if it names a truth's component exactly, after that fault's onset.

use crate::faults::{Component, Truth};
use rocemesh_analyzer::BaselineVote;
use rocemesh_proto::api::{ComponentKind, Problem};
use serde::Serialize;

/// The scored outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    /// Faults injected.
    pub truths: usize,
    /// Reported components that match a truth.
    pub true_positives: usize,
    /// Reported components that match none.
    pub false_positives: usize,
    /// `tp / (tp + fp)`; `None` when nothing was reported.
    pub precision: Option<f64>,
    /// Truths found / truths; `None` without truths.
    pub recall: Option<f64>,
    /// The most confident report during the faults names a truth; `None` without truths.
    pub top1: Option<bool>,
    /// When the last truth was first reported, seconds after its onset.
    pub time_to_localize_s: Option<f64>,
    /// What was reported, `kind:name`.
    pub found: Vec<String>,
    /// Truths never reported, `kind:name`.
    pub missed: Vec<String>,
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
    let k = serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!("{k}:{name}")
}

fn names(t: &Truth, kind: ComponentKind, name: &str) -> bool {
    t.component
        == Component {
            kind,
            name: name.to_string(),
        }
}

/// One report: what it blames, when it was first seen, how confident it is.
struct Report<'a> {
    kind: ComponentKind,
    name: &'a str,
    first_seen_ms: i64,
    confidence: f64,
}

fn score_reports(truth: &[Truth], reports: &[Report]) -> Score {
    let matches = |r: &Report, t: &Truth| names(t, r.kind, r.name) && r.first_seen_ms >= t.onset_ms;
    let tp = reports
        .iter()
        .filter(|r| truth.iter().any(|t| matches(r, t)))
        .count();
    let fp = reports.len() - tp;
    let first: Vec<Option<i64>> = truth
        .iter()
        .map(|t| {
            reports
                .iter()
                .filter(|r| matches(r, t))
                .map(|r| r.first_seen_ms - t.onset_ms)
                .min()
        })
        .collect();
    let found_truths = first.iter().flatten().count();
    let onset = truth.iter().map(|t| t.onset_ms).min();
    let top = reports
        .iter()
        .filter(|r| onset.is_some_and(|o| r.first_seen_ms >= o))
        .max_by(|a, b| a.confidence.total_cmp(&b.confidence));
    Score {
        truths: truth.len(),
        true_positives: tp,
        false_positives: fp,
        precision: (!reports.is_empty()).then(|| tp as f64 / reports.len() as f64),
        recall: (!truth.is_empty()).then(|| found_truths as f64 / truth.len() as f64),
        top1: (!truth.is_empty()).then(|| top.is_some_and(|r| truth.iter().any(|t| matches(r, t)))),
        time_to_localize_s: (!truth.is_empty() && found_truths == truth.len())
            .then(|| first.iter().flatten().copied().max().unwrap_or(0) as f64 / 1e3),
        found: reports.iter().map(|r| label(r.kind, r.name)).collect(),
        missed: truth
            .iter()
            .zip(&first)
            .filter(|(_, f)| f.is_none())
            .map(|(t, _)| label(t.component.kind, &t.component.name))
            .collect(),
    }
}

/// Scores the analyzer's problems first seen at or after `since_ms` (the end of the
/// warm-up) against `truth`.
pub fn score(truth: &[Truth], problems: &[Problem], since_ms: i64) -> Score {
    let reports: Vec<Report> = problems
        .iter()
        .filter(|p| p.first_seen_ms >= since_ms)
        .map(|p| Report {
            kind: p.component_kind,
            name: &p.component,
            first_seen_ms: p.first_seen_ms,
            confidence: p.confidence,
        })
        .collect();
    score_reports(truth, &reports)
}

/// R-Pingmesh Algorithm 1 followed tick by tick: its answer at a tick is the `m` most
/// voted components (m = number of truths, at least one); a component counts as
/// reported from the first tick it is in the answer. Its top-1 is the most voted
/// component of the latest tick with votes.
#[derive(Debug, Default)]
pub struct BaselineTracker {
    /// (component, first tick it was answered, best rank seen).
    answered: Vec<(ComponentKind, String, i64, usize)>,
    /// The most voted component of the latest tick with votes, and that tick.
    top: Option<(ComponentKind, String, i64)>,
}

impl BaselineTracker {
    /// Takes the votes of the tick at `now_ms` when `want` components are sought.
    pub fn observe(&mut self, votes: &[BaselineVote], want: usize, now_ms: i64) {
        if let Some(v) = votes.first() {
            self.top = Some((v.component_kind, v.component.clone(), now_ms));
        }
        for (rank, v) in votes.iter().take(want.max(1)).enumerate() {
            match self
                .answered
                .iter_mut()
                .find(|(k, n, _, _)| *k == v.component_kind && *n == v.component)
            {
                Some(a) => a.3 = a.3.min(rank),
                None => self
                    .answered
                    .push((v.component_kind, v.component.clone(), now_ms, rank)),
            }
        }
    }

    /// Scores what Algorithm 1 answered from `since_ms` on against `truth`.
    pub fn score(&self, truth: &[Truth], since_ms: i64) -> Score {
        let reports: Vec<Report> = self
            .answered
            .iter()
            .filter(|a| a.2 >= since_ms)
            .map(|(kind, name, first, rank)| Report {
                kind: *kind,
                name,
                first_seen_ms: *first,
                confidence: 1.0 / (1.0 + *rank as f64),
            })
            .collect();
        let mut s = score_reports(truth, &reports);
        s.top1 = (!truth.is_empty()).then(|| {
            self.top.as_ref().is_some_and(|(k, n, at)| {
                truth.iter().any(|t| names(t, *k, n) && *at >= t.onset_ms)
            })
        });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultSpec;
    use rocemesh_proto::api::{Evidence, ProblemKind, ProblemState};

    fn truth(link: &str, onset: i64) -> Truth {
        Truth {
            fault: FaultSpec::LinkDown { link: link.into() },
            kind: ProblemKind::LinkFault,
            component: Component {
                kind: ComponentKind::Link,
                name: link.into(),
            },
            onset_ms: onset,
            end_ms: None,
        }
    }

    fn problem(kind: ComponentKind, name: &str, first: i64, confidence: f64) -> Problem {
        Problem {
            id: 1,
            kind: ProblemKind::LinkFault,
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

    #[test]
    fn exact_matches_score_one_and_wrong_truth_scores_less() {
        let problems = [problem(ComponentKind::Link, "t0-s1", 13_000, 0.9)];
        let s = score(&[truth("t0-s1", 10_000)], &problems, 5_000);
        assert_eq!(
            (s.precision, s.recall, s.top1),
            (Some(1.0), Some(1.0), Some(true))
        );
        assert_eq!(s.time_to_localize_s, Some(3.0));
        assert_eq!(
            s.summary(),
            "precision 1.00 recall 1.00 top-1 yes localize 3.00 s"
        );
        // Handed the wrong truth, the same problems score zero.
        let s = score(&[truth("t1-s1", 10_000)], &problems, 5_000);
        assert_eq!(
            (s.precision, s.recall, s.top1),
            (Some(0.0), Some(0.0), Some(false))
        );
        assert_eq!(s.missed, ["link:t1-s1"]);
        // A report before the onset is not a detection; one before the warm-up is ignored.
        let s = score(&[truth("t0-s1", 20_000)], &problems, 5_000);
        assert_eq!(s.recall, Some(0.0));
        assert_eq!(score(&[], &problems, 20_000).precision, None);
        // Same name, other kind: no match.
        let rnic = [problem(ComponentKind::Rnic, "t0-s1", 13_000, 0.9)];
        assert_eq!(score(&[truth("t0-s1", 10_000)], &rnic, 0).true_positives, 0);
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
