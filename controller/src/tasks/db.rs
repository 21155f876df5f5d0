//! Task rows in the database (migration 0004): loading at start, one transaction per change.
//! Endpoints are written in multi-row inserts so a 100k-endpoint task is a few hundred
//! statements, not 100k round trips.

use super::{Runtime, TaskRecord};
use crate::registry::narrow;
use anyhow::Context;
use rocemesh_proto::api::TaskEndpoint;
use rocemesh_store::Db;
use std::collections::BTreeMap;

type EndpointRow = (
    i64,
    i64,
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    i64,
);

/// Endpoint rows per INSERT: 8 binds each stays far below both engines' bind limits.
const ROWS_PER_INSERT: usize = 500;

/// Reads every task with its endpoints in spec order; all start in preload.
pub(crate) async fn load(db: &Db) -> anyhow::Result<Vec<TaskRecord>> {
    let task_rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, name FROM tasks ORDER BY id")
        .fetch_all(db.pool())
        .await
        .context("cannot load tasks")?;
    let mut tasks = BTreeMap::new();
    for (id, name) in task_rows {
        let id: u32 = narrow(id, "task id")?;
        tasks.insert(
            id,
            TaskRecord {
                id,
                name,
                endpoints: Vec::new(),
                spec_version: 0,
                runtime: Runtime::Preload,
            },
        );
    }
    let rows: Vec<EndpointRow> = sqlx::query_as(
        "SELECT task_id, pos, host, rnic, rail, namespace, pod, ready FROM task_endpoints ORDER BY task_id, pos",
    )
    .fetch_all(db.pool())
    .await
    .context("cannot load task endpoints")?;
    for (task_id, _pos, host, rnic, rail, namespace, pod, ready) in rows {
        let task_id: u32 = narrow(task_id, "task_endpoints.task_id")?;
        let task = tasks
            .get_mut(&task_id)
            .context("task endpoint row without its task")?;
        let rail = rail.map(|r| narrow(r, "task endpoint rail")).transpose()?;
        task.endpoints.push(TaskEndpoint {
            host,
            rnic,
            rail,
            namespace,
            pod,
            ready: ready != 0,
        });
    }
    Ok(tasks.into_values().collect())
}

/// Inserts a task and its endpoints; returns its id. Nothing is written when it fails.
pub(crate) async fn insert_task(
    db: &Db,
    name: &str,
    endpoints: &[TaskEndpoint],
    now_ms: i64,
) -> anyhow::Result<u32> {
    let mut tx = db.pool().begin().await?;
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO tasks (name, created_at_ms, updated_at_ms) VALUES ($1, $2, $2) RETURNING id",
    )
    .bind(name)
    .bind(now_ms)
    .fetch_one(&mut *tx)
    .await?;
    insert_endpoints(&mut tx, id, endpoints).await?;
    tx.commit().await?;
    narrow(id, "new task id")
}

/// Replaces a task's name and endpoints in one transaction.
pub(crate) async fn replace_task(
    db: &Db,
    id: u32,
    name: &str,
    endpoints: &[TaskEndpoint],
    now_ms: i64,
) -> anyhow::Result<()> {
    let id = i64::from(id);
    let mut tx = db.pool().begin().await?;
    sqlx::query("UPDATE tasks SET name = $1, updated_at_ms = $2 WHERE id = $3")
        .bind(name)
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM task_endpoints WHERE task_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    insert_endpoints(&mut tx, id, endpoints).await?;
    tx.commit().await?;
    Ok(())
}

async fn insert_endpoints(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    task_id: i64,
    endpoints: &[TaskEndpoint],
) -> anyhow::Result<()> {
    for (chunk_no, chunk) in endpoints.chunks(ROWS_PER_INSERT).enumerate() {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| {
                let b = r * 8;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7,
                    b + 8
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO task_endpoints (task_id, pos, host, rnic, rail, namespace, pod, ready) VALUES {}",
            values.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for (i, e) in chunk.iter().enumerate() {
            let pos = (chunk_no * ROWS_PER_INSERT + i) as i64;
            q = q
                .bind(task_id)
                .bind(pos)
                .bind(e.host.clone())
                .bind(e.rnic.clone())
                .bind(e.rail.map(i64::from))
                .bind(e.namespace.clone())
                .bind(e.pod.clone())
                .bind(i64::from(e.ready));
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Marks the endpoint at `pos` ready or not ready.
pub(crate) async fn set_ready(db: &Db, id: u32, pos: usize, ready: bool) -> anyhow::Result<()> {
    sqlx::query("UPDATE task_endpoints SET ready = $1 WHERE task_id = $2 AND pos = $3")
        .bind(i64::from(ready))
        .bind(i64::from(id))
        .bind(pos as i64)
        .execute(db.pool())
        .await?;
    Ok(())
}

/// Deletes a task and its endpoints.
pub(crate) async fn delete_task(db: &Db, id: u32) -> anyhow::Result<()> {
    let mut tx = db.pool().begin().await?;
    // Explicit endpoint delete too, as for RNICs: SQLite connections may lack foreign_keys.
    sqlx::query("DELETE FROM task_endpoints WHERE task_id = $1")
        .bind(i64::from(id))
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM tasks WHERE id = $1")
        .bind(i64::from(id))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
