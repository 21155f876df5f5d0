//! The `task_pair_periods` table (migration 0014): the analyzer stores, per finalized
//! period, the probe outcomes of every (prober, target) RNIC pair of two endpoints of one
//! task; task verdicts and the analyzer's task matrix read them back as C4D's
//! source × destination matrix.

use crate::Db;
use anyhow::Context;

/// Rows per multi-row INSERT (8 parameters each).
const INSERT_CHUNK: usize = 1_000;
const COLUMNS: &str =
    "task_id, period_start_ms, period_ms, src_rnic, dst_rnic, probes, lost, rtt_p50_ns";
const N_COLUMNS: usize = 8;

/// The task-pair repository of a [`Db`].
#[derive(Debug, Clone, Copy)]
pub struct TaskPairs<'a> {
    db: &'a Db,
}

impl Db {
    /// Per-period probe outcomes of the RNIC pairs of each task.
    pub fn task_pairs(&self) -> TaskPairs<'_> {
        TaskPairs { db: self }
    }
}

/// Probe outcomes of one task's RNIC pair in one period, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPairRow {
    /// The task's database id.
    pub task_id: u32,
    /// Start of the period, ms since the Unix epoch.
    pub period_start_ms: i64,
    /// Its length, ms.
    pub period_ms: i64,
    /// Registry id of the probing RNIC.
    pub src_rnic: u32,
    /// Registry id of the probed RNIC.
    pub dst_rnic: u32,
    /// Probes sent.
    pub probes: u64,
    /// Of which not answered.
    pub lost: u64,
    /// Median network RTT of the answered ones, ns.
    pub rtt_p50_ns: Option<u64>,
}

/// One pair's outcomes summed over the periods [`TaskPairs::cells`] read.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct TaskPairCell {
    /// The task's database id.
    pub task_id: i64,
    /// Registry id of the probing RNIC.
    pub src_rnic: i64,
    /// Registry id of the probed RNIC.
    pub dst_rnic: i64,
    /// Probes sent.
    pub probes: i64,
    /// Of which not answered.
    pub lost: i64,
    /// The periods' median RTTs averaged, weighted by their answered probes, ns (a
    /// summary: the median of the union is not recoverable from the rows).
    pub rtt_ns: Option<i64>,
}

/// Which cells [`TaskPairs::cells`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellFilter {
    /// Only this task (database id); every task when `None`.
    pub task: Option<u32>,
    /// Periods ending after this (ms since the Unix epoch).
    pub from_ms: i64,
    /// Periods starting at or before this.
    pub to_ms: i64,
    /// Most cells.
    pub limit: u32,
}

impl TaskPairs<'_> {
    /// Stores the rows of finalized periods in one transaction; a row already stored for
    /// the same (task, period, pair) is kept as it was.
    pub async fn persist(&self, rows: &[TaskPairRow]) -> anyhow::Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self
            .db
            .pool()
            .begin()
            .await
            .context("starting the task-pair transaction")?;
        for chunk in rows.chunks(INSERT_CHUNK) {
            let sql = super::insert_values(
                self.db.backend(),
                ("task_pair_periods", COLUMNS, N_COLUMNS),
                chunk.len(),
                "ON CONFLICT (task_id, period_start_ms, src_rnic, dst_rnic) DO NOTHING",
            );
            // Only a full chunk's text recurs; a last, shorter one is not kept prepared.
            let mut q = sqlx::query(&sql).persistent(chunk.len() == INSERT_CHUNK);
            let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            for r in chunk {
                q = q
                    .bind(i64::from(r.task_id))
                    .bind(r.period_start_ms)
                    .bind(r.period_ms)
                    .bind(i64::from(r.src_rnic))
                    .bind(i64::from(r.dst_rnic))
                    .bind(int(r.probes))
                    .bind(int(r.lost))
                    .bind(r.rtt_p50_ns.map(int));
            }
            q.execute(&mut *tx)
                .await
                .context("inserting task-pair rows")?;
        }
        tx.commit().await.context("committing task-pair rows")?;
        Ok(())
    }

    /// Deletes rows of periods that started before `before_ms`; returns how many went.
    pub async fn purge(&self, before_ms: i64) -> anyhow::Result<u64> {
        let r = sqlx::query("DELETE FROM task_pair_periods WHERE period_start_ms < $1")
            .bind(before_ms)
            .execute(self.db.pool())
            .await
            .context("purging task-pair rows")?;
        Ok(r.rows_affected())
    }

    /// Each pair's outcomes summed over the periods overlapping `[from_ms, to_ms]`, by
    /// task, then source, then destination; at most `limit` cells.
    pub async fn cells(&self, f: &CellFilter) -> anyhow::Result<Vec<TaskPairCell>> {
        let task = if f.task.is_some() {
            " AND task_id = $4"
        } else {
            ""
        };
        // Answered probes weight each period's median; a period with none has no median.
        let sql = format!(
            "SELECT task_id, src_rnic, dst_rnic, CAST(SUM(probes) AS BIGINT) AS probes, \
             CAST(SUM(lost) AS BIGINT) AS lost, \
             CAST(SUM(rtt_p50_ns * (probes - lost)) / \
               NULLIF(SUM(CASE WHEN rtt_p50_ns IS NULL THEN 0 ELSE probes - lost END), 0) \
               AS BIGINT) AS rtt_ns \
             FROM task_pair_periods WHERE period_start_ms + period_ms > $1 \
             AND period_start_ms <= $2{task} \
             GROUP BY task_id, src_rnic, dst_rnic ORDER BY task_id, src_rnic, dst_rnic LIMIT $3"
        );
        let mut q = sqlx::query_as(&sql)
            .bind(f.from_ms)
            .bind(f.to_ms)
            .bind(i64::from(f.limit));
        if let Some(t) = f.task {
            q = q.bind(i64::from(t));
        }
        q.fetch_all(self.db.pool())
            .await
            .context("reading task-pair cells")
    }
}
