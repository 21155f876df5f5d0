//! Stored problems for the tests of this and other crates (feature `testing`): rows the
//! diagnosis would have filed, with the priority the impact loop would have set.

use rocemesh_store::Db;

/// Stores a link-fault problem on `link` in `state` (`active`, `resolved`) with
/// `priority` (`P0`..`P2`, or not assessed); returns its id.
pub async fn insert_link_problem(
    db: &Db,
    link: &str,
    state: &str,
    priority: Option<&str>,
) -> anyhow::Result<i64> {
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO problems (kind, component_kind, component, state, confidence, network, \
         first_seen_ms, last_seen_ms, evidence, priority) \
         VALUES ('link_fault', 'link', $1, $2, 0.9, 1, 0, 0, '{}', $3) RETURNING id",
    )
    .bind(link)
    .bind(state)
    .bind(priority)
    .fetch_one(db.pool())
    .await?;
    Ok(id)
}
