//! "Is it the network?" for one task and interval (R-Pingmesh §2.4): at fault when a
//! P0/P1 network problem in its service network overlapped the interval; innocent when
//! monitoring covered every endpoint and found none (whether or not performance degraded);
//! unknown when monitoring did not cover the task.

use crate::assess::Impact;
use crate::judge::{median, worst_window};
use crate::model::{Coverage, MetricSummary, Objective, Verdict, VerdictKind};
use crate::samples;
use anyhow::Context;
use rocemesh_analyzer::diagnosis::store as problems;
use rocemesh_proto::api::Problem;
use std::collections::HashMap;

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
    if !samples::task_exists(impact.db(), task).await? {
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
    let ids: Vec<(i64,)> = sqlx::query_as(
        "SELECT p.id FROM problems p JOIN problem_tasks t ON t.problem_id = p.id \
         WHERE t.task_id = $1 AND p.priority IN ('P0', 'P1') \
         AND p.first_seen_ms <= $2 AND COALESCE(p.resolved_ms, $3) >= $4 \
         ORDER BY p.first_seen_ms DESC LIMIT $5",
    )
    .bind(i64::from(task))
    .bind(to)
    .bind(now_ms)
    .bind(from)
    .bind(MAX_PROBLEMS)
    .fetch_all(impact.db().pool())
    .await
    .context("reading the task's problems")?;
    let mut out = Vec::with_capacity(ids.len());
    for (id,) in ids {
        out.extend(problems::get(impact.db(), id).await?);
    }
    Ok(out)
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
    let ids: Vec<String> = endpoints
        .iter()
        .filter_map(|e| e.rnic_id)
        .map(|id| format!("'{id}'"))
        .collect();
    let mut probes_of: HashMap<u32, i64> = HashMap::new();
    if !ids.is_empty() {
        // Ids are registry integers, so inlining them is safe.
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT scope_key, CAST(SUM(probes) AS BIGINT) FROM sla_periods WHERE scope = 'rnic' \
             AND scope_key IN ({}) AND period_start_ms + period_ms > $1 AND period_start_ms <= $2 \
             GROUP BY scope_key",
            ids.join(",")
        ))
        .bind(from)
        .bind(to)
        .fetch_all(impact.db().pool())
        .await
        .context("reading RNIC coverage")?;
        for (key, probes) in rows {
            if let Ok(id) = key.parse() {
                probes_of.insert(id, probes);
            }
        }
    }
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
