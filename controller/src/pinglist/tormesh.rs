//! ToR-mesh lists (R-Pingmesh §4.1): every RNIC probes every other RNIC under its ToR,
//! which lets the analyzer tell a sick RNIC from a sick network (§4.3.2).

use super::{PortRange, target};
use crate::hash::stable_hash;
use crate::registry::RnicRecord;
use rocemesh_proto::api::PingTarget;

/// The ToR-mesh targets of `prober` within its ToR group, by target id. The source port
/// of each (prober, target) pair is fixed by a hash so the pair keeps its ECMP path.
pub(crate) fn targets(
    group: &[&RnicRecord],
    prober: &RnicRecord,
    ports: PortRange,
) -> Vec<PingTarget> {
    group
        .iter()
        .filter(|t| t.id != prober.id)
        .map(|t| {
            let h = stable_hash(&[b"tormesh", &prober.id.to_le_bytes(), &t.id.to_le_bytes()]);
            target(t, ports.pick(h))
        })
        .collect()
}
