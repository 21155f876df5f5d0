//! The durable outbox (`alert_outbox`): every notification of one alert to one receiver
//! is a row from the moment it is decided until it is delivered, given up or pruned.
//!
//! A sender claims due rows by moving their `due_ms` past a lease in one `UPDATE ...
//! RETURNING` (rows another sender claimed no longer match), sends them, then records the
//! outcome. Rows of a sender that crashed come due again when the lease ends.

use crate::payload::Alert;
use anyhow::Context;
use rocemesh_store::Db;
use serde::{Deserialize, Serialize};
use sqlx::{Any, Row, Transaction};
use utoipa::{IntoParams, ToSchema};

/// Most rows one claim takes.
pub const CLAIM_LIMIT: i64 = 500;
/// Most rows one listing returns.
pub const MAX_LIST: u32 = 1_000;

/// A notification to enqueue.
pub struct NewRow<'a> {
    /// Receiver name.
    pub receiver: &'a str,
    /// Problem (episode) id.
    pub problem_id: i64,
    /// Frozen priority label.
    pub priority: &'a str,
    /// Problem kind (wire name).
    pub kind: &'a str,
    /// The alert as it will be sent.
    pub alert: &'a Alert,
}

/// Adds a pending row inside the caller's transaction. It joins a group still waiting
/// (same receiver, priority and kind, never tried) by taking its due time, else it is
/// due after `group_wait_ms`. Returns false when the row existed already.
pub async fn enqueue(
    tx: &mut Transaction<'_, Any>,
    row: &NewRow<'_>,
    now_ms: i64,
    group_wait_ms: i64,
) -> anyhow::Result<bool> {
    let alert = serde_json::to_string(row.alert)?;
    let done = sqlx::query(
        "INSERT INTO alert_outbox (receiver, problem_id, status, priority, kind, component, alert, \
             state, attempts, due_ms, created_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 0, COALESCE((SELECT MIN(g.due_ms) \
             FROM alert_outbox g WHERE g.receiver = $1 AND g.priority = $4 AND g.kind = $5 \
             AND g.state = 'pending' AND g.attempts = 0 AND g.due_ms > $8 AND g.due_ms <= $9), $9), $8) \
         ON CONFLICT (receiver, problem_id, status) DO NOTHING",
    )
    .bind(row.receiver)
    .bind(row.problem_id)
    .bind(row.alert.status.as_str())
    .bind(row.priority)
    .bind(row.kind)
    .bind(row.alert.labels.get("component").map_or("", String::as_str))
    .bind(alert)
    .bind(now_ms)
    .bind(now_ms + group_wait_ms)
    .execute(&mut **tx)
    .await
    .with_context(|| format!("enqueueing an alert for receiver {}", row.receiver))?;
    Ok(done.rows_affected() == 1)
}

/// A claimed row, ready to send.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// Row id.
    pub id: i64,
    /// Receiver name.
    pub receiver: String,
    /// Priority label (group key).
    pub priority: String,
    /// Kind (group key).
    pub kind: String,
    /// The alert.
    pub alert: Alert,
    /// Attempts before this one.
    pub attempts: i64,
    /// When it was enqueued.
    pub created_ms: i64,
}

/// Claims up to [`CLAIM_LIMIT`] rows due at `now_ms` until `lease_until_ms`, oldest first.
/// A resolved notification waits while its firing one is pending and not due, so a
/// receiver never gets the end of an episode before its start.
pub async fn claim(db: &Db, now_ms: i64, lease_until_ms: i64) -> anyhow::Result<Vec<Claimed>> {
    let rows = sqlx::query(
        "UPDATE alert_outbox SET due_ms = $1 WHERE id IN (SELECT o.id FROM alert_outbox o \
             WHERE o.state = 'pending' AND o.due_ms <= $2 AND NOT (o.status = 'resolved' AND EXISTS \
                 (SELECT 1 FROM alert_outbox f WHERE f.receiver = o.receiver \
                  AND f.problem_id = o.problem_id AND f.status = 'firing' \
                  AND f.state = 'pending' AND f.due_ms > $2)) \
             ORDER BY o.id LIMIT $3) \
         AND state = 'pending' AND due_ms <= $2 \
         RETURNING id, receiver, priority, kind, alert, attempts, created_ms",
    )
    .bind(lease_until_ms)
    .bind(now_ms)
    .bind(CLAIM_LIMIT)
    .fetch_all(db.pool())
    .await
    .context("claiming due alerts")?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let id: i64 = r.try_get(0)?;
        let alert: String = r.try_get(4)?;
        out.push(Claimed {
            id,
            receiver: r.try_get(1)?,
            priority: r.try_get(2)?,
            kind: r.try_get(3)?,
            alert: serde_json::from_str(&alert)
                .with_context(|| format!("outbox row {id}: bad alert JSON"))?,
            attempts: r.try_get(5)?,
            created_ms: r.try_get(6)?,
        });
    }
    out.sort_by_key(|c| c.id);
    Ok(out)
}

/// What became of a claimed row.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The receiver answered 2xx.
    Delivered,
    /// Tried and failed; due again at the given time.
    Retry {
        /// When it is due again (ms since the epoch).
        due_ms: i64,
        /// Why the attempt failed.
        error: String,
    },
    /// Given up (permanent 4xx, expired, receiver removed).
    Failed {
        /// Why it was given up.
        error: String,
    },
    /// Not tried (an earlier request to the same receiver failed); due again then.
    Released {
        /// When it is due again (ms since the epoch).
        due_ms: i64,
    },
}

