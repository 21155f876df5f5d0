//! ToR-mesh lists (R-Pingmesh §4.1): every RNIC probes the other RNICs under its ToR,
//! which lets the analyzer tell a sick RNIC from a sick network (§4.3.2).
//!
//! A list is capped at `max_targets` entries: under a larger ToR each prober gets a window
//! of its peers that moves on by `max_targets` every rotation, so the list stays linear in
//! the ToR's size while every pair is still probed within ceil((n - 1) / max_targets)
//! rotations.

use super::{PortRange, target};
use crate::hash::stable_hash;
use crate::registry::RnicRecord;
use rocemesh_proto::api::PingTarget;

/// The ToR-mesh targets of the RNIC at `index` of its ToR `group` (sorted by id) in
/// `rotation`, at most `max_targets` of them. The source port of each (prober, target)
/// pair is fixed by a hash so the pair keeps its ECMP path.
pub(crate) fn targets(
    group: &[&RnicRecord],
    index: usize,
    ports: PortRange,
    max_targets: usize,
    rotation: u64,
) -> Vec<PingTarget> {
    let n = group.len();
    let Some(prober) = group.get(index) else {
        return Vec::new();
    };
    let peers = n - 1;
    let take = peers.min(max_targets);
    // Offsets 1..=peers name the peers after the prober (wrapping); a window of `take`
    // consecutive offsets starts `take` further on every rotation.
    let start = if take < peers {
        ((rotation % peers as u64) * take as u64 % peers as u64) as usize
    } else {
        0
    };
    (0..take)
        .map(|j| {
            let offset = 1 + (start + j) % peers;
            let t = group[(index + offset) % n];
            let h = stable_hash(&[b"tormesh", &prober.id.to_le_bytes(), &t.id.to_le_bytes()]);
            target(t, ports.pick(h))
        })
        .collect()
}
