//! The `problems` table: insert, update, load the active ones at start, query.

use anyhow::Context;
use rocemesh_proto::api::{ComponentKind, Evidence, Priority, Problem, ProblemKind, ProblemState};
use rocemesh_store::Db;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;

const COLUMNS: &str = "id, kind, component_kind, component, state, confidence, network, \
    first_seen_ms, last_seen_ms, resolved_ms, evidence";
/// Written by the impact loop (migration 0005), only read here.
const IMPACT_COLUMNS: &str = "priority, affected_tasks";

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

/// Stores a new problem; returns its id.
pub async fn insert(db: &Db, p: &Problem) -> anyhow::Result<i64> {
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
        .fetch_one(db.pool())
        .await
        .with_context(|| format!("storing problem {:?} {}", p.kind, p.component))?;
    Ok(id)
}

/// Rewrites the mutable fields of a stored problem.
pub async fn update(db: &Db, p: &Problem) -> anyhow::Result<()> {
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
    .execute(db.pool())
    .await
    .with_context(|| format!("updating problem {}", p.id))?;
    Ok(())
}

fn decode(r: &sqlx::any::AnyRow) -> anyhow::Result<Problem> {
    let kind: ProblemKind = parse(&r.try_get::<String, _>(1)?, "problem kind")?;
    let evidence: String = r.try_get(10)?;
    let network: i64 = r.try_get(6)?;
    let (priority, affected_tasks) = decode_impact(r, 11)?;
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
        evidence: serde_json::from_str::<Evidence>(&evidence)
            .context("problem evidence is not valid JSON")?,
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

/// Copies the stored priority and affected tasks onto `list` (live problems are kept in
/// memory by the tracker, but the impact loop writes these columns in the database).
pub async fn attach_impact(db: &Db, list: &mut [Problem]) -> anyhow::Result<()> {
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
    let rows = sqlx::query(&sql)
        .fetch_all(db.pool())
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

/// Stored problems in `state` (and of `priority`, if given) last seen at or after
/// `since_ms`, most recent first.
pub async fn query(
    db: &Db,
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
        .fetch_all(db.pool())
        .await
        .context("querying problems")?;
    rows.iter().map(decode).collect()
}

/// One stored problem.
pub async fn get(db: &Db, id: i64) -> anyhow::Result<Option<Problem>> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS}, {IMPACT_COLUMNS} FROM problems WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db.pool())
    .await
    .context("reading a problem")?;
    row.as_ref().map(decode).transpose()
}

/// Every active problem (to carry them over an analyzer restart).
pub async fn load_active(db: &Db) -> anyhow::Result<Vec<Problem>> {
    query(db, StateFilter::Active, None, i64::MIN, u32::MAX).await
}

/// Rows per multi-row statement of [`save_liveness`] (three parameters each).
const LIVENESS_CHUNK: usize = 300;

/// Saves (host id, epoch, last upload ms) rows; a stored row is only ever moved forward.
pub async fn save_liveness(db: &Db, rows: &[(u32, u32, i64)]) -> anyhow::Result<()> {
    for chunk in rows.chunks(LIVENESS_CHUNK) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
            .collect();
        let sql = format!(
            "INSERT INTO host_liveness (host_id, epoch, last_upload_ms) VALUES {} \
             ON CONFLICT (host_id) DO UPDATE SET epoch = excluded.epoch, \
             last_upload_ms = excluded.last_upload_ms \
             WHERE host_liveness.last_upload_ms < excluded.last_upload_ms",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for &(host, epoch, at) in chunk {
            q = q.bind(i64::from(host)).bind(i64::from(epoch)).bind(at);
        }
        q.execute(db.pool()).await.context("saving host liveness")?;
    }
    Ok(())
}

/// Every saved (host id, epoch, last upload ms).
pub async fn load_liveness(db: &Db) -> anyhow::Result<Vec<(u32, u32, i64)>> {
    let rows = sqlx::query("SELECT host_id, epoch, last_upload_ms FROM host_liveness")
        .fetch_all(db.pool())
        .await
        .context("loading host liveness")?;
    rows.iter()
        .map(|r| {
            let host: i64 = r.try_get(0)?;
            let epoch: i64 = r.try_get(1)?;
            Ok((
                u32::try_from(host).context("host id out of range in host_liveness")?,
                u32::try_from(epoch).context("epoch out of range in host_liveness")?,
                r.try_get(2)?,
            ))
        })
        .collect()
}
