//! The `sla_periods` table (migrations 0002 and 0013): the analyzer stores the SLA rows
//! of every finalized period; its API and the impact loop's coverage read them back.

use crate::Db;
use anyhow::Context;
use rocemesh_proto::api::{Quantiles, SlaRow, SlaScope};
use sqlx::Row;
use std::collections::HashMap;

/// Rows per multi-row INSERT (24 parameters each; stays far below the
/// SQLite and PostgreSQL parameter limits).
const INSERT_CHUNK: usize = 500;

const COLUMNS: &str = "period_start_ms, period_ms, scope, scope_key, probes, timeouts, \
    network_rtt_p50_ns, network_rtt_p90_ns, network_rtt_p99_ns, network_rtt_p999_ns, \
    prober_delay_p50_ns, prober_delay_p90_ns, prober_delay_p99_ns, prober_delay_p999_ns, \
    responder_delay_p50_ns, responder_delay_p90_ns, responder_delay_p99_ns, responder_delay_p999_ns, \
    app_rtt_p50_ns, app_rtt_p90_ns, app_rtt_p99_ns, app_rtt_p999_ns, rnic_drops, switch_drops";
const N_COLUMNS: usize = 24;

/// The SLA repository of a [`Db`].
#[derive(Debug, Clone, Copy)]
pub struct Sla<'a> {
    db: &'a Db,
}

impl Db {
    /// The SLA rows of finalized periods.
    pub fn sla(&self) -> Sla<'_> {
        Sla { db: self }
    }
}

/// Which stored rows [`Sla::rows`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlaFilter<'a> {
    /// Their scope.
    pub scope: SlaScope,
    /// Only this key, if given.
    pub key: Option<&'a str>,
    /// Periods starting at or after this.
    pub from_ms: i64,
    /// Periods starting before this.
    pub to_ms: i64,
    /// Most rows.
    pub limit: u32,
}

fn quantile_params(q: &Quantiles) -> [Option<i64>; 4] {
    [q.p50, q.p90, q.p99, q.p999].map(|v| v.map(|v| v as i64))
}

