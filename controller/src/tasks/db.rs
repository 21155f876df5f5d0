//! Task rows through the store's inventory: every stored task starts in preload.

use super::{Runtime, TaskRecord};
use rocemesh_store::Db;

/// Reads every task with its endpoints in spec order; all start in preload.
pub(crate) async fn load(db: &Db) -> anyhow::Result<Vec<TaskRecord>> {
    Ok(db
        .inventory()
        .tasks()
        .await?
        .into_iter()
        .map(|t| TaskRecord {
            id: t.id,
            name: t.name,
            endpoints: t.endpoints,
            spec_version: 0,
            runtime: Runtime::Preload,
        })
        .collect())
}