/// Records the outcome of the rows `ids` in one transaction.
pub async fn finish(db: &Db, ids: &[i64], outcome: &Outcome, now_ms: i64) -> anyhow::Result<()> {
    let mut tx = db.pool().begin().await?;
    for &id in ids {
        let q = match outcome {
            Outcome::Delivered => sqlx::query(
                "UPDATE alert_outbox SET state = 'delivered', attempts = attempts + 1, \
                 finished_ms = $1, last_error = NULL WHERE id = $2",
            )
            .bind(now_ms),
            Outcome::Retry { due_ms, error } => sqlx::query(
                "UPDATE alert_outbox SET attempts = attempts + 1, due_ms = $1, last_error = $2 \
                 WHERE id = $3",
            )
            .bind(*due_ms)
            .bind(error.clone()),
            Outcome::Failed { error } => sqlx::query(
                "UPDATE alert_outbox SET state = 'failed', attempts = attempts + 1, \
                 finished_ms = $1, last_error = $2 WHERE id = $3",
            )
            .bind(now_ms)
            .bind(error.clone()),
            Outcome::Released { due_ms } => {
                sqlx::query("UPDATE alert_outbox SET due_ms = $1 WHERE id = $2").bind(*due_ms)
            }
        };
        q.bind(id).execute(&mut *tx).await?;
    }
    tx.commit().await.context("recording alert deliveries")?;
    Ok(())
}

/// Drops what is older than the retention cut: finished rows, de-duplication records of
/// episodes resolved before it; gives up rows still pending since before it.
pub async fn prune(db: &Db, cut_ms: i64, now_ms: i64) -> anyhow::Result<u64> {
    let mut tx = db.pool().begin().await?;
    let expired = sqlx::query(
        "UPDATE alert_outbox SET state = 'failed', finished_ms = $1, \
         last_error = 'expired: undelivered within the retention time' \
         WHERE state = 'pending' AND created_ms < $2",
    )
    .bind(now_ms)
    .bind(cut_ms)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if expired > 0 {
        tracing::warn!(
            expired,
            "alert notifications given up after the retention time"
        );
    }
    let mut removed = 0;
    for sql in [
        "DELETE FROM alert_outbox WHERE state <> 'pending' AND finished_ms < $1",
        "DELETE FROM alert_episodes WHERE problem_id IN \
             (SELECT problem_id FROM alert_problems WHERE resolved_ms < $1)",
        "DELETE FROM alert_problems WHERE resolved_ms < $1",
    ] {
        removed += sqlx::query(sql)
            .bind(cut_ms)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    tx.commit().await.context("pruning the alert outbox")?;
    Ok(removed)
}

/// Filter of `GET /api/v1/alerts/outbox`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `pending`, `delivered`, `failed` or `all` (default).
    #[serde(default)]
    pub state: Option<String>,
    /// Only this receiver.
    #[serde(default)]
    pub receiver: Option<String>,
    /// Most rows, newest first (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One outbox row as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OutboxEntry {
    /// Row id.
    pub id: i64,
    /// Receiver name.
    pub receiver: String,
    /// Problem id.
    pub problem_id: i64,
    /// `firing` or `resolved`.
    pub status: String,
    /// Priority label at firing.
    pub priority: String,
    /// Problem kind.
    pub kind: String,
    /// Component name.
    pub component: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// Delivery attempts so far.
    pub attempts: i64,
    /// Next attempt (pending rows), ms since the epoch.
    pub due_ms: i64,
    /// Enqueued at.
    pub created_ms: i64,
    /// Delivered or given up at.
    pub finished_ms: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
}

/// Outbox rows matching `q`, newest first; `Err` names a bad filter value.
pub async fn list(db: &Db, q: &ListQuery) -> Result<Vec<OutboxEntry>, ListError> {
    let state = match q.state.as_deref() {
        None | Some("all") => None,
        Some(s @ ("pending" | "delivered" | "failed")) => Some(s),
        Some(other) => {
            return Err(ListError::Bad(format!(
                "state must be pending, delivered, failed or all, not {other:?}"
            )));
        }
    };
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIST {
        return Err(ListError::Bad(format!("limit must be 1 to {MAX_LIST}")));
    }
    let rows = sqlx::query(
        "SELECT id, receiver, problem_id, status, priority, kind, component, state, attempts, \
             due_ms, created_ms, finished_ms, last_error FROM alert_outbox \
         WHERE ($1 = '' OR state = $1) AND ($2 = '' OR receiver = $2) ORDER BY id DESC LIMIT $3",
    )
    .bind(state.unwrap_or(""))
    .bind(q.receiver.as_deref().unwrap_or(""))
    .bind(i64::from(limit))
    .fetch_all(db.pool())
    .await
    .map_err(|e| ListError::Db(e.into()))?;
    rows.iter()
        .map(|r| {
            Ok(OutboxEntry {
                id: r.try_get(0)?,
                receiver: r.try_get(1)?,
                problem_id: r.try_get(2)?,
                status: r.try_get(3)?,
                priority: r.try_get(4)?,
                kind: r.try_get(5)?,
                component: r.try_get(6)?,
                state: r.try_get(7)?,
                attempts: r.try_get(8)?,
                due_ms: r.try_get(9)?,
                created_ms: r.try_get(10)?,
                finished_ms: r.try_get(11)?,
                last_error: r.try_get(12)?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(|e| ListError::Db(e.into()))
}

/// Why a listing failed.
#[derive(Debug)]
pub enum ListError {
    /// A bad filter (the message says which).
    Bad(String),
    /// The database failed.
    Db(anyhow::Error),
}
