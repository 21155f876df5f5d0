//! SLA rows: built from a finalized period, stored in `sla_periods`, queried back.

use crate::registry::Registry;
use crate::window::{MetricSet, Period};
use anyhow::Context;
use rocemesh_proto::api::{Quantiles, SlaRow, SlaScope};
use rocemesh_store::{Backend, Db};
use serde::Deserialize;
use sqlx::Row;
use std::fmt::Write as _;

/// Rows per multi-row INSERT (22 parameters each; stays far below the
/// SQLite and PostgreSQL parameter limits).
const INSERT_CHUNK: usize = 500;
/// Rows a query returns when it names no `limit`.
const DEFAULT_LIMIT: u32 = 100;
/// Largest `limit` a query may ask for.
const MAX_LIMIT: u32 = 10_000;

const COLUMNS: &str = "period_start_ms, period_ms, scope, scope_key, probes, timeouts, \
    network_rtt_p50_ns, network_rtt_p90_ns, network_rtt_p99_ns, network_rtt_p999_ns, \
    prober_delay_p50_ns, prober_delay_p90_ns, prober_delay_p99_ns, prober_delay_p999_ns, \
    responder_delay_p50_ns, responder_delay_p90_ns, responder_delay_p99_ns, responder_delay_p999_ns, \
    app_rtt_p50_ns, app_rtt_p90_ns, app_rtt_p99_ns, app_rtt_p999_ns";
const N_COLUMNS: usize = 22;

fn row(start_ms: i64, period_ms: i64, scope: SlaScope, key: String, m: &MetricSet) -> SlaRow {
    SlaRow {
        period_start_ms: start_ms,
        period_ms,
        scope,
        key,
        probes: m.probes as i64,
        timeouts: m.timeouts as i64,
        timeout_rate: if m.probes == 0 {
            0.0
        } else {
            m.timeouts as f64 / m.probes as f64
        },
        network_rtt_ns: m.network_rtt.quantiles(),
        prober_delay_ns: m.prober_delay.quantiles(),
        responder_delay_ns: m.responder_delay.quantiles(),
        app_rtt_ns: m.app_rtt.quantiles(),
        labels: Vec::new(),
    }
}

