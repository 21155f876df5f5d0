//! SLA rows: built from a finalized period, stored through [`rocemesh_store::Sla`],
//! queried back with the task labels of their RNICs.

use crate::registry::Registry;
use crate::window::{MetricSet, Period};
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind, ProblemState, SlaRow, SlaScope};
use rocemesh_store::{Db, SlaFilter, TaskPairRow};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Rows a query returns when it names no `limit`.
const DEFAULT_LIMIT: u32 = 100;
/// Largest `limit` a query may ask for.
const MAX_LIMIT: u32 = 10_000;

fn row(start_ms: i64, period_ms: i64, scope: SlaScope, key: String, m: &MetricSet) -> SlaRow {
    let rate = |n: u64| {
        if m.probes == 0 {
            0.0
        } else {
            n as f64 / m.probes as f64
        }
    };
    SlaRow {
        period_start_ms: start_ms,
        period_ms,
        scope,
        key,
        probes: m.probes as i64,
        timeouts: m.timeouts as i64,
        timeout_rate: rate(m.timeouts),
        // Filled in by [`split_drops`].
        rnic_drops: 0,
        switch_drops: m.timeouts as i64,
        rnic_drop_rate: 0.0,
        switch_drop_rate: rate(m.timeouts),
        network_rtt_ns: m.network_rtt.quantiles(),
        prober_delay_ns: m.prober_delay.quantiles(),
        responder_delay_ns: m.responder_delay.quantiles(),
        app_rtt_ns: m.app_rtt.quantiles(),
        labels: Vec::new(),
    }
}

/// Which side a timeout of an RNIC pair falls on (R-Pingmesh §5), from the problems open
/// when its period is finalized.
#[derive(Debug, Default, Clone)]
pub(crate) struct DropSides {
    /// RNICs with an RNIC-fault problem: timeouts to or from them are RNIC drops.
    pub rnic: HashSet<u32>,
    /// RNICs of hosts that are down, restarted or noisy: their timeouts are no network drop.
    pub host: HashSet<u32>,
}

impl DropSides {
    /// Sorts open problems' components into RNIC ids (names resolved with `registry`).
    pub(crate) fn from_problems(problems: &[Problem], registry: &Registry) -> Self {
        let mut sides = Self::default();
        let host_rnics = |host: &str| -> Vec<u32> {
            registry
                .rnic_ids()
                .filter(|&id| registry.meta(id).is_some_and(|m| m.host == host))
                .collect()
        };
        for p in problems.iter().filter(|p| p.state == ProblemState::Active) {
            match (p.kind, p.component_kind) {
                (ProblemKind::RnicFault, ComponentKind::Rnic) => {
                    sides.rnic.extend(registry.rnic_by_name(&p.component));
                }
                (ProblemKind::HostDown | ProblemKind::AgentRestart | ProblemKind::HostNoise, _) => {
                    match p.component_kind {
                        ComponentKind::Rnic => {
                            sides.host.extend(registry.rnic_by_name(&p.component))
                        }
                        _ => sides.host.extend(host_rnics(&p.component)),
                    }
                }
                _ => {}
            }
        }
        sides
    }

    /// `None` for a switch-side pair, else whether its RNIC side (true) or a host is behind it.
    fn side(&self, (a, b): (u32, u32)) -> Option<bool> {
        if self.host.contains(&a) || self.host.contains(&b) {
            Some(false)
        } else if self.rnic.contains(&a) || self.rnic.contains(&b) {
            Some(true)
        } else {
            None
        }
    }
}

/// Per-row tallies of timeouts that are not switch drops: (RNIC drops, host timeouts).
type NotSwitch = HashMap<(SlaScope, String), (u64, u64)>;

