//! The hang/slow part of a task's verdict: its ranks' throughput, judged window by window
//! by `rocemesh-taskhealth`, with straggler and attributions named `host/rnic`.

use crate::assess::Impact;
use crate::service::Endpoint;
use rocemesh_taskhealth::{Health, Settings, Throughput, WindowClass, assess, confirm_hang};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where the ranks' throughput comes from (the controller's rings in a `server`).
pub trait ThroughputSource: Send + Sync {
    /// For registry RNIC ids: sampling interval (ms), end of the newest interval (ms since
    /// the Unix epoch) and bytes per interval per RNIC in the order asked; why not.
    fn series(&self, rnics: &[u32]) -> Result<(u32, i64, Vec<Vec<f64>>), String>;

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
    /// Every judged window and the probe attributions.
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
    let (ids, mut health) = match judge(impact, task, endpoints, from, to) {
        Ok(x) => x,
        Err(why) => return Ok(Err(why)),
    };
    // Per-pair outcomes are not stored: a hang's straggler is checked against its RNIC's
    // probe totals over the hang (a dead link loses them, a stopped process does not).
    for w in health.windows.iter_mut().filter(|w| w.class.is_hang()) {
        let Some(id) = w.straggler.and_then(|r| ids.get(r)) else {
            continue;
        };
        let (probes, lost) = impact
            .db()
            .sla()
            .rnic_totals(*id, w.from_ms, w.to_ms)
            .await?;
        confirm_hang(w, probes, lost, &Settings::default());
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

/// The ranks' registry ids and their throughput judged over `[from, to]`.
fn judge(
    impact: &Impact,
    task: u32,
    endpoints: &[Endpoint],
    from: i64,
    to: i64,
) -> Result<(Vec<u32>, Health), String> {
    let source = impact
        .throughput()
        .ok_or("this process holds no throughput (run the controller here)")?;
    let ids: Vec<u32> = endpoints.iter().filter_map(|e| e.rnic_id).collect();
    if ids.len() < 2 || ids.len() != endpoints.len() {
        return Err("fewer than two registered ranks".into());
    }
    let (interval_ms, end_ms, series) = source.series(&ids)?;
    let len = series.first().map_or(0, Vec::len);
    let start_ms = end_ms - i64::from(interval_ms) * len as i64;
    // Keep the samples inside [from, to].
    let first = ((from - start_ms).max(0) / i64::from(interval_ms).max(1)) as usize;
    let last = (((to - start_ms).max(0) / i64::from(interval_ms).max(1)) as usize).min(len);
    if first >= last {
        return Err("no throughput samples in the interval".into());
    }
    let tp = Throughput {
        interval_ms,
        start_ms: start_ms + first as i64 * i64::from(interval_ms),
        bytes: series.iter().map(|s| s[first..last].to_vec()).collect(),
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
    // Per-pair probe outcomes are not stored: the matrix stays empty.
    Ok((ids, assess(&tp, &[], &Settings::default())))
}
