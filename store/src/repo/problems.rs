//! The `problems` table and its `problem_tasks` index (migrations 0003 and 0005): the
//! diagnosis files and updates problems, the impact loop sets their priority and the
//! tasks they affect, the API, alerts and metrics read them.

use crate::Db;
use anyhow::Context;
use rocemesh_proto::api::{ComponentKind, Evidence, Priority, Problem, ProblemKind, ProblemState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;

const COLUMNS: &str = "id, kind, component_kind, component, state, confidence, network, \
    first_seen_ms, last_seen_ms, resolved_ms, evidence";
/// Written by the impact loop, read with the rest.
const IMPACT_COLUMNS: &str = "priority, affected_tasks";

/// The `problems` repository of a [`Db`].
#[derive(Debug, Clone, Copy)]
pub struct Problems<'a> {
    db: &'a Db,
}

impl Db {
    /// The problems and the tasks they affect.
    pub fn problems(&self) -> Problems<'_> {
        Problems { db: self }
    }
}

/// The snake_case name serde gives a unit enum variant.
fn name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn parse<T: DeserializeOwned>(s: &str, what: &str) -> anyhow::Result<T> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .with_context(|| format!("unknown {what} {s:?} in the problems table"))
}

/// How a row's decorations (evidence, priority, affected tasks) are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decode {
    /// A malformed one is an error.
    Strict,
    /// A malformed one reads as empty (alerts: a bad decoration is not worth a lost alert).
    Lenient,
}

/// Decodes `COLUMNS, IMPACT_COLUMNS`.
fn decode(r: &sqlx::any::AnyRow, mode: Decode) -> anyhow::Result<Problem> {
    let kind: ProblemKind = parse(&r.try_get::<String, _>(1)?, "problem kind")?;
    let evidence: String = r.try_get(10)?;
    let network: i64 = r.try_get(6)?;
    let (priority, affected_tasks, evidence) = match mode {
        Decode::Strict => {
            let (priority, tasks) = decode_impact(r, 11)?;
            let evidence = serde_json::from_str::<Evidence>(&evidence)
                .context("problem evidence is not valid JSON")?;
            (priority, tasks, evidence)
        }
        Decode::Lenient => {
            let priority: Option<String> = r.try_get(11)?;
            let tasks: Option<String> = r.try_get(12)?;
            (
                priority.as_deref().and_then(Priority::parse),
                tasks
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default(),
                serde_json::from_str::<Evidence>(&evidence).unwrap_or_default(),
            )
        }
    };
    Ok(Problem {
        id: r.try_get(0)?,
        kind,
        component_kind: parse::<ComponentKind>(&r.try_get::<String, _>(2)?, "component kind")?,
        component: r.try_get(3)?,
        state: parse::<ProblemState>(&r.try_get::<String, _>(4)?, "problem state")?,
        confidence: r.try_get(5)?,
        network: network != 0,
        first_seen_ms: r.try_get(7)?,
        last_seen_ms: r.try_get(8)?,
        resolved_ms: r.try_get(9)?,
        evidence,
        priority,
        affected_tasks,
    })
}

/// The impact columns starting at column `at`: priority and affected task ids.
fn decode_impact(r: &sqlx::any::AnyRow, at: usize) -> anyhow::Result<(Option<Priority>, Vec<u32>)> {
    let priority = r
        .try_get::<Option<String>, _>(at)?
        .map(|s| Priority::parse(&s).with_context(|| format!("unknown priority {s:?}")))
        .transpose()?;
    let tasks = match r.try_get::<Option<String>, _>(at + 1)? {
        Some(s) => serde_json::from_str(&s).context("affected_tasks is not a JSON id array")?,
        None => Vec::new(),
    };
    Ok((priority, tasks))
}

/// Which problems a query lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFilter {
    /// Active only.
    Active,
    /// Resolved only.
    Resolved,
    /// Both.
    All,
}

impl StateFilter {
    /// True when a problem in `s` passes.
    pub fn accepts(self, s: ProblemState) -> bool {
        match self {
            Self::Active => s == ProblemState::Active,
            Self::Resolved => s == ProblemState::Resolved,
            Self::All => true,
        }
    }
}

/// Active problems of one (kind, component kind, priority), for the metrics.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ActiveCount {
    /// The problem kind's stored name.
    pub kind: String,
    /// The component kind's stored name.
    pub component_kind: String,
    /// The priority's name; `None` until the impact loop assessed them.
    pub priority: Option<String>,
    /// How many.
    pub count: i64,
}

