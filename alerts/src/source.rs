//! Turns the stored problems into outbox rows: firing when an episode becomes active
//! (once its priority is known, or `priority_wait_ms` passed), resolved when it ends.
//!
//! Each decision is one transaction that records what was seen (`alert_problems`,
//! `alert_episodes`) and enqueues the notifications, so a restart neither forgets nor
//! repeats one: an `alert_episodes` row exists exactly when its firing row was enqueued.

use crate::outbox::{self, NewRow};
use crate::payload::{self, Status, priority_label, wire_name};
use crate::receiver::{Receiver, UNKNOWN_PRIORITY};
use anyhow::Context;
use rocemesh_proto::api::{Priority, Problem, ProblemState};
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

/// What the alerts service recorded about a problem (`alert_problems`).
struct Recorded {
    /// The priority it fired with.
    priority: String,
    /// When its resolved notifications were enqueued.
    resolved_ms: Option<i64>,
}

/// Up to `max` problems by id: the active episodes, and those resolved after the horizon
/// not yet fully handled.
async fn candidates(db: &Db, horizon_ms: i64, max: i64) -> anyhow::Result<Vec<Candidate>> {
    let mut out = Vec::new();
    let mut after = i64::MIN;
    loop {
        let page = db
            .problems()
            .live_or_resolved_since(horizon_ms, after, max)
            .await
            .context("reading problems for alerts")?;
        let Some(last) = page.last() else {
            break;
        };
        after = last.id;
        let full = page.len() as i64 == max;
        let mut recorded = recorded(db, page.iter().map(|p| p.id)).await?;
        for problem in page {
            let a = recorded.remove(&problem.id);
            let resolved_seen = a.as_ref().is_some_and(|a| a.resolved_ms.is_some());
            if problem.state != ProblemState::Active && resolved_seen {
                continue;
            }
            out.push(Candidate {
                frozen: a.map(|a| a.priority),
                resolved_seen,
                problem,
            });
            if out.len() as i64 == max {
                return Ok(out);
            }
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

/// The `alert_problems` rows of problems `ids`, by problem id.
async fn recorded(
    db: &Db,
    ids: impl Iterator<Item = i64>,
) -> anyhow::Result<HashMap<i64, Recorded>> {
    let ids: Vec<String> = ids.map(|id| id.to_string()).collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    // Ids are integers from the problems table, so inlining them is safe.
    let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT problem_id, priority, resolved_ms FROM alert_problems \
         WHERE problem_id IN ({})",
        ids.join(",")
    ))
    // The text differs with every set of ids: not kept prepared on its connection.
    .persistent(false)
    .fetch_all(db.pool())
    .await
    .context("reading alerted problems")?;
    Ok(rows
        .into_iter()
        .map(|(id, priority, resolved_ms)| {
            (
                id,
                Recorded {
                    priority,
                    resolved_ms,
                },
            )
        })
        .collect())
}

/// (problem, receiver) pairs notified firing, and whether their resolved went out, for
/// the `candidates`.
async fn episodes(
    db: &Db,
    candidates: &[Candidate],
) -> anyhow::Result<HashMap<(i64, String), bool>> {
    let ids: Vec<String> = candidates
        .iter()
        .map(|c| c.problem.id.to_string())
        .collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    // Ids are integers from the problems table, so inlining them is safe.
    let sql = format!(
        "SELECT problem_id, receiver, resolved_ms FROM alert_episodes WHERE problem_id IN ({})",
        ids.join(",")
    );
    // The text differs with every set of ids: not kept prepared on its connection.
    let rows = sqlx::query(&sql)
        .persistent(false)
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

/// One look at the stored problems; returns how many notifications were enqueued.
pub async fn poll(
    db: &Db,
    receivers: &[Receiver],
    external_url: &str,
    t: &Timing,
) -> anyhow::Result<usize> {
    let candidates = candidates(db, t.horizon_ms, MAX_CANDIDATES).await?;
    if candidates.is_empty() {
        return Ok(0);
    }
    let seen = episodes(db, &candidates).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::{ComponentKind, ProblemKind};
    use rocemesh_proto::testing::active_problem;

    #[tokio::test]
    async fn handled_resolved_problems_do_not_crowd_out_live_ones() {
        for (name, db) in rocemesh_store::test_databases().await {
            let mut ids = Vec::new();
            for (i, state) in ["resolved", "resolved", "resolved", "active", "resolved"]
                .into_iter()
                .enumerate()
            {
                let mut p = active_problem(
                    0,
                    ProblemKind::LinkFault,
                    ComponentKind::Link,
                    &format!("l{i}"),
                    "",
                );
                if state == "resolved" {
                    p.state = ProblemState::Resolved;
                    p.resolved_ms = Some(100);
                }
                ids.push(db.problems().insert(&p).await.unwrap());
            }
            // The first three were notified resolved already; the last fired only.
            for (id, resolved) in [
                (ids[0], true),
                (ids[1], true),
                (ids[2], true),
                (ids[4], false),
            ] {
                sqlx::query(
                    "INSERT INTO alert_problems (problem_id, priority, fired_ms, resolved_ms) \
                     VALUES ($1, 'P1', 50, $2)",
                )
                .bind(id)
                .bind(resolved.then_some(100_i64))
                .execute(db.pool())
                .await
                .unwrap();
            }
            let got = candidates(&db, 0, 2).await.unwrap();
            let got: Vec<(i64, Option<&str>)> = got
                .iter()
                .map(|c| (c.problem.id, c.frozen.as_deref()))
                .collect();
            assert_eq!(got, vec![(ids[3], None), (ids[4], Some("P1"))], "{name}");
            // Past the horizon, the unhandled resolved one is history.
            let got = candidates(&db, 200, 2).await.unwrap();
            assert_eq!(got.len(), 1, "{name}");
            assert_eq!(got[0].problem.id, ids[3], "{name}");
        }
    }
}
