//! Stored problems for the tests of this and other crates (feature `testing`): rows the
//! diagnosis would have filed, with the priority the impact loop would have set.

use rocemesh_proto::api::{ComponentKind, Priority, Problem, ProblemKind, ProblemState};
use rocemesh_store::{Assessment, Db};

/// Stores a link-fault problem on `link` in `state` (`active`, `resolved`) with
/// `priority` (`P0`..`P2`, or not assessed); returns its id.
pub async fn insert_link_problem(
    db: &Db,
    link: &str,
    state: &str,
    priority: Option<&str>,
) -> anyhow::Result<i64> {
    let state: ProblemState = serde_json::from_value(serde_json::Value::String(state.into()))?;
    let problem = Problem {
        id: 0,
        kind: ProblemKind::LinkFault,
        component_kind: ComponentKind::Link,
        component: link.to_string(),
        state,
        confidence: 0.9,
        network: true,
        first_seen_ms: 0,
        last_seen_ms: 0,
        resolved_ms: None,
        evidence: Default::default(),
        priority: None,
        affected_tasks: Vec::new(),
    };
    let id = db.problems().insert(&problem).await?;
    if let Some(p) = priority {
        let priority =
            Priority::parse(p).ok_or_else(|| anyhow::anyhow!("unknown priority {p:?}"))?;
        db.problems()
            .set_assessments(&[Assessment {
                id,
                priority,
                affected_json: None,
                tasks: &[],
            }])
            .await?;
    }
    Ok(id)
}
