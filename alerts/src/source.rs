//! Turns the `problems` table into outbox rows: firing when an episode becomes active
//! (once its priority is known, or `priority_wait_ms` passed), resolved when it ends.
//!
//! Each decision is one transaction that records what was seen (`alert_problems`,
//! `alert_episodes`) and enqueues the notifications, so a restart neither forgets nor
//! repeats one: an `alert_episodes` row exists exactly when its firing row was enqueued.

use crate::outbox::{self, NewRow};
use crate::payload::{self, Status, priority_label, wire_name};
use crate::receiver::{Receiver, UNKNOWN_PRIORITY};
use anyhow::Context;
use rocemesh_proto::api::{Evidence, Priority, Problem, ProblemState};
use rocemesh_store::Db;
use sqlx::Row;
use std::collections::{HashMap, HashSet};

/// Most problems looked at per poll (the analyzer keeps the active set small).
const MAX_CANDIDATES: i64 = 1_000;

/// Timing the source needs.
pub struct Timing {
    /// Now, ms since the epoch.
    pub now_ms: i64,
    /// Problems resolved before this are history (first start of the service, or the
    /// retention cut, whichever is later).
    pub horizon_ms: i64,
    /// How long an unassessed problem waits for its priority.
    pub priority_wait_ms: i64,
    /// Group wait of new outbox rows.
    pub group_wait_ms: i64,
}

/// A problem with what the alerts service recorded about it.
struct Candidate {
    problem: Problem,
    /// `alert_problems.priority` when it fired already.
    frozen: Option<String>,
    /// `alert_problems.resolved_ms` is set.
    resolved_seen: bool,
}

/// Where the problem filter of both queries lives: active episodes, and resolved ones
/// after the horizon not yet fully handled.
const CANDIDATES: &str = "FROM problems p LEFT JOIN alert_problems a ON a.problem_id = p.id \
    WHERE p.state = 'active' OR (p.state = 'resolved' AND p.resolved_ms >= $1 AND a.resolved_ms IS NULL)";

async fn candidates(db: &Db, horizon_ms: i64) -> anyhow::Result<Vec<Candidate>> {
    let sql = format!(
        "SELECT p.id, p.kind, p.component_kind, p.component, p.state, p.confidence, p.network, \
             p.first_seen_ms, p.last_seen_ms, p.resolved_ms, p.evidence, p.priority, \
             p.affected_tasks, a.priority, a.fired_ms, a.resolved_ms {CANDIDATES} ORDER BY p.id LIMIT $2"
    );
    let rows = sqlx::query(&sql)
        .bind(horizon_ms)
        .bind(MAX_CANDIDATES)
        .fetch_all(db.pool())
        .await
        .context("reading problems for alerts")?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let id: i64 = r.try_get(0)?;
        let text = |i: usize| -> anyhow::Result<serde_json::Value> {
            Ok(serde_json::Value::String(r.try_get::<String, _>(i)?))
        };
        let evidence: String = r.try_get(10)?;
        let priority: Option<String> = r.try_get(11)?;
        let tasks: Option<String> = r.try_get(12)?;
        let network: i64 = r.try_get(6)?;
        let fired: Option<i64> = r.try_get(14)?;
        let resolved_seen: Option<i64> = r.try_get(15)?;
        let problem = Problem {
            id,
            kind: serde_json::from_value(text(1)?)
                .with_context(|| format!("problem {id}: unknown kind"))?,
            component_kind: serde_json::from_value(text(2)?)
                .with_context(|| format!("problem {id}: unknown component kind"))?,
            component: r.try_get(3)?,
            state: serde_json::from_value(text(4)?)
                .with_context(|| format!("problem {id}: unknown state"))?,
            confidence: r.try_get(5)?,
            network: network != 0,
            first_seen_ms: r.try_get(7)?,
            last_seen_ms: r.try_get(8)?,
            resolved_ms: r.try_get(9)?,
            // Evidence only decorates the description: a bad one is not worth a lost alert.
            evidence: serde_json::from_str::<Evidence>(&evidence).unwrap_or_default(),
            priority: priority.as_deref().and_then(Priority::parse),
            affected_tasks: tasks
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default(),
        };
        out.push(Candidate {
            problem,
            frozen: fired.and(r.try_get(13)?),
            resolved_seen: resolved_seen.is_some(),
        });
    }
    Ok(out)
}

/// (problem, receiver) pairs notified firing, and whether their resolved went out.
async fn episodes(db: &Db, horizon_ms: i64) -> anyhow::Result<HashMap<(i64, String), bool>> {
    let sql = format!(
        "SELECT e.problem_id, e.receiver, e.resolved_ms FROM alert_episodes e \
         JOIN (SELECT p.id {CANDIDATES}) c ON c.id = e.problem_id"
    );
    let rows = sqlx::query(&sql)
        .bind(horizon_ms)
        .fetch_all(db.pool())
        .await
        .context("reading alert episodes")?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let resolved: Option<i64> = r.try_get(2)?;
        out.insert((r.try_get(0)?, r.try_get(1)?), resolved.is_some());
    }
    Ok(out)
}

