//! Registry rows through the store's inventory, placed under the topology in force.

use super::{HostRecord, Placement, RnicRecord};
use crate::topology::Topology;
use anyhow::Context;
use rocemesh_store::Db;

/// Reads every host and RNIC. RNIC ToRs are re-resolved against the current topology
/// file; rows whose ToR changed are rewritten so the analyzer sees the same ToRs.
pub(crate) async fn load(
    db: &Db,
    topology: &Topology,
) -> anyhow::Result<(Vec<HostRecord>, Vec<RnicRecord>)> {
    let (hosts, mut rnics) = db.inventory().hosts_and_rnics().await?;
    let host_names: std::collections::HashMap<u32, &str> =
        hosts.iter().map(|h| (h.id, h.name.as_str())).collect();
    let mut moved = Vec::new();
    for record in &mut rnics {
        let host = host_names
            .get(&record.host_id)
            .context("RNIC row without its host")?;
        let placed = Placement::of(record, host, topology);
        if !placed.same_as(record) {
            record.tor.clone_from(&placed.tor);
            record.rail = placed.rail;
            moved.push(placed);
        }
    }
    if !moved.is_empty() {
        tracing::info!(
            rnics = moved.len(),
            "topology changed since last run: rewriting RNIC ToRs"
        );
        save_placement(db, &moved).await?;
    }
    Ok((hosts, rnics))
}

/// Writes new places (ToR, rail) of RNICs in one transaction.
pub(crate) async fn save_placement(db: &Db, moved: &[Placement]) -> anyhow::Result<()> {
    let rows: Vec<(u32, &str, Option<u32>)> = moved
        .iter()
        .map(|p| (p.id, p.tor.as_str(), p.rail))
        .collect();
    db.inventory().save_placement(&rows).await
}
