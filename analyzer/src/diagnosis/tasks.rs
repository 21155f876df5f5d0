//! C4D's matrix as problems: the stored per-pair outcomes of each task's RNIC pairs in the
//! newest stored period, read by `rocemesh_taskhealth::attribute`; each attribution (a
//! rank as source, destination or endpoint, or a connection) becomes a finding of the
//! diagnosis tick, so the tracker deduplicates it with the problems the engine finds and
//! resolves it by the same rule once the attribution no longer holds.

use super::engine::Candidate;
use crate::registry::Registry;
use rocemesh_proto::api::{Evidence, ProblemKind};
use rocemesh_store::{CellFilter, Db, TaskPairCell};
use rocemesh_taskhealth::{Attribution, Blame, PairHealth, Settings, attribute};
use std::collections::BTreeMap;

/// Most cells one read takes (every task's together); beyond, the tasks with the highest
/// ids go unread that period (logged).
const MAX_CELLS: u32 = 200_000;

/// One attribution as a finding, with the RNICs of the side it blames (the rank, or both
/// ends of a connection).
type Found = (Candidate, Vec<u32>);

/// Findings of the task matrices of the newest stored period.
#[derive(Debug, Default)]
pub(crate) struct TaskFindings {
    found: Vec<Found>,
    /// They stand for the newest period until this time (the next should be stored by then).
    until_ms: i64,
}

impl TaskFindings {
    /// Reads the cells of every task in the period starting at `start_ms` and attributes
    /// them; the findings hold until `until_ms`.
    pub(crate) async fn read(
        db: &Db,
        registry: &Registry,
        start_ms: i64,
        until_ms: i64,
    ) -> anyhow::Result<Self> {
        let cells = db
            .task_pairs()
            .cells(&CellFilter {
                task: None,
                from_ms: start_ms,
                to_ms: start_ms,
                limit: MAX_CELLS,
            })
            .await?;
        if cells.len() >= MAX_CELLS as usize {
            tracing::warn!(
                cells = cells.len(),
                "task matrix read truncated: tasks beyond it are not attributed"
            );
        }
        let mut by_task: BTreeMap<i64, Vec<TaskPairCell>> = BTreeMap::new();
        for c in cells {
            by_task.entry(c.task_id).or_default().push(c);
        }
        let found = by_task
            .into_iter()
            .flat_map(|(task, cells)| task_findings(registry, task, &cells))
            .collect();
        Ok(Self { found, until_ms })
    }

    /// Adds the findings still standing at `now_ms` to a tick's `candidates`: one the engine
    /// found too keeps the engine's figures, with the task's evidence appended. Host
    /// triage comes first, as in the engine: a finding on an RNIC `excused` (its host is
    /// down, its agent restarted, its host is noisy) is not the network's and is dropped.
    pub(crate) fn add_to(
        &self,
        candidates: &mut Vec<Candidate>,
        now_ms: i64,
        excused: impl Fn(u32) -> bool,
    ) {
        if now_ms > self.until_ms {
            return;
        }
        for (c, rnics) in &self.found {
            if !rnics.iter().any(|&r| excused(r)) {
                merge(candidates, c.clone());
            }
        }
    }
}

/// Folds `c` into the finding on the same (kind, component) in `into`, if any: that one's
/// figures stay, `c`'s detail is appended.
fn merge(into: &mut Vec<Candidate>, c: Candidate) {
    match into.iter_mut().find(|x| {
        (x.kind, x.component_kind, &x.component) == (c.kind, c.component_kind, &c.component)
    }) {
        Some(x) => {
            x.evidence.detail = format!("{}; {}", x.evidence.detail, c.evidence.detail);
            x.confidence = x.confidence.max(c.confidence);
        }
        None => into.push(c),
    }
}

/// The attributions of one task's cells, named after its RNICs.
fn task_findings(registry: &Registry, task: i64, cells: &[TaskPairCell]) -> Vec<Found> {
    // Ranks: the task's RNICs seen in the cells, in id order.
    let mut rnics: Vec<i64> = cells
        .iter()
        .flat_map(|c| [c.src_rnic, c.dst_rnic])
        .collect();
    rnics.sort_unstable();
    rnics.dedup();
    let rank = |id: i64| rnics.binary_search(&id).unwrap_or(0);
    let tor = |id: i64| {
        u32::try_from(id)
            .ok()
            .and_then(|id| registry.get(id))
            .map(|e| e.tor)
    };
    let pairs: Vec<PairHealth> = cells
        .iter()
        .map(|c| {
            PairHealth::from_counts(
                (rank(c.src_rnic), rank(c.dst_rnic)),
                c.probes,
                c.lost,
                c.rtt_ns,
                (tor(c.src_rnic), tor(c.dst_rnic)),
            )
        })
        .collect();
    let name = |r: usize| {
        u32::try_from(rnics[r])
            .ok()
            .and_then(|id| registry.meta(id))
            .map(|m| m.name.clone())
    };
    let task_name = u32::try_from(task)
        .ok()
        .and_then(|t| registry.task_name_by_id(t))
        .unwrap_or("?");
    let settings = Settings::default();
    attribute(rnics.len(), &pairs, &settings)
        .into_iter()
        .filter_map(|a| {
            let (component, side, ranks) = match (a.rank, a.pair) {
                (Some(r), _) => (name(r)?, blame_word(a.blame), vec![r]),
                (None, Some((s, d))) => (
                    format!("{} -> {}", name(s)?, name(d)?),
                    "connection",
                    vec![s, d],
                ),
                (None, None) => return None,
            };
            let (probes, lost) = side_totals(&a, &pairs);
            let ids = ranks
                .iter()
                .filter_map(|&r| u32::try_from(rnics[r]).ok())
                .collect();
            let c = Candidate {
                kind: a.kind,
                component_kind: a.component_kind,
                confidence: f64::from(a.bad_cells) / f64::from(a.cells.max(1)),
                evidence: Evidence {
                    probes,
                    timeouts: lost,
                    detail: format!(
                        "task {task_name} (id {task}) matrix: {component} as {side}, {} of {} \
                         pairs bad, {:.2} % of their probes lost{}",
                        a.bad_cells,
                        a.cells,
                        a.loss * 100.0,
                        if a.kind == ProblemKind::HighLatency {
                            format!(
                                " (median RTT above {}× its kind's: pairs under one ToR, or \
                                 across)",
                                settings.rtt_factor
                            )
                        } else {
                            String::new()
                        }
                    ),
                    ..Evidence::default()
                },
                component,
            };
            Some((c, ids))
        })
        .collect()
}