/// Sets every row's RNIC and switch drops: its timeouts on pairs with an RNIC-fault end
/// are RNIC drops, those on pairs with a down/restarted/noisy host are neither, the rest
/// (including timeouts of pairs beyond the period's pair bound) are switch drops.
fn split_drops(rows: &mut [SlaRow], p: &Period, registry: &Registry, sides: &DropSides) {
    let mut not_switch = NotSwitch::new();
    for (&pair, &[all, service]) in &p.pair_timeouts {
        let Some(rnic) = sides.side(pair) else {
            continue;
        };
        let mut add = |scope: SlaScope, key: String, n: u64| {
            let e = not_switch.entry((scope, key)).or_default();
            if rnic { e.0 += n } else { e.1 += n }
        };
        add(SlaScope::Cluster, "cluster".into(), all);
        if service > 0 {
            add(SlaScope::Service, SERVICE_KEY.into(), service);
        }
        if let (Some(a), Some(b)) = (registry.get(pair.0), registry.get(pair.1)) {
            let key = format!("{}->{}", registry.tor_name(a.tor), registry.tor_name(b.tor));
            add(SlaScope::TorPair, key, all);
        }
        add(SlaScope::Rnic, pair.1.to_string(), all);
        let theirs = registry.tasks_of(pair.1);
        for t in registry
            .tasks_of(pair.0)
            .iter()
            .filter(|t| theirs.contains(t))
        {
            add(SlaScope::Task, registry.task_name(*t).to_string(), all);
        }
    }
    for r in rows {
        let Some(&(rnic, host)) = not_switch.get(&(r.scope, r.key.clone())) else {
            continue;
        };
        let timeouts = r.timeouts.max(0) as u64;
        let rnic = rnic.min(timeouts);
        let switch = timeouts - rnic - host.min(timeouts - rnic);
        let rate = |n: u64| {
            if r.probes > 0 {
                n as f64 / r.probes as f64
            } else {
                0.0
            }
        };
        r.rnic_drops = rnic as i64;
        r.switch_drops = switch as i64;
        r.rnic_drop_rate = rate(rnic);
        r.switch_drop_rate = rate(switch);
    }
}

/// Key of the one service-scope row per period.
pub(crate) const SERVICE_KEY: &str = "service";

/// Every non-empty scope of a finalized period, as rows (cluster, ToR pairs, RNICs, tasks,
/// service; each group sorted by key), with drops split by `sides`.
pub(crate) fn period_rows(
    p: &Period,
    period_ms: i64,
    registry: &Registry,
    sides: &DropSides,
) -> Vec<SlaRow> {
    let start = p.index * period_ms;
    let mut rows = vec![row(
        start,
        period_ms,
        SlaScope::Cluster,
        "cluster".into(),
        &p.cluster(),
    )];
    let mut pairs: Vec<SlaRow> = p
        .tor_pairs
        .iter()
        .filter(|(_, m)| !m.is_empty())
        .map(|(&k, m)| {
            let (src, dst) = crate::window::period::split_pair_key(k);
            let key = format!("{}->{}", registry.tor_name(src), registry.tor_name(dst));
            row(start, period_ms, SlaScope::TorPair, key, m)
        })
        .collect();
    pairs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    rows.extend(pairs);
    rows.extend(
        p.rnics
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.is_empty())
            .map(|(id, m)| SlaRow {
                labels: registry.labels(id as u32).to_vec(),
                ..row(start, period_ms, SlaScope::Rnic, id.to_string(), m)
            }),
    );
    let mut tasks: Vec<SlaRow> = p
        .tasks
        .iter()
        .filter(|(_, m)| !m.is_empty())
        .map(|(&t, m)| {
            row(
                start,
                period_ms,
                SlaScope::Task,
                registry.task_name(t).into(),
                m,
            )
        })
        .collect();
    tasks.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    rows.extend(tasks);
    if !p.service.is_empty() {
        rows.push(row(
            start,
            period_ms,
            SlaScope::Service,
            SERVICE_KEY.into(),
            &p.service,
        ));
    }
    split_drops(&mut rows, p, registry, sides);
    rows
}

