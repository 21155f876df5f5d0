//! Task performance samples and objectives in the database (migration 0005), with
//! retention: samples older than `retention_ms` and beyond `max_samples_per_task` go.

use crate::judge::median;
use crate::model::{Objective, ObjectiveSpec};
use anyhow::Context;
use rocemesh_store::Db;

/// Stores one sample of task `id`.
pub async fn insert(db: &Db, id: u32, name: &str, at_ms: i64, value: f64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO task_metric_samples (task_id, name, at_ms, value) VALUES ($1, $2, $3, $4)",
    )
    .bind(i64::from(id))
    .bind(name)
    .bind(at_ms)
    .bind(value)
    .execute(db.pool())
    .await
    .context("storing a metric sample")?;
    Ok(())
}

/// Samples `(at_ms, value)` of `name` for task `id` in `[from, to]`, oldest first; at most
/// the newest `limit`.
pub async fn series(
    db: &Db,
    id: u32,
    name: &str,
    from: i64,
    to: i64,
    limit: u32,
) -> anyhow::Result<Vec<(i64, f64)>> {
    let mut rows: Vec<(i64, f64)> = sqlx::query_as(
        "SELECT at_ms, value FROM task_metric_samples WHERE task_id = $1 AND name = $2 \
         AND at_ms >= $3 AND at_ms <= $4 ORDER BY at_ms DESC, id DESC LIMIT $5",
    )
    .bind(i64::from(id))
    .bind(name)
    .bind(from)
    .bind(to)
    .bind(i64::from(limit))
    .fetch_all(db.pool())
    .await
    .context("reading metric samples")?;
    rows.reverse();
    Ok(rows)
}

/// The values of `series` taken in `[from, to]`.
pub fn between(series: &[(i64, f64)], from: i64, to: i64) -> Vec<f64> {
    series
        .iter()
        .filter(|(at, _)| (from..=to).contains(at))
        .map(|(_, v)| *v)
        .collect()
}

type ObjectiveRow = (i64, String, i64, Option<f64>, Option<f64>, f64, i64);

const OBJECTIVE_COLUMNS: &str = "task_id, metric, higher_is_better, baseline, learned_baseline, \
    tolerable_degradation, updated_at_ms";

fn objective(
    (task_id, metric, hib, baseline, learned, tolerable, at): ObjectiveRow,
) -> anyhow::Result<Objective> {
    Ok(Objective {
        task_id: u32::try_from(task_id).context("task id out of range")?,
        spec: ObjectiveSpec {
            metric,
            higher_is_better: hib != 0,
            baseline,
            tolerable_degradation: tolerable,
        },
        learned_baseline: learned,
        updated_at_ms: at,
    })
}

/// Sets task `id`'s objective. A learned baseline survives only while the metric stays
/// the same.
pub async fn set_objective(
    db: &Db,
    id: u32,
    spec: &ObjectiveSpec,
    now_ms: i64,
) -> anyhow::Result<Objective> {
    let mut tx = db.pool().begin().await?;
    let old: Option<(String, Option<f64>)> =
        sqlx::query_as("SELECT metric, learned_baseline FROM task_objectives WHERE task_id = $1")
            .bind(i64::from(id))
            .fetch_optional(&mut *tx)
            .await?;
    let learned = old.filter(|(m, _)| *m == spec.metric).and_then(|(_, l)| l);
    sqlx::query("DELETE FROM task_objectives WHERE task_id = $1")
        .bind(i64::from(id))
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO task_objectives ({OBJECTIVE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ))
    .bind(i64::from(id))
    .bind(spec.metric.as_str())
    .bind(i64::from(spec.higher_is_better))
    .bind(spec.baseline)
    .bind(learned)
    .bind(spec.tolerable_degradation)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await.context("storing an objective")?;
    Ok(Objective {
        task_id: id,
        spec: spec.clone(),
        learned_baseline: learned,
        updated_at_ms: now_ms,
    })
}

/// Task `id`'s objective, if set.
pub async fn objective_of(db: &Db, id: u32) -> anyhow::Result<Option<Objective>> {
    let row: Option<ObjectiveRow> = sqlx::query_as(&format!(
        "SELECT {OBJECTIVE_COLUMNS} FROM task_objectives WHERE task_id = $1"
    ))
    .bind(i64::from(id))
    .fetch_optional(db.pool())
    .await
    .context("reading an objective")?;
    row.map(objective).transpose()
}

/// Every objective (the impact loop judges all tasks that have one).
pub async fn objectives(db: &Db) -> anyhow::Result<Vec<Objective>> {
    let rows: Vec<ObjectiveRow> =
        sqlx::query_as(&format!("SELECT {OBJECTIVE_COLUMNS} FROM task_objectives"))
            .fetch_all(db.pool())
            .await
            .context("reading objectives")?;
    rows.into_iter().map(objective).collect()
}

/// Learns the baseline of objectives that name none, once `samples` samples of their
/// metric exist: the median of the first ones. Returns how many were learned.
pub async fn learn_baselines(
    db: &Db,
    objectives: &mut [Objective],
    samples: u32,
) -> anyhow::Result<usize> {
    let mut learned = 0;
    for o in objectives.iter_mut().filter(|o| o.baseline().is_none()) {
        let rows: Vec<(f64,)> = sqlx::query_as(
            "SELECT value FROM task_metric_samples WHERE task_id = $1 AND name = $2 \
             ORDER BY at_ms, id LIMIT $3",
        )
        .bind(i64::from(o.task_id))
        .bind(o.spec.metric.as_str())
        .bind(i64::from(samples))
        .fetch_all(db.pool())
        .await
        .context("reading first samples")?;
        if rows.len() < samples as usize {
            continue;
        }
        let values: Vec<f64> = rows.into_iter().map(|(v,)| v).collect();
        let Some(m) = median(&values).filter(|m| *m > 0.0) else {
            continue;
        };
        sqlx::query("UPDATE task_objectives SET learned_baseline = $1 WHERE task_id = $2 AND learned_baseline IS NULL")
            .bind(m)
            .bind(i64::from(o.task_id))
            .execute(db.pool())
            .await
            .context("storing a learned baseline")?;
        o.learned_baseline = Some(m);
        learned += 1;
        tracing::info!(task = o.task_id, metric = %o.spec.metric, baseline = m, "baseline learned");
    }
    Ok(learned)
}

/// Deletes samples older than `before_ms` and, per task, all but the newest `keep`.
/// Returns how many rows went.
pub async fn purge(db: &Db, before_ms: i64, keep: u32) -> anyhow::Result<u64> {
    let mut gone = sqlx::query("DELETE FROM task_metric_samples WHERE at_ms < $1")
        .bind(before_ms)
        .execute(db.pool())
        .await
        .context("purging old samples")?
        .rows_affected();
    let over: Vec<(i64,)> = sqlx::query_as(
        "SELECT task_id FROM task_metric_samples GROUP BY task_id HAVING COUNT(*) > $1",
    )
    .bind(i64::from(keep))
    .fetch_all(db.pool())
    .await
    .context("counting samples per task")?;
    for (task,) in over {
        gone += sqlx::query(
            "DELETE FROM task_metric_samples WHERE task_id = $1 AND id <= \
             (SELECT id FROM task_metric_samples WHERE task_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        )
        .bind(task)
        .bind(i64::from(keep))
        .execute(db.pool())
        .await
        .context("trimming a task's samples")?
        .rows_affected();
    }
    Ok(gone)
}
