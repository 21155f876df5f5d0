//! The hang/slow part of a task's verdict: its ranks' throughput and the stored probe
//! outcomes of its RNIC pairs (C4D's matrix), judged window by window by
//! `rocemesh-taskhealth`, with straggler and attributions named `host/rnic`.

use crate::assess::Impact;
use crate::service::Endpoint;
use rocemesh_store::CellFilter;
use rocemesh_taskhealth::{
    Health, PairHealth, Settings, Tally, Throughput, Window, WindowClass, assess, confirm_hang,
    tallies,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::ToSchema;

/// Most matrix cells one verdict reads (a task of 1,000 ranks probing 100 peers each).
const MAX_CELLS: u32 = 100_000;

/// Where the ranks' throughput comes from (the controller's rings in a `server`).
pub trait ThroughputSource: Send + Sync {
    /// For registry RNIC ids: their series over common intervals in the order asked (no
    /// data-parallel groups); why not.
    fn series(&self, rnics: &[u32]) -> Result<Throughput, String>;

    /// Task `task`'s data-parallel groups as RNIC ids, once its skeleton is inferred.
    fn dp_groups(&self, task: u32) -> Vec<Vec<u32>>;
}

/// Hang/slow windows of a task over the verdict's interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct TaskHealth {
    /// `host/rnic` of each rank; `straggler` and `rank` fields index this list.
    pub ranks: Vec<String>,
    /// The worst window's class (hangs over slows over healthy); null when nothing was
    /// judged.
    pub worst: Option<WindowClass>,
    /// The straggler of the worst window, `host/rnic`.
    pub straggler: Option<String>,
    /// Every judged window, and the attributions of the probe matrix read from the
    /// outcomes of the task's RNIC pairs stored per SLA period (`task_pair_periods`).
    #[serde(flatten)]
    pub health: Health,
}

/// The health of a task with `endpoints` over `[from, to]` (`Ok(Err(why))` when it cannot
/// be judged: no source, unregistered ranks, no samples in the interval).
pub async fn of(
    impact: &Impact,
    task: u32,
    endpoints: &[Endpoint],
    from: i64,
    to: i64,
) -> anyhow::Result<Result<TaskHealth, String>> {
    let ids: Vec<u32> = endpoints.iter().filter_map(|e| e.rnic_id).collect();
    let ranked = ids.len() == endpoints.len();
    let tors: Vec<Option<&str>> = endpoints.iter().map(|e| e.tor.as_deref()).collect();
    let pairs = if ranked {
        matrix(impact, task, (&ids, &tors), from, to).await?
    } else {
        Vec::new()
    };
    let (ids, mut health) = match judge(impact, task, (ids, ranked), &pairs, from, to) {
        Ok(x) => x,
        Err(why) => return Ok(Err(why)),
    };
    // A hang is the interval's tail: its straggler's probes over the hang alone say more
    // than the interval's matrix (healthy before the hang) — its task pairs' outcomes
    // there, else its RNIC's totals (a dead link loses them, a stopped process does not).
    let s = Settings::default();
    for w in health.windows.iter_mut().filter(|w| w.class.is_hang()) {
        let Some((r, id)) = w.straggler.and_then(|r| ids.get(r).map(|id| (r, *id))) else {
            continue;
        };
        let during = matrix(impact, task, (&ids, &tors), w.from_ms, w.to_ms).await?;
        let mut by_direction: Vec<Tally> = tallies(&during, r).to_vec();
        if by_direction.iter().all(|t| t.1 == 0) {
            let (probes, lost) = impact
                .db()
                .sla()
                .rnic_totals(id, w.from_ms, w.to_ms)
                .await?;
            by_direction = vec![("on its RNIC", probes, lost)];
        }
        let mut hang = Window {
            evidence: String::new(),
            ..w.clone()
        };
        confirm_hang(&mut hang, &by_direction, &s);
        w.class = hang.class;
        let why = hang.evidence.trim_start_matches("; ");
        w.evidence = format!("{}; over the hang: {why}", w.evidence);
    }
    let ranks: Vec<String> = endpoints.iter().map(Endpoint::name).collect();
    let worst = health.worst().cloned();
    Ok(Ok(TaskHealth {
        straggler: worst
            .as_ref()
            .and_then(|w| w.straggler)
            .and_then(|r| ranks.get(r).cloned()),
        worst: worst.map(|w| w.class),
        ranks,
        health,
    }))
}

/// The stored probe outcomes of the task's RNIC pairs over `[from, to]`, as cells over
/// the ranks `ids` under ToRs `tors` (pairs of RNICs not among them are left out).
async fn matrix(
    impact: &Impact,
    task: u32,
    (ids, tors): (&[u32], &[Option<&str>]),
    from: i64,
    to: i64,
) -> anyhow::Result<Vec<PairHealth>> {
    if ids.len() < 2 {
        return Ok(Vec::new());
    }
    let cells = impact
        .db()
        .task_pairs()
        .cells(&CellFilter {
            task: Some(task),
            from_ms: from,
            to_ms: to,
            limit: MAX_CELLS,
        })
        .await?;
    let ranks: HashMap<i64, usize> = ids
        .iter()
        .enumerate()
        .rev()
        .map(|(r, id)| (i64::from(*id), r))
        .collect();
    let rank = |id: i64| ranks.get(&id).copied();
    let tor = |r: usize| tors.get(r).copied().flatten();
    Ok(cells
        .iter()
        .filter_map(|c| {
            let (src, dst) = (rank(c.src_rnic)?, rank(c.dst_rnic)?);
            Some(PairHealth::from_counts(
                (src, dst),
                c.probes,
                c.lost,
                c.rtt_ns,
                (tor(src), tor(dst)),
            ))
        })
        .collect())
}

/// The ranks' registry ids (and whether every endpoint has one) and their throughput
/// judged over `[from, to]` with the probe matrix `pairs`.
fn judge(
    impact: &Impact,
    task: u32,
    (ids, ranked): (Vec<u32>, bool),
    pairs: &[PairHealth],
    from: i64,
    to: i64,
) -> Result<(Vec<u32>, Health), String> {
    let source = impact
        .throughput()
        .ok_or("this process holds no throughput (run the controller here)")?;
    if ids.len() < 2 || !ranked {
        return Err("fewer than two registered ranks".into());
    }
    let all = source.series(&ids)?;
    let step = i64::from(all.interval_ms.max(1));
    let len = all.bytes.first().map_or(0, Vec::len);
    // Keep the samples inside [from, to].
    let first = ((from - all.start_ms).max(0) / step) as usize;
    let last = (((to - all.start_ms).max(0) / step) as usize).min(len);
    if first >= last {
        return Err("no throughput samples in the interval".into());
    }
    // A series shorter than the first one's is cut to nothing (judged as no samples).
    let cut = |series: &[Vec<f64>]| -> Vec<Vec<f64>> {
        series
            .iter()
            .map(|s| s.get(first..last).map(<[f64]>::to_vec).unwrap_or_default())
            .collect()
    };
    let tp = Throughput {
        interval_ms: all.interval_ms,
        start_ms: all.start_ms + first as i64 * step,
        bytes: cut(&all.bytes),
        sent: cut(&all.sent),
        groups: source
            .dp_groups(task)
            .iter()
            .map(|g| {
                g.iter()
                    .filter_map(|id| ids.iter().position(|x| x == id))
                    .collect()
            })
            .collect(),
    };
    Ok((ids, assess(&tp, pairs, &Settings::default())))
}
