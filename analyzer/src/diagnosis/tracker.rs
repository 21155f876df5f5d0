//! Problem lifecycle: one active problem per (kind, component), updated while
//! the symptom persists, resolved once it has been absent for a while; marks
//! what changed enough to be written to the database.

use super::engine::Candidate;
use super::policy;
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind, ProblemState};
use std::collections::{HashMap, HashSet, VecDeque};

/// Resolved problems kept in memory for in-process queries.
const KEEP_RESOLVED: usize = 1_000;
/// An active problem is rewritten at least this often (fresh `last_seen_ms` after a restart).
const REWRITE_EVERY_MS: i64 = 10_000;
/// A confidence change this large is written at once.
const CONFIDENCE_STEP: f64 = 0.1;

type Key = (ProblemKind, ComponentKind, String);

#[derive(Debug, Clone)]
struct Tracked {
    serial: u64,
    problem: Problem,
    saved: bool,
    saved_at_ms: i64,
    saved_confidence: f64,
    /// Last evidence, or when it was restored from the database (whichever is later).
    evidence_ms: i64,
}

/// Active and recently resolved problems.
#[derive(Debug)]
pub(crate) struct Tracker {
    active: HashMap<Key, Tracked>,
    resolved: VecDeque<Tracked>,
    resolve_after_ms: i64,
    next_serial: u64,
}

fn key(p: &Problem) -> Key {
    (p.kind, p.component_kind, p.component.clone())
}

impl Tracker {
    /// An empty tracker.
    pub(crate) fn new(resolve_after_ms: u64) -> Self {
        Self {
            active: HashMap::new(),
            resolved: VecDeque::new(),
            resolve_after_ms: resolve_after_ms as i64,
            next_serial: 0,
        }
    }

    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    /// Takes over problems stored active before a restart or by another instance. Their
    /// resolution clock starts `hold_ms` after `now_ms` at the earliest (a finding before
    /// then does not restart it sooner): the evidence that kept them active
    /// is missing, not gone, until the agents' uploads and traces have come in again
    /// (right after a restart every path is untraced, and tomography will not guess).
    pub(crate) fn restore(&mut self, problems: Vec<Problem>, now_ms: i64, hold_ms: i64) {
        for p in problems {
            let serial = self.serial();
            let t = Tracked {
                serial,
                saved: true,
                saved_at_ms: now_ms,
                saved_confidence: p.confidence,
                evidence_ms: (now_ms + hold_ms).max(p.last_seen_ms),
                problem: p,
            };
            self.active.insert(key(&t.problem), t);
        }
    }

    /// Scale-out: forgets the active problems outside this instance's scope (another
    /// instance tracks them now; they stay active in the database) and takes over the
    /// `stored` active ones inside it that it does not track yet. A taken-over problem is
    /// not resolved for `hold_ms` plus the usual resolution time ([`Self::restore`]), even
    /// when found meanwhile: the agents of the dead instance's shards need that long to
    /// move here and have their paths traced again.
    pub(crate) fn rescope(
        &mut self,
        keep: impl Fn(&Problem) -> bool,
        stored: Vec<Problem>,
        now_ms: i64,
        hold_ms: i64,
    ) {
        self.active.retain(|_, t| keep(&t.problem));
        let fresh: Vec<Problem> = stored
            .into_iter()
            .filter(|p| keep(p) && !self.active.contains_key(&key(p)))
            .collect();
        self.restore(fresh, now_ms, hold_ms);
    }

    /// Names of the links with an active link-fault problem.
    pub(crate) fn open_links(&self) -> Vec<String> {
        self.active
            .keys()
            .filter(|(kind, ck, _)| *kind == ProblemKind::LinkFault && *ck == ComponentKind::Link)
            .map(|(_, _, name)| name.clone())
            .collect()
    }

    /// Names of the switches with an active switch-fault problem.
    pub(crate) fn open_switches(&self) -> Vec<String> {
        self.active
            .keys()
            .filter(|(kind, ck, _)| {
                *kind == ProblemKind::SwitchFault && *ck == ComponentKind::Switch
            })
            .map(|(_, _, name)| name.clone())
            .collect()
    }

    /// Hosts with an active problem that is not the network's (host down, agent restart,
    /// host noise): their RNICs' failures are theirs.
    pub(crate) fn non_network_hosts(&self) -> HashSet<String> {
        self.active
            .keys()
            .filter(|(kind, ck, _)| {
                !kind.is_network() && matches!(ck, ComponentKind::Host | ComponentKind::Agent)
            })
            .map(|(_, _, name)| name.clone())
            .collect()
    }