/// Every non-empty scope of a finalized period, as rows (cluster, ToR pairs, RNICs;
/// each group sorted by key).
pub fn period_rows(p: &Period, period_ms: i64, registry: &Registry) -> Vec<SlaRow> {
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

fn quantile_params(q: &Quantiles) -> [Option<i64>; 4] {
    [q.p50, q.p90, q.p99, q.p999].map(|v| v.map(|v| v as i64))
}

/// Stores the rows of finalized periods in one transaction (multi-row inserts).
/// A row already stored for the same (scope, key, period) is kept as it was.
pub async fn persist(db: &Db, rows: &[SlaRow]) -> anyhow::Result<()> {
    // SQLite resolves `$N` names by a linear search per parameter, which makes a
    // 10,000-parameter statement take ~0.3 s; its positional `?` binds in order.
    let positional = db.backend() == Backend::Sqlite;
    let mut conn = db
        .pool()
        .acquire()
        .await
        .context("starting the SLA transaction")?;
    let mut tx = sqlx::Connection::begin(&mut *conn)
        .await
        .context("starting the SLA transaction")?;
    for chunk in rows.chunks(INSERT_CHUNK) {
        let mut sql = format!("INSERT INTO sla_periods ({COLUMNS}) VALUES ");
        for i in 0..chunk.len() {
            sql.push_str(if i == 0 { "(" } else { ", (" });
            for c in 0..N_COLUMNS {
                let sep = if c == 0 { "" } else { ", " };
                if positional {
                    let _ = write!(sql, "{sep}?");
                } else {
                    let _ = write!(sql, "{sep}${}", i * N_COLUMNS + c + 1);
                }
            }
            sql.push(')');
        }
        sql.push_str(" ON CONFLICT (scope, scope_key, period_start_ms) DO NOTHING");
        let mut q = sqlx::query(&sql);
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
pub async fn purge(db: &Db, before_ms: i64, rnic_before_ms: i64) -> anyhow::Result<u64> {
    let a = sqlx::query("DELETE FROM sla_periods WHERE scope <> 'rnic' AND period_start_ms < $1")
        .bind(before_ms)
        .execute(db.pool())
        .await
        .context("purging SLA rows")?;
    let b = sqlx::query("DELETE FROM sla_periods WHERE scope = 'rnic' AND period_start_ms < $1")
        .bind(rnic_before_ms)
        .execute(db.pool())
        .await
        .context("purging RNIC SLA rows")?;
    Ok(a.rows_affected() + b.rows_affected())
}

/// Start of the newest stored period, so a restarted analyzer never finalizes it twice.
pub async fn newest_period_start(db: &Db) -> anyhow::Result<Option<i64>> {
    let (v,): (Option<i64>,) = sqlx::query_as("SELECT MAX(period_start_ms) FROM sla_periods")
        .fetch_one(db.pool())
        .await
        .context("reading the newest SLA period")?;
    Ok(v)
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
    let (from, to) = (q.from_ms.unwrap_or(i64::MIN), q.to_ms.unwrap_or(i64::MAX));
    let key_filter = if q.key.is_some() {
        " AND scope_key = $5"
    } else {
        ""
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM sla_periods WHERE scope = $1 AND period_start_ms >= $2 AND period_start_ms < $3\
         {key_filter} ORDER BY period_start_ms DESC, scope_key LIMIT $4"
    );
    let mut query = sqlx::query(&sql)
        .bind(q.scope.as_str())
        .bind(from)
        .bind(to)
        .bind(i64::from(limit));
    if let Some(k) = &q.key {
        query = query.bind(k.as_str());
    }
    let rows = query
        .fetch_all(db.pool())
        .await
        .context("querying SLA rows")?;
    let mut rows = rows
        .iter()
        .map(decode_row)
        .collect::<anyhow::Result<Vec<_>>>()?;
    label_rnic_rows(db, &mut rows).await?;
    Ok(rows)
}

/// Every stored row of the period starting at `start_ms` (the "latest" view after a restart).
pub async fn period(db: &Db, start_ms: i64) -> anyhow::Result<Vec<SlaRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM sla_periods WHERE period_start_ms = $1 ORDER BY scope, scope_key"
    );
    let rows = sqlx::query(&sql)
        .bind(start_ms)
        .fetch_all(db.pool())
        .await
        .context("reading an SLA period")?;
    let mut rows = rows
        .iter()
        .map(decode_row)
        .collect::<anyhow::Result<Vec<_>>>()?;
    // The in-memory order: scope, then key (RNIC ids numerically).
    rows.sort_by_cached_key(|r| (r.scope, r.key.parse::<u64>().ok(), r.key.clone()));
    label_rnic_rows(db, &mut rows).await?;
    Ok(rows)
}

fn decode_row(r: &sqlx::any::AnyRow) -> anyhow::Result<SlaRow> {
    let scope: String = r.try_get(2)?;
    let scope = match scope.as_str() {
        "cluster" => SlaScope::Cluster,
        "tor_pair" => SlaScope::TorPair,
        "rnic" => SlaScope::Rnic,
        other => anyhow::bail!("unknown SLA scope {other:?} in the database"),
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
    Ok(SlaRow {
        period_start_ms: r.try_get(0)?,
        period_ms: r.try_get(1)?,
        scope,
        key: r.try_get(3)?,
        probes,
        timeouts,
        timeout_rate: if probes > 0 {
            timeouts as f64 / probes as f64
        } else {
            0.0
        },
        network_rtt_ns: quantiles(6)?,
        prober_delay_ns: quantiles(10)?,
        responder_delay_ns: quantiles(14)?,
        app_rtt_ns: quantiles(18)?,
        labels: Vec::new(),
    })
}