/// One look at the problems table; returns how many notifications were enqueued.
pub async fn poll(
    db: &Db,
    receivers: &[Receiver],
    external_url: &str,
    t: &Timing,
) -> anyhow::Result<usize> {
    let candidates = candidates(db, t.horizon_ms).await?;
    if candidates.is_empty() {
        return Ok(0);
    }
    let seen = episodes(db, t.horizon_ms).await?;
    let mut enqueued = 0;
    for c in candidates {
        enqueued += handle(db, receivers, external_url, t, &c, &seen)
            .await
            .with_context(|| format!("alerting on problem {}", c.problem.id))?;
    }
    Ok(enqueued)
}

/// The priority label the episode fires with, or None to keep waiting for the assessment.
fn firing_priority(c: &Candidate, t: &Timing) -> Option<String> {
    if let Some(f) = &c.frozen {
        return Some(f.clone());
    }
    let p = &c.problem;
    match p.priority {
        Some(prio) => Some(prio.as_str().to_string()),
        None if p.state == ProblemState::Resolved
            || t.now_ms - p.first_seen_ms >= t.priority_wait_ms =>
        {
            Some(UNKNOWN_PRIORITY.to_string())
        }
        None => None,
    }
}

async fn handle(
    db: &Db,
    receivers: &[Receiver],
    external_url: &str,
    t: &Timing,
    c: &Candidate,
    seen: &HashMap<(i64, String), bool>,
) -> anyhow::Result<usize> {
    let p = &c.problem;
    let Some(prio_label) = firing_priority(c, t) else {
        return Ok(0);
    };
    let prio = Priority::parse(&prio_label);
    let is_seen = |r: &Receiver| seen.contains_key(&(p.id, r.name.clone()));
    // New firing notifications: every matching receiver without one, while the episode is
    // active or was never notified at all (it started and ended between two polls).
    let fire_to: Vec<&Receiver> = if p.state == ProblemState::Active || c.frozen.is_none() {
        receivers
            .iter()
            .filter(|r| r.filters.accepts(prio, p.component_kind) && !is_seen(r))
            .collect()
    } else {
        Vec::new()
    };
    let resolving = p.state == ProblemState::Resolved && !c.resolved_seen;
    if fire_to.is_empty() && c.frozen.is_some() && !resolving {
        return Ok(0);
    }
    let kind = wire_name(&p.kind);
    let mut tx = db.pool().begin().await?;
    sqlx::query(
        "INSERT INTO alert_problems (problem_id, priority, fired_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (problem_id) DO NOTHING",
    )
    .bind(p.id)
    .bind(prio_label.as_str())
    .bind(t.now_ms)
    .execute(&mut *tx)
    .await?;
    let mut enqueued = 0;
    let mut notified: HashSet<&str> = HashSet::new();
    let firing = payload::alert(p, prio, Status::Firing, external_url);
    for r in fire_to {
        let fresh = sqlx::query(
            "INSERT INTO alert_episodes (problem_id, receiver, fired_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (problem_id, receiver) DO NOTHING",
        )
        .bind(p.id)
        .bind(r.name.as_str())
        .bind(t.now_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if fresh {
            let row = NewRow {
                receiver: &r.name,
                problem_id: p.id,
                priority: &prio_label,
                kind: &kind,
                alert: &firing,
            };
            enqueued +=
                usize::from(outbox::enqueue(&mut tx, &row, t.now_ms, t.group_wait_ms).await?);
            notified.insert(&r.name);
        }
    }
    if resolving {
        let resolved = payload::alert(p, prio, Status::Resolved, external_url);
        // Receivers that got (or now get) the firing one and still exist.
        for r in receivers.iter().filter(|r| {
            notified.contains(r.name.as_str()) || seen.get(&(p.id, r.name.clone())) == Some(&false)
        }) {
            let row = NewRow {
                receiver: &r.name,
                problem_id: p.id,
                priority: &prio_label,
                kind: &kind,
                alert: &resolved,
            };
            enqueued +=
                usize::from(outbox::enqueue(&mut tx, &row, t.now_ms, t.group_wait_ms).await?);
        }
        for sql in [
            "UPDATE alert_episodes SET resolved_ms = $2 WHERE problem_id = $1 AND resolved_ms IS NULL",
            "UPDATE alert_problems SET resolved_ms = $2 WHERE problem_id = $1 AND resolved_ms IS NULL",
        ] {
            sqlx::query(sql)
                .bind(p.id)
                .bind(p.resolved_ms.unwrap_or(t.now_ms))
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    if enqueued > 0 {
        tracing::info!(
            problem = p.id,
            component = %p.component,
            priority = priority_label(prio),
            enqueued,
            "alert notifications enqueued"
        );
    }
    Ok(enqueued)
}