    /// Applies one tick's findings at `now_ms`.
    pub(crate) fn update(&mut self, now_ms: i64, candidates: Vec<Candidate>) {
        let mut seen = Vec::with_capacity(candidates.len());
        for c in candidates {
            let k: Key = (c.kind, c.component_kind, c.component.clone());
            seen.push(k.clone());
            if let Some(t) = self.active.get_mut(&k) {
                let p = &mut t.problem;
                p.confidence = c.confidence;
                p.evidence = c.evidence;
                p.last_seen_ms = now_ms;
                // A restored problem's hold stands: one early finding, while the agents
                // are still moving here, does not end it.
                t.evidence_ms = t.evidence_ms.max(now_ms);
                if (c.confidence - t.saved_confidence).abs() >= CONFIDENCE_STEP
                    || now_ms - t.saved_at_ms >= REWRITE_EVERY_MS
                {
                    t.saved = false;
                }
                continue;
            }
            let serial = self.serial();
            let problem = Problem {
                id: 0,
                kind: c.kind,
                component_kind: c.component_kind,
                component: c.component,
                state: ProblemState::Active,
                confidence: c.confidence,
                network: c.kind.is_network(),
                first_seen_ms: now_ms,
                last_seen_ms: now_ms,
                resolved_ms: None,
                evidence: c.evidence,
                priority: None,
                affected_tasks: Vec::new(),
            };
            tracing::info!(
                kind = ?problem.kind,
                component = %problem.component,
                confidence = problem.confidence,
                detail = %problem.evidence.detail,
                paths = ?problem.evidence.example_paths,
                "problem found"
            );
            self.active.insert(
                k,
                Tracked {
                    serial,
                    problem,
                    saved: false,
                    saved_at_ms: now_ms,
                    saved_confidence: c.confidence,
                    evidence_ms: now_ms,
                },
            );
        }
        let gone: Vec<Key> = self
            .active
            .iter()
            .filter(|(k, t)| {
                !seen.contains(k) && policy::resolved(now_ms, t.evidence_ms, self.resolve_after_ms)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some(mut t) = self.active.remove(&k) {
                tracing::info!(kind = ?t.problem.kind, component = %t.problem.component, "problem resolved");
                t.problem.state = ProblemState::Resolved;
                t.problem.resolved_ms = Some(now_ms);
                t.saved = false;
                self.resolved.push_back(t);
            }
        }
        while self.resolved.len() > KEEP_RESOLVED && self.resolved.front().is_some_and(|t| t.saved)
        {
            self.resolved.pop_front();
        }
    }

    /// Problems to write: `(serial, problem)`; an id of 0 means not stored yet.
    pub(crate) fn unsaved(&self) -> Vec<(u64, Problem)> {
        self.active
            .values()
            .chain(self.resolved.iter())
            .filter(|t| !t.saved)
            .map(|t| (t.serial, t.problem.clone()))
            .collect()
    }

    /// Records that the problem with `serial` was written at `now_ms` under `id`.
    pub(crate) fn mark_saved(&mut self, serial: u64, id: i64, now_ms: i64) {
        if let Some(t) = self
            .active
            .values_mut()
            .chain(self.resolved.iter_mut())
            .find(|t| t.serial == serial)
        {
            t.problem.id = id;
            t.saved = true;
            t.saved_at_ms = now_ms;
            t.saved_confidence = t.problem.confidence;
        }
    }

    /// Problems in memory: active ones, and the recently resolved ones, most recent first.
    pub(crate) fn problems(&self, state: ProblemState) -> Vec<Problem> {
        let mut v: Vec<Problem> = match state {
            ProblemState::Active => self.active.values().map(|t| t.problem.clone()).collect(),
            ProblemState::Resolved => self.resolved.iter().map(|t| t.problem.clone()).collect(),
        };
        v.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(b.id.cmp(&a.id)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::Evidence;

    fn cand(kind: ProblemKind, name: &str, confidence: f64) -> Candidate {
        Candidate {
            kind,
            component_kind: ComponentKind::Link,
            component: name.into(),
            confidence,
            evidence: Evidence::default(),
        }
    }

    #[test]
    fn one_active_problem_per_component_then_resolved() {
        let mut t = Tracker::new(10_000);
        t.update(1_000, vec![cand(ProblemKind::LinkFault, "t0-s1", 0.9)]);
        let new = t.unsaved();
        assert_eq!(new.len(), 1);
        assert!(new[0].1.network);
        t.mark_saved(new[0].0, 7, 1_000);
        // Persisting symptom: same problem, no write until something changes enough.
        t.update(2_000, vec![cand(ProblemKind::LinkFault, "t0-s1", 0.92)]);
        assert!(t.unsaved().is_empty());
        t.update(3_000, vec![cand(ProblemKind::LinkFault, "t0-s1", 0.5)]);
        assert_eq!(t.unsaved()[0].1.id, 7, "a big confidence change is written");
        t.mark_saved(t.unsaved()[0].0, 7, 3_000);
        // Absent for less than resolve_after: still active.
        t.update(12_000, vec![]);
        assert_eq!(t.problems(ProblemState::Active).len(), 1);
        t.update(13_000, vec![]);
        assert!(t.problems(ProblemState::Active).is_empty());
        let r = t.problems(ProblemState::Resolved);
        assert_eq!(
            (r[0].id, r[0].resolved_ms, r[0].last_seen_ms),
            (7, Some(13_000), 3_000)
        );
        assert_eq!(t.unsaved().len(), 1, "resolution is written");
        // The symptom returns: a new episode.
        t.update(20_000, vec![cand(ProblemKind::LinkFault, "t0-s1", 0.9)]);
        assert_eq!(t.problems(ProblemState::Active)[0].first_seen_ms, 20_000);
    }

    #[test]
    fn restored_problems_get_a_fresh_resolution_clock() {
        let mut t = Tracker::new(10_000);
        let mut t2 = Tracker::new(10_000);
        t.update(1_000, vec![cand(ProblemKind::RnicFault, "h0/r0", 0.9)]);
        let mut p = t.problems(ProblemState::Active);
        p[0].id = 3;
        t2.restore(p, 100_000, 4_000);
        t2.update(113_000, vec![]);
        assert_eq!(
            t2.problems(ProblemState::Active)[0].id,
            3,
            "held 4 s + 10 s"
        );
        assert!(t2.unsaved().is_empty());
        t2.update(114_000, vec![]);
        assert_eq!(t2.problems(ProblemState::Resolved)[0].id, 3);
    }

    /// A shard takeover seen in the scale-out test: the survivor found the taken-over
    /// link once right after the takeover, then not again until its agents had moved
    /// and its paths settled; that finding must not cut the hold short, or the problem
    /// resolves and is filed again.
    #[test]
    fn a_finding_does_not_cut_a_restored_problems_hold_short() {
        let mut t = Tracker::new(10_000);
        t.update(1_000, vec![cand(ProblemKind::LinkFault, "t3-s1", 0.9)]);
        let mut stored = t.problems(ProblemState::Active);
        stored[0].id = 1;
        let mut survivor = Tracker::new(10_000);
        survivor.rescope(|_| true, stored, 100_000, 15_000);
        survivor.update(101_000, vec![cand(ProblemKind::LinkFault, "t3-s1", 0.9)]);
        for now in (102_000..125_000).step_by(1_000) {
            survivor.update(now, vec![]);
            let active = survivor.problems(ProblemState::Active);
            assert_eq!(active.len(), 1, "held at {now}");
            assert_eq!(active[0].id, 1);
        }
        survivor.update(125_000, vec![]);
        assert_eq!(survivor.problems(ProblemState::Resolved)[0].id, 1);
    }

    #[test]
    fn rescope_hands_problems_over_without_resolving_or_duplicating() {
        let mut t = Tracker::new(10_000);
        t.update(1_000, vec![cand(ProblemKind::LinkFault, "a", 0.9)]);
        t.update(1_000, vec![cand(ProblemKind::LinkFault, "b", 0.9)]);
        let stored: Vec<Problem> = t
            .problems(ProblemState::Active)
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                p.id = i as i64 + 1;
                p
            })
            .collect();
        // Out of scope: "b" leaves memory, but is not resolved (another instance has it).
        t.rescope(|p| p.component == "a", Vec::new(), 2_000, 0);
        assert_eq!(t.problems(ProblemState::Active).len(), 1);
        assert!(t.problems(ProblemState::Resolved).is_empty());
        // Back in scope: the stored row is taken over; "a", tracked already, is not doubled.
        t.rescope(|_| true, stored, 3_000, 15_000);
        let mut names: Vec<String> = t
            .problems(ProblemState::Active)
            .into_iter()
            .map(|p| p.component)
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        // Without evidence, the taken-over "b" outlives the hold plus the resolution
        // time, no longer; "a", tracked here all along, resolves as usual.
        t.update(14_000, vec![]);
        let active = |t: &Tracker| -> Vec<String> {
            t.problems(ProblemState::Active)
                .into_iter()
                .map(|p| p.component)
                .collect()
        };
        assert_eq!(active(&t), ["b"]);
        t.update(27_000, vec![]);
        assert_eq!(active(&t), ["b"]);
        t.update(28_000, vec![]);
        assert!(active(&t).is_empty());
    }
}