/// A stored problem as the impact loop reads it to assess it: decorations stay raw, so
/// one unreadable row is skipped (or its blame ignored) there instead of failing all.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AssessInput {
    /// Database id.
    pub id: i64,
    /// The component kind's stored name.
    pub component_kind: String,
    /// The blamed component.
    pub component: String,
    /// When it was first seen.
    pub first_seen_ms: i64,
    /// When it was resolved, if it was.
    pub resolved_ms: Option<i64>,
    /// The stored priority name.
    pub priority: Option<String>,
    /// The stored affected task ids, as JSON.
    pub affected_tasks: Option<String>,
    /// The stored evidence, as JSON.
    pub evidence: String,
}

/// One problem's new assessment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment<'a> {
    /// The problem's id.
    pub id: i64,
    /// Its priority.
    pub priority: Priority,
    /// The affected task ids as the JSON array stored with the problem (`None`: none).
    pub affected_json: Option<&'a str>,
    /// The affected task ids, indexed in `problem_tasks`.
    pub tasks: &'a [u32],
}

impl Problems<'_> {
    /// Stores a new problem; returns its id.
    pub async fn insert(&self, p: &Problem) -> anyhow::Result<i64> {
        let sql = format!(
            "INSERT INTO problems ({}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
            COLUMNS.trim_start_matches("id, ")
        );
        let evidence = serde_json::to_string(&p.evidence)?;
        let (id,): (i64,) = sqlx::query_as(&sql)
            .bind(name(&p.kind))
            .bind(name(&p.component_kind))
            .bind(p.component.as_str())
            .bind(name(&p.state))
            .bind(p.confidence)
            .bind(i64::from(p.network))
            .bind(p.first_seen_ms)
            .bind(p.last_seen_ms)
            .bind(p.resolved_ms)
            .bind(evidence)
            .fetch_one(self.db.pool())
            .await
            .with_context(|| format!("storing problem {:?} {}", p.kind, p.component))?;
        Ok(id)
    }

    /// Rewrites the mutable fields of a stored problem.
    pub async fn update(&self, p: &Problem) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE problems SET state = $1, confidence = $2, last_seen_ms = $3, resolved_ms = $4, \
             evidence = $5 WHERE id = $6",
        )
        .bind(name(&p.state))
        .bind(p.confidence)
        .bind(p.last_seen_ms)
        .bind(p.resolved_ms)
        .bind(serde_json::to_string(&p.evidence)?)
        .bind(p.id)
        .execute(self.db.pool())
        .await
        .with_context(|| format!("updating problem {}", p.id))?;
        Ok(())
    }

    /// Copies the stored priority and affected tasks onto `list` (live problems are kept
    /// in memory by the tracker, but the impact loop writes these columns).
    pub async fn attach_impact(&self, list: &mut [Problem]) -> anyhow::Result<()> {
        let ids: Vec<String> = list
            .iter()
            .filter(|p| p.id != 0)
            .map(|p| p.id.to_string())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        // Ids are integers from our own rows, so inlining them is safe.
        let sql = format!(
            "SELECT id, {IMPACT_COLUMNS} FROM problems WHERE id IN ({})",
            ids.join(",")
        );
        // The text differs with every set of ids: not kept prepared on its connection.
        let rows = sqlx::query(&sql)
            .persistent(false)
            .fetch_all(self.db.pool())
            .await
            .context("reading problem priorities")?;
        for r in &rows {
            let id: i64 = r.try_get(0)?;
            let (priority, tasks) = decode_impact(r, 1)?;
            if let Some(p) = list.iter_mut().find(|p| p.id == id) {
                p.priority = priority;
                p.affected_tasks = tasks;
            }
        }
        Ok(())
    }

    /// Stored problems in `state` (and of `priority`, if given) last seen at or after
    /// `since_ms`, most recent first.
    pub async fn query(
        &self,
        state: StateFilter,
        priority: Option<Priority>,
        since_ms: i64,
        limit: u32,
    ) -> anyhow::Result<Vec<Problem>> {
        let filter = match state {
            StateFilter::Active => "state = 'active' AND ",
            StateFilter::Resolved => "state = 'resolved' AND ",
            StateFilter::All => "",
        };
        // A closed enum's own name, never user text.
        let priority = priority
            .map(|p| format!("priority = '{}' AND ", p.as_str()))
            .unwrap_or_default();
        let sql = format!(
            "SELECT {COLUMNS}, {IMPACT_COLUMNS} FROM problems WHERE {filter}{priority}\
             last_seen_ms >= $1 ORDER BY last_seen_ms DESC, id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(since_ms)
            .bind(i64::from(limit))
            .fetch_all(self.db.pool())
            .await
            .context("querying problems")?;
        rows.iter().map(|r| decode(r, Decode::Strict)).collect()
    }

    /// One stored problem.
    pub async fn get(&self, id: i64) -> anyhow::Result<Option<Problem>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, {IMPACT_COLUMNS} FROM problems WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
        .context("reading a problem")?;
        row.as_ref().map(|r| decode(r, Decode::Strict)).transpose()
    }

    /// Every active problem (to carry them over an analyzer restart).
    pub async fn load_active(&self) -> anyhow::Result<Vec<Problem>> {
        self.query(StateFilter::Active, None, i64::MIN, u32::MAX)
            .await
    }

    /// Active problems counted by (kind, component kind, priority).
    pub async fn count_active(&self) -> anyhow::Result<Vec<ActiveCount>> {
        Ok(sqlx::query_as(
            "SELECT kind, component_kind, priority, COUNT(*) AS count FROM problems \
             WHERE state = 'active' GROUP BY kind, component_kind, priority",
        )
        .fetch_all(self.db.pool())
        .await?)
    }

    /// Active problems and those resolved at or after `resolved_since_ms` (at most
    /// `limit`, newest first), as the impact loop assesses them.
    pub async fn to_assess(
        &self,
        resolved_since_ms: i64,
        limit: i64,
    ) -> anyhow::Result<Vec<AssessInput>> {
        sqlx::query_as(
            "SELECT id, component_kind, component, first_seen_ms, resolved_ms, \
             priority, affected_tasks, evidence FROM problems \
             WHERE state = 'active' OR resolved_ms >= $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(resolved_since_ms)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
        .context("reading problems to assess")
    }

    /// Writes new assessments (priority, affected tasks and their index) in one
    /// transaction.
    pub async fn set_assessments(&self, changes: &[Assessment<'_>]) -> anyhow::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tx = self.db.pool().begin().await?;
        for a in changes {
            sqlx::query("UPDATE problems SET priority = $1, affected_tasks = $2 WHERE id = $3")
                .bind(a.priority.as_str())
                .bind(a.affected_json)
                .bind(a.id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM problem_tasks WHERE problem_id = $1")
                .bind(a.id)
                .execute(&mut *tx)
                .await?;
            for task in a.tasks {
                sqlx::query("INSERT INTO problem_tasks (problem_id, task_id) VALUES ($1, $2)")
                    .bind(a.id)
                    .bind(i64::from(*task))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await.context("storing problem priorities")?;
        Ok(())
    }

    /// P0/P1 problems affecting task `task` whose lifetime (until `now_ms` when still
    /// active) overlaps `[from, to]`, newest first, at most `limit`.
    pub async fn affecting_task(
        &self,
        task: u32,
        (from, to): (i64, i64),
        now_ms: i64,
        limit: i64,
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
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
        .context("reading the task's problems")?;
        let mut out = Vec::with_capacity(ids.len());
        for (id,) in ids {
            out.extend(self.get(id).await?);
        }
        Ok(out)
    }

    /// Active problems and those resolved at or after `resolved_since_ms`, by id after
    /// `after_id`, at most `limit`; a malformed decoration (evidence, priority, affected
    /// tasks) reads as empty.
    pub async fn live_or_resolved_since(
        &self,
        resolved_since_ms: i64,
        after_id: i64,
        limit: i64,
    ) -> anyhow::Result<Vec<Problem>> {
        let sql = format!(
            "SELECT {COLUMNS}, {IMPACT_COLUMNS} FROM problems \
             WHERE (state = 'active' OR (state = 'resolved' AND resolved_ms >= $1)) AND id > $2 \
             ORDER BY id LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(resolved_since_ms)
            .bind(after_id)
            .bind(limit)
            .fetch_all(self.db.pool())
            .await
            .context("reading problems")?;
        rows.iter().map(|r| decode(r, Decode::Lenient)).collect()
    }
}