/// The per-pair rows of every task of a finalized period (C4D's matrix), by task database
/// id; pairs of tasks no longer registered are left out.
pub(crate) fn task_pair_rows(p: &Period, period_ms: i64, registry: &Registry) -> Vec<TaskPairRow> {
    let mut rows: Vec<TaskPairRow> = p
        .task_pairs
        .iter()
        .filter(|(_, o)| o.probes > 0)
        .filter_map(|(&(t, src, dst), o)| {
            Some(TaskPairRow {
                task_id: registry.task_id(t)?,
                period_start_ms: p.index * period_ms,
                period_ms,
                src_rnic: src,
                dst_rnic: dst,
                probes: o.probes,
                lost: o.lost,
                rtt_p50_ns: o.rtt.quantiles().p50,
            })
        })
        .collect();
    rows.sort_unstable_by_key(|r| (r.task_id, r.src_rnic, r.dst_rnic));
    rows
}

/// Puts on every RNIC row the Kubernetes labels of the task endpoints on that RNIC now
/// (labels are not stored with the rows: tasks come and go, the figures stay).
async fn label_rnic_rows(db: &Db, rows: &mut [SlaRow]) -> anyhow::Result<()> {
    if !rows.iter().any(|r| r.scope == SlaScope::Rnic) {
        return Ok(());
    }
    let labels = crate::registry::load_labels(db).await?;
    for r in rows.iter_mut().filter(|r| r.scope == SlaScope::Rnic) {
        if let Some(l) = r.key.parse::<u32>().ok().and_then(|id| labels.get(&id)) {
            r.labels = l.clone();
        }
    }
    Ok(())
}

/// `GET /api/v1/sla` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlaQuery {
    /// Scope to list.
    pub scope: SlaScope,
    /// Only this key (e.g. `tor-a->tor-b`, or an RNIC id).
    pub key: Option<String>,
    /// Periods starting at or after this time (ms since the Unix epoch).
    pub from_ms: Option<i64>,
    /// Periods starting before this time.
    pub to_ms: Option<i64>,
    /// Most rows to return (default 100, at most 10,000).
    pub limit: Option<u32>,
}

impl SlaQuery {
    /// The row limit to apply, or why the requested one is refused.
    pub fn checked_limit(&self) -> Result<u32, String> {
        let limit = self.limit.unwrap_or(DEFAULT_LIMIT);
        if (1..=MAX_LIMIT).contains(&limit) {
            Ok(limit)
        } else {
            Err(format!(
                "limit must be between 1 and {MAX_LIMIT}, got {limit}"
            ))
        }
    }
}

/// Stored rows matching a query, newest period first, then by key.
pub async fn query(db: &Db, q: &SlaQuery) -> anyhow::Result<Vec<SlaRow>> {
    let limit = q.checked_limit().map_err(anyhow::Error::msg)?;
    let mut rows = db
        .sla()
        .rows(&SlaFilter {
            scope: q.scope,
            key: q.key.as_deref(),
            from_ms: q.from_ms.unwrap_or(i64::MIN),
            to_ms: q.to_ms.unwrap_or(i64::MAX),
            limit,
        })
        .await?;
    label_rnic_rows(db, &mut rows).await?;
    Ok(rows)
}