impl Sla<'_> {
    /// Stores the rows of finalized periods in one transaction (multi-row inserts).
    /// A row already stored for the same (scope, key, period) is kept as it was.
    pub async fn persist(&self, rows: &[SlaRow]) -> anyhow::Result<()> {
        let mut conn = self
            .db
            .pool()
            .acquire()
            .await
            .context("starting the SLA transaction")?;
        let mut tx = sqlx::Connection::begin(&mut *conn)
            .await
            .context("starting the SLA transaction")?;
        for chunk in rows.chunks(INSERT_CHUNK) {
            let sql = super::insert_values(
                self.db.backend(),
                ("sla_periods", COLUMNS, N_COLUMNS),
                chunk.len(),
                "ON CONFLICT (scope, scope_key, period_start_ms) DO NOTHING",
            );
            // Only a full chunk's text recurs; a last, shorter one is not kept prepared.
            let mut q = sqlx::query(&sql).persistent(chunk.len() == INSERT_CHUNK);
            for r in chunk {
                q = q
                    .bind(r.period_start_ms)
                    .bind(r.period_ms)
                    .bind(r.scope.as_str())
                    .bind(r.key.as_str())
                    .bind(r.probes)
                    .bind(r.timeouts);
                for q4 in [
                    &r.network_rtt_ns,
                    &r.prober_delay_ns,
                    &r.responder_delay_ns,
                    &r.app_rtt_ns,
                ] {
                    for v in quantile_params(q4) {
                        q = q.bind(v);
                    }
                }
                q = q.bind(r.rnic_drops).bind(r.switch_drops);
            }
            q.execute(&mut *tx).await.context("inserting SLA rows")?;
        }
        if let Err(e) = tx.commit().await {
            // A failed COMMIT (SQLite: disk full) can leave this connection holding the
            // database's write lock, which would lock out every later writer even once space
            // returns: close it rather than give it back to the pool.
            conn.close_on_drop();
            return Err(anyhow::Error::from(e).context("committing SLA rows"));
        }
        Ok(())
    }

    /// Deletes cluster/ToR-pair rows that started before `before_ms` and RNIC rows
    /// that started before `rnic_before_ms`; returns how many rows went.
    pub async fn purge(&self, before_ms: i64, rnic_before_ms: i64) -> anyhow::Result<u64> {
        let a =
            sqlx::query("DELETE FROM sla_periods WHERE scope <> 'rnic' AND period_start_ms < $1")
                .bind(before_ms)
                .execute(self.db.pool())
                .await
                .context("purging SLA rows")?;
        let b =
            sqlx::query("DELETE FROM sla_periods WHERE scope = 'rnic' AND period_start_ms < $1")
                .bind(rnic_before_ms)
                .execute(self.db.pool())
                .await
                .context("purging RNIC SLA rows")?;
        Ok(a.rows_affected() + b.rows_affected())
    }

    /// Start of the newest stored period, so a restarted analyzer never finalizes it twice.
    pub async fn newest_period_start(&self) -> anyhow::Result<Option<i64>> {
        let (v,): (Option<i64>,) = sqlx::query_as("SELECT MAX(period_start_ms) FROM sla_periods")
            .fetch_one(self.db.pool())
            .await
            .context("reading the newest SLA period")?;
        Ok(v)
    }

    /// Probes RNIC `rnic` took part in (as prober or target) in periods overlapping
    /// `[from, to]`, and how many of them timed out.
    pub async fn rnic_totals(&self, rnic: u32, from: i64, to: i64) -> anyhow::Result<(u64, u64)> {
        let (probes, lost): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT CAST(SUM(probes) AS BIGINT), CAST(SUM(timeouts) AS BIGINT) FROM sla_periods \
             WHERE scope = 'rnic' AND scope_key = $1 AND period_start_ms + period_ms > $2 \
             AND period_start_ms <= $3",
        )
        .bind(rnic.to_string())
        .bind(from)
        .bind(to)
        .fetch_one(self.db.pool())
        .await
        .context("reading an RNIC's probe totals")?;
        let n = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).unwrap_or(0);
        Ok((n(probes), n(lost)))
    }

    /// Probes each of `rnics` took part in during periods overlapping `[from, to]`, for
    /// the RNICs with any period there.
    pub async fn rnic_probes(
        &self,
        rnics: &[u32],
        from: i64,
        to: i64,
    ) -> anyhow::Result<HashMap<u32, i64>> {
        let mut probes_of = HashMap::new();
        if rnics.is_empty() {
            return Ok(probes_of);
        }
        let ids: Vec<String> = rnics.iter().map(|id| format!("'{id}'")).collect();
        // Ids are registry integers, so inlining them is safe.
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT scope_key, CAST(SUM(probes) AS BIGINT) FROM sla_periods WHERE scope = 'rnic' \
             AND scope_key IN ({}) AND period_start_ms + period_ms > $1 AND period_start_ms <= $2 \
             GROUP BY scope_key",
            ids.join(",")
        ))
        // The text differs with every set of ids: a cached statement per set would stay
        // prepared on its connection (tens of KB to MB each, one per task).
        .persistent(false)
        .bind(from)
        .bind(to)
        .fetch_all(self.db.pool())
        .await
        .context("reading RNIC coverage")?;
        for (key, probes) in rows {
            if let Ok(id) = key.parse() {
                probes_of.insert(id, probes);
            }
        }
        Ok(probes_of)
    }

    /// Stored rows matching `f`, newest period first, then by key.
    pub async fn rows(&self, f: &SlaFilter<'_>) -> anyhow::Result<Vec<SlaRow>> {
        let key_filter = if f.key.is_some() {
            " AND scope_key = $5"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM sla_periods WHERE scope = $1 AND period_start_ms >= $2 AND period_start_ms < $3\
             {key_filter} ORDER BY period_start_ms DESC, scope_key LIMIT $4"
        );
        let mut query = sqlx::query(&sql)
            .bind(f.scope.as_str())
            .bind(f.from_ms)
            .bind(f.to_ms)
            .bind(i64::from(f.limit));
        if let Some(k) = f.key {
            query = query.bind(k);
        }
        let rows = query
            .fetch_all(self.db.pool())
            .await
            .context("querying SLA rows")?;
        rows.iter().map(decode_row).collect()
    }

    /// Every stored row of the period starting at `start_ms`, by scope, then key (RNIC
    /// ids numerically), the order the analyzer keeps them in memory.
    pub async fn period(&self, start_ms: i64) -> anyhow::Result<Vec<SlaRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM sla_periods WHERE period_start_ms = $1 ORDER BY scope, scope_key"
        );
        let rows = sqlx::query(&sql)
            .bind(start_ms)
            .fetch_all(self.db.pool())
            .await
            .context("reading an SLA period")?;
        let mut rows = rows
            .iter()
            .map(decode_row)
            .collect::<anyhow::Result<Vec<_>>>()?;
        rows.sort_by_cached_key(|r| (r.scope, r.key.parse::<u64>().ok(), r.key.clone()));
        Ok(rows)
    }
}

fn decode_row(r: &sqlx::any::AnyRow) -> anyhow::Result<SlaRow> {
    let scope: String = r.try_get(2)?;
    let Some(scope) = SlaScope::parse(&scope) else {
        anyhow::bail!("unknown SLA scope {scope:?} in the database");
    };
    let quantiles = |first: usize| -> anyhow::Result<Quantiles> {
        let v = |i: usize| -> anyhow::Result<Option<u64>> {
            Ok(r.try_get::<Option<i64>, _>(first + i)?
                .map(|v| v.max(0) as u64))
        };
        Ok(Quantiles {
            p50: v(0)?,
            p90: v(1)?,
            p99: v(2)?,
            p999: v(3)?,
        })
    };
    let probes: i64 = r.try_get(4)?;
    let timeouts: i64 = r.try_get(5)?;
    let rnic_drops: i64 = r.try_get(22)?;
    let switch_drops: i64 = r.try_get(23)?;
    let rate = |n: i64| {
        if probes > 0 {
            n as f64 / probes as f64
        } else {
            0.0
        }
    };
    Ok(SlaRow {
        period_start_ms: r.try_get(0)?,
        period_ms: r.try_get(1)?,
        scope,
        key: r.try_get(3)?,
        probes,
        timeouts,
        timeout_rate: rate(timeouts),
        rnic_drops,
        switch_drops,
        rnic_drop_rate: rate(rnic_drops),
        switch_drop_rate: rate(switch_drops),
        network_rtt_ns: quantiles(6)?,
        prober_delay_ns: quantiles(10)?,
        responder_delay_ns: quantiles(14)?,
        app_rtt_ns: quantiles(18)?,
        labels: Vec::new(),
    })
}
