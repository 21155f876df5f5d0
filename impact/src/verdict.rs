//! "Is it the network?" for one task and interval (R-Pingmesh §2.4): at fault when a
//! P0/P1 network problem in its service network overlapped the interval; innocent when
//! monitoring covered every endpoint and found none (whether or not performance degraded);
//! unknown when monitoring did not cover the task.

use crate::assess::Impact;
use crate::judge::{median, worst_window};
use crate::model::{Coverage, MetricSummary, Objective, Verdict, VerdictKind};
use crate::samples;
use rocemesh_proto::api::Problem;

/// Most problems a verdict lists.
const MAX_PROBLEMS: i64 = 100;
/// Uncovered endpoints a verdict names.
const MAX_UNCOVERED: usize = 10;

/// The verdict on task `task` over `[from, to]`; `None` when the task does not exist.
pub async fn verdict(
    impact: &Impact,
    task: u32,
    from: i64,
    to: i64,
    now_ms: i64,
) -> anyhow::Result<Option<Verdict>> {
    if !impact.db().inventory().task_exists(task).await? {
        return Ok(None);
    }
    // Judge with fresh priorities, not those of up to one tick ago.
    impact.assess(now_ms).await?;
    let problems = task_problems(impact, task, from, to, now_ms).await?;
    let objective = samples::objective_of(impact.db(), task).await?;
    let metric = summary(impact, objective.as_ref(), from, to).await?;
    let degraded = objective.as_ref().and_then(|o| {
        let d = metric.degradation?;
        Some(d > o.spec.tolerable_degradation)
    });
    let coverage = coverage(impact, task, from, to).await?;
    let (verdict, reason) = decide(&problems, degraded, &metric, &coverage);
    let endpoints = impact
        .tasks()
        .await?
        .get(&task)
        .cloned()
        .unwrap_or_default();
    let (health, health_note) = match crate::health::of(impact, task, &endpoints, from, to).await? {
        Ok(h) => (Some(h), None),
        Err(why) => (None, Some(why)),
    };
    Ok(Some(Verdict {
        task_id: task,
        from,
        to,
        verdict,
        reason,
        degraded,
        metric,
        coverage,
        problems,
        health,
        health_note,
    }))
}

/// P0/P1 problems affecting the task whose lifetime overlaps `[from, to]`.
async fn task_problems(
    impact: &Impact,
    task: u32,
    from: i64,
    to: i64,
    now_ms: i64,
) -> anyhow::Result<Vec<Problem>> {
    impact
        .db()
        .problems()
        .affecting_task(task, (from, to), now_ms, MAX_PROBLEMS)
        .await
}

async fn summary(
    impact: &Impact,
    objective: Option<&Objective>,
    from: i64,
    to: i64,
) -> anyhow::Result<MetricSummary> {
    let Some(o) = objective else {
        return Ok(MetricSummary {
            name: None,
            samples: 0,
            median: None,
            worst: None,
            baseline: None,
            baseline_source: None,
            degradation: None,
            tolerable_degradation: None,
        });
    };
    let cfg = impact.config();
    let series = samples::series(
        impact.db(),
        o.task_id,
        &o.spec.metric,
        from,
        to,
        cfg.max_judged_samples,
    )
    .await?;
    let values: Vec<f64> = series.into_iter().map(|(_, v)| v).collect();
    let k = cfg.window_samples as usize;
    let hib = o.spec.higher_is_better;
    let baseline_source = if o.spec.baseline.is_some() {
        Some("configured")
    } else {
        o.learned_baseline.map(|_| "learned")
    };
    Ok(MetricSummary {
        name: Some(o.spec.metric.clone()),
        samples: values.len() as u64,
        median: median(&values),
        worst: worst_window(&values, k, hib),
        baseline: o.baseline(),
        baseline_source: baseline_source.map(str::to_string),
        degradation: impact.judge(o, &values).map(|(d, _)| d),
        tolerable_degradation: Some(o.spec.tolerable_degradation),
    })
}

/// Which of the task's endpoints had probe results (RNIC-scope SLA rows) in the interval.
async fn coverage(impact: &Impact, task: u32, from: i64, to: i64) -> anyhow::Result<Coverage> {
    let tasks = impact.tasks().await?;
    let endpoints = tasks.get(&task).cloned().unwrap_or_default();
    let ids: Vec<u32> = endpoints.iter().filter_map(|e| e.rnic_id).collect();
    let probes_of = impact.db().sla().rnic_probes(&ids, from, to).await?;
    let mut c = Coverage {
        endpoints: endpoints.len() as u64,
        covered: 0,
        probes: 0,
        uncovered: Vec::new(),
    };
    for e in &endpoints {
        match e
            .rnic_id
            .and_then(|id| probes_of.get(&id))
            .filter(|p| **p > 0)
        {
            Some(p) => {
                c.covered += 1;
                c.probes += u64::try_from(*p).unwrap_or(0);
            }
            None if c.uncovered.len() < MAX_UNCOVERED => c.uncovered.push(e.name()),
            None => {}
        }
    }
    Ok(c)
}

fn describe(p: &Problem) -> String {
    let priority = p.priority.map_or("?", |p| p.as_str());
    format!("{priority} {:?} on {}", p.kind, p.component)
}

fn performance(degraded: Option<bool>, metric: &MetricSummary) -> String {
    match (degraded, metric.degradation, metric.name.as_deref()) {
        (Some(true), Some(d), Some(m)) => format!("{m} degraded {:.0} %", d * 100.0),
        (Some(false), Some(d), Some(m)) => {
            format!(
                "{m} within tolerance ({:.0} % worse than baseline)",
                d.max(0.0) * 100.0
            )
        }
        (_, _, None) => "no performance objective set".to_string(),
        (_, _, Some(m)) if metric.samples == 0 => format!("no {m} samples in the interval"),
        (_, _, Some(m)) => format!("{m} baseline still being learned"),
    }
}

fn decide(
    problems: &[Problem],
    degraded: Option<bool>,
    metric: &MetricSummary,
    coverage: &Coverage,
) -> (VerdictKind, String) {
    let perf = performance(degraded, metric);
    let network: Vec<String> = problems
        .iter()
        .filter(|p| p.network)
        .map(describe)
        .collect();
    if !network.is_empty() {
        return (
            VerdictKind::NetworkAtFault,
            format!(
                "{} network problem(s) in the task's service network: {}; {perf}",
                network.len(),
                network.join(", ")
            ),
        );
    }
    let others: Vec<String> = problems
        .iter()
        .filter(|p| !p.network)
        .map(describe)
        .collect();
    let hosts = if others.is_empty() {
        String::new()
    } else {
        format!(
            "; host-side problems, not the network: {}",
            others.join(", ")
        )
    };
    if coverage.endpoints > 0 && coverage.covered == coverage.endpoints {
        return (
            VerdictKind::NetworkInnocent,
            format!(
                "no P0/P1 network problem while monitoring covered all {} endpoints ({} probes); \
                 {perf}{hosts}",
                coverage.endpoints, coverage.probes
            ),
        );
    }
    let why = if coverage.endpoints == 0 {
        "the task has no endpoints".to_string()
    } else if coverage.covered == 0 {
        format!(
            "no probe results from any of the task's {} endpoints in the interval",
            coverage.endpoints
        )
    } else {
        format!(
            "monitoring covered only {} of {} endpoints (none from {})",
            coverage.covered,
            coverage.endpoints,
            coverage.uncovered.join(", ")
        )
    };
    (VerdictKind::Unknown, format!("{why}; {perf}{hosts}"))
}