/// Every stored row of the period starting at `start_ms` (the "latest" view after a restart).
pub(crate) async fn period(db: &Db, start_ms: i64) -> anyhow::Result<Vec<SlaRow>> {
    let mut rows = db.sla().period(start_ms).await?;
    label_rnic_rows(db, &mut rows).await?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::ProbeClass;
    use rocemesh_proto::testing::{active_problem, probe_result};

    /// RNIC r (1..=4) on host hr, ToR t0 for 1-2 and t1 for 3-4; task 0 on every RNIC.
    fn registry() -> Registry {
        crate::registry::four_rnics_one_task(&["t0", "t1"], |r| u16::from(r > 2), 1)
    }

    /// Timeouts to an RNIC with an RNIC fault are RNIC drops, those to a down host are
    /// neither kind, the rest are switch drops, in every scope the pair belongs to.
    #[test]
    fn drops_split_by_the_side_open_problems_put_them_on() {
        let reg = registry();
        let mut p = Period::default();
        p.ensure_rnics(5);
        let mut add = |prober: u32, target: u32, ok: bool, n: usize| {
            for _ in 0..n {
                let r = rocemesh_proto::ProbeResult {
                    class: ProbeClass::Service,
                    ..probe_result(prober, target, 0, ok, 10_000)
                };
                let (a, b) = (reg.get(prober).unwrap(), reg.get(target).unwrap());
                p.add(&r, a.tor, b.tor);
                p.add_service(&r, reg.tasks_of(prober), reg.tasks_of(target), usize::MAX);
            }
        };
        add(1, 3, false, 4); // RNIC 3 is faulty: RNIC drops
        add(1, 4, false, 3); // host h4 is down: no network drop
        add(2, 3, true, 10);
        add(2, 4, false, 2); // ...also h4
        add(1, 2, false, 5); // nothing open: switch drops
        let problems = [
            active_problem(1, ProblemKind::RnicFault, ComponentKind::Rnic, "h3/r0", ""),
            active_problem(2, ProblemKind::HostDown, ComponentKind::Host, "h4", ""),
            active_problem(3, ProblemKind::LinkFault, ComponentKind::Link, "t0-s0", ""),
        ];
        let sides = DropSides::from_problems(&problems, &reg);
        assert_eq!(sides.rnic, HashSet::from([3]));
        assert_eq!(sides.host, HashSet::from([4]));
        let rows = period_rows(&p, 20_000, &reg, &sides);
        let get = |scope: SlaScope, key: &str| {
            let r = rows
                .iter()
                .find(|r| r.scope == scope && r.key == key)
                .unwrap_or_else(|| panic!("no {scope:?} {key}: {rows:#?}"));
            (r.probes, r.timeouts, r.rnic_drops, r.switch_drops)
        };
        assert_eq!(get(SlaScope::Cluster, "cluster"), (24, 14, 4, 5));
        assert_eq!(get(SlaScope::Service, SERVICE_KEY), (24, 14, 4, 5));
        assert_eq!(get(SlaScope::Task, "job"), (24, 14, 4, 5));
        assert_eq!(get(SlaScope::TorPair, "t0->t1"), (19, 9, 4, 0));
        assert_eq!(get(SlaScope::TorPair, "t0->t0"), (5, 5, 0, 5));
        assert_eq!(get(SlaScope::Rnic, "3"), (14, 4, 4, 0));
        assert_eq!(get(SlaScope::Rnic, "4"), (5, 5, 0, 0));
        let cluster = rows.iter().find(|r| r.scope == SlaScope::Cluster).unwrap();
        assert!((cluster.rnic_drop_rate - 4.0 / 24.0).abs() < 1e-12);
        assert!((cluster.switch_drop_rate - 5.0 / 24.0).abs() < 1e-12);
    }

    /// Past the bound on distinct timed-out pairs, further pairs' timeouts still count,
    /// as switch drops.
    #[test]
    fn timeouts_beyond_the_pair_bound_stay_counted() {
        let mut p = Period::default();
        p.ensure_rnics(3);
        for i in 0..crate::window::period::MAX_TIMEOUT_PAIRS as u32 {
            p.pair_timeouts.insert((i, u32::MAX - 1), [1, 0]);
        }
        let r = probe_result(1, 2, 0, false, 0);
        p.add_service(&r, &[], &[], usize::MAX);
        assert_eq!(
            p.pair_timeouts[&crate::window::period::UNATTRIBUTED],
            [1, 0]
        );
        assert!(!p.pair_timeouts.contains_key(&(1, 2)));
    }
}