fn blame_word(b: Blame) -> &'static str {
    match b {
        Blame::Source => "source",
        Blame::Destination => "destination",
        Blame::Endpoint => "endpoint",
        Blame::Connection => "connection",
    }
}

/// Probes and losses of the cells on the attributed side (row, column, both, or the pair).
fn side_totals(a: &Attribution, pairs: &[PairHealth]) -> (u64, u64) {
    let on_side = |p: &PairHealth| match (a.blame, a.rank, a.pair) {
        (Blame::Source, Some(r), _) => p.src == r,
        (Blame::Destination, Some(r), _) => p.dst == r,
        (Blame::Endpoint, Some(r), _) => p.src == r || p.dst == r,
        (_, _, Some(pair)) => (p.src, p.dst) == pair,
        _ => false,
    };
    pairs
        .iter()
        .filter(|p| on_side(p))
        .fold((0, 0), |(n, l), p| (n + p.probes, l + p.lost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::ComponentKind;

    fn registry() -> Registry {
        crate::registry::four_rnics_one_task(&["t0"], |_| 0, 9)
    }

    fn cells(lossy_src: i64) -> Vec<TaskPairCell> {
        let mut v = Vec::new();
        for s in 1..=4 {
            for d in (1..=4).filter(|d| *d != s) {
                v.push(TaskPairCell {
                    task_id: 9,
                    src_rnic: s,
                    dst_rnic: d,
                    probes: 200,
                    lost: if s == lossy_src { 10 } else { 0 },
                    rtt_ns: Some(10_000),
                });
            }
        }
        v
    }

    /// A lossy row names its RNIC as a source, with the row's totals and the task, and a
    /// finding the engine made on the same RNIC keeps the engine's figures.
    #[test]
    fn a_bad_row_is_an_rnic_finding_merged_with_the_engines() {
        let reg = registry();
        let found = task_findings(&reg, 9, &cells(3));
        assert_eq!(found.len(), 1, "{found:?}");
        let (c, rnics) = &found[0];
        assert_eq!(rnics, &[3]);
        assert_eq!(
            (c.kind, c.component_kind, c.component.as_str()),
            (ProblemKind::RnicFault, ComponentKind::Rnic, "h3/r0")
        );
        assert_eq!((c.evidence.probes, c.evidence.timeouts), (600, 30));
        assert!(
            c.evidence
                .detail
                .starts_with("task job (id 9) matrix: h3/r0 as source, 3 of 3 pairs bad"),
            "{}",
            c.evidence.detail
        );
        assert!(task_findings(&reg, 9, &cells(0)).is_empty());

        // A slow column without loss: high latency on the destination.
        let mut slow = cells(0);
        for c in slow.iter_mut().filter(|c| c.dst_rnic == 2) {
            c.rtt_ns = Some(100_000);
        }
        let latency = task_findings(&reg, 9, &slow);
        assert_eq!(latency.len(), 1, "{latency:?}");
        assert_eq!(
            (latency[0].0.kind, latency[0].0.component.as_str()),
            (ProblemKind::HighLatency, "h2/r0")
        );
        assert!(
            latency[0].0.evidence.detail.ends_with(
                "h2/r0 as destination, 3 of 3 pairs bad, 0.00 % of their probes lost \
                 (median RTT above 2× its kind's: pairs under one ToR, or across)"
            ),
            "{}",
            latency[0].0.evidence.detail
        );

        let findings = TaskFindings {
            found,
            until_ms: 1_000,
        };
        let mut tick = vec![Candidate {
            kind: ProblemKind::RnicFault,
            component_kind: ComponentKind::Rnic,
            component: "h3/r0".into(),
            confidence: 0.5,
            evidence: Evidence {
                probes: 7,
                detail: "engine".into(),
                ..Evidence::default()
            },
        }];
        findings.add_to(&mut tick, 1_001, |_| false);
        assert_eq!(tick[0].evidence.detail, "engine", "expired");
        // Host triage first: h3 down (or its agent restarting) excuses its RNIC.
        let mut alone = Vec::new();
        findings.add_to(&mut alone, 1_000, |r| r == 3);
        assert!(alone.is_empty(), "{alone:?}");
        findings.add_to(&mut tick, 1_000, |_| false);
        assert_eq!(tick.len(), 1);
        assert_eq!((tick[0].evidence.probes, tick[0].confidence), (7, 1.0));
        assert!(
            tick[0]
                .evidence
                .detail
                .starts_with("engine; task job (id 9)")
        );
    }
}
